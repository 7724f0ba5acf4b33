"""The Arrow types of :mod:`arrow_gpu.testing.strategies` that pyarrow cannot build alone:
the two interval types it has no factory for, and the labelled extension type."""

from __future__ import annotations

import ctypes

import pyarrow as pa

from arrow_gpu.testing.c_structs import SCHEMA_RELEASE, ArrowSchema

# ---------------------------------------------------------------------------
# Interval types that pyarrow cannot create directly
# ---------------------------------------------------------------------------


_ARROW_FLAG_NULLABLE = 2


@SCHEMA_RELEASE
def _release_schema(schema: ctypes._Pointer) -> None:
    # The strings belong to Python objects, so releasing only marks the struct.
    schema.contents.release = SCHEMA_RELEASE()


def _type_from_format(format_string: bytes) -> pa.DataType:
    """Import a leaf type from its C data interface format string."""
    schema = ArrowSchema(
        format=format_string, flags=_ARROW_FLAG_NULLABLE, release=_release_schema
    )
    return pa.DataType._import_from_c(ctypes.addressof(schema))


_MONTH_INTERVAL = _type_from_format(b"tiM")
_DAY_TIME_INTERVAL = _type_from_format(b"tiD")


def month_interval() -> pa.DataType:
    """Return Arrow's ``month_interval`` type, which pyarrow has no factory for.

    >>> str(month_interval())
    'month_interval'
    """
    return _MONTH_INTERVAL


def day_time_interval() -> pa.DataType:
    """Return Arrow's ``day_time_interval`` type, which pyarrow has no factory for.

    >>> str(day_time_interval())
    'day_time_interval'
    """
    return _DAY_TIME_INTERVAL


# pyarrow has no Array class for these two types, so arrays of them are built
# from integers of the same layout and then re-typed (see _arrays.top_level_array).
_PROXIES = ((_MONTH_INTERVAL, pa.int32()), (_DAY_TIME_INTERVAL, pa.int64()))


def proxy_of(type: pa.DataType) -> pa.DataType | None:
    """The stand-in type for an opaque interval type, else ``None``."""
    return next((proxy for opaque, proxy in _PROXIES if type == opaque), None)


# ---------------------------------------------------------------------------
# Extension type
# ---------------------------------------------------------------------------

EXTENSION_NAME = "arrow_gpu.testing.labelled"


class LabelledType(pa.ExtensionType):
    """Extension type: values of a storage type plus a free-text label (a unit, say).

    The label travels in the extension metadata, so it exercises metadata
    passing as well as storage handling.

    >>> LabelledType(pa.int32(), "metres").label
    'metres'
    """

    def __init__(self, storage_type: pa.DataType, label: str = "") -> None:
        self.label = label
        super().__init__(storage_type, EXTENSION_NAME)

    def __arrow_ext_serialize__(self) -> bytes:
        return self.label.encode()

    @classmethod
    def __arrow_ext_deserialize__(
        cls, storage_type: pa.DataType, serialized: bytes
    ) -> LabelledType:
        return cls(storage_type, serialized.decode())

    # pyarrow's default equality ignores the metadata and compares classes,
    # which would break after a module reload; compare what is on the wire.
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, pa.ExtensionType):
            return NotImplemented
        return (
            other.extension_name == EXTENSION_NAME
            and other.storage_type == self.storage_type
            and other.__arrow_ext_serialize__() == self.__arrow_ext_serialize__()
        )

    def __ne__(self, other: object) -> bool:
        # Needed too: the base class's __ne__ would not consult __eq__.
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        return hash((EXTENSION_NAME, self.storage_type, self.label))

    def __repr__(self) -> str:
        return f"LabelledType({self.storage_type}, label={self.label!r})"


def register_extension_types() -> None:
    """Register :class:`LabelledType` with pyarrow; safe to call any number of times.

    Registration lets IPC and the C data interface rebuild the type.  An
    existing registration (from an earlier import of this module) is replaced
    so that the registered class is always the current one.

    >>> register_extension_types(); register_extension_types()
    """
    try:
        pa.register_extension_type(LabelledType(pa.null()))
    except pa.ArrowKeyError:
        pa.unregister_extension_type(EXTENSION_NAME)
        pa.register_extension_type(LabelledType(pa.null()))


register_extension_types()
