"""Device IO: files over device buffers, IPC messages with bodies on the device, and
record batches shared between processes through CUDA IPC.

Sharing, in two processes (see ``export_batch`` for what keeps the memory alive)::

    # producer                                  # consumer
    shared = export_batch(device_table)         table = import_batch(payload, copy=True)
    send(shared.payload)  # any channel         send_done()  # the table is its own
    wait_until_consumer_is_done()
    shared.close()
"""

from __future__ import annotations

import warnings
from typing import NoReturn, Optional, Union

import pyarrow as pa

import arrow_gpu._ipc.handoff as _handoff
import arrow_gpu._ipc.keys as _keys
import arrow_gpu._ipc.metadata as _ipc_metadata
from arrow_gpu._cuda import (BufferReader, BufferWriter, CudaBuffer, _host_decoding_reader,
                             read_message, serialize_record_batch, write_to_new_buffer)
from arrow_gpu._util.arrow_data import Kind, kind_of
from arrow_gpu.device import Context, DeviceLike, as_context, context_of
from arrow_gpu.transfer import to_device

__all__ = [
    "BufferReader", "BufferWriter", "serialize_record_batch", "read_message",
    "read_record_batch", "write_to_new_buffer", "SharedBatch", "export_batch", "import_batch",
    "set_handoff_key",
]

Tabular = Union[pa.RecordBatch, pa.Table]


def read_record_batch(buffer: pa.Buffer, schema: pa.Schema, *,
                      dictionary_memo: Optional[pa.ipc.DictionaryMemo] = None,
                      pool: Optional[pa.MemoryPool] = None) -> pa.RecordBatch:
    """Read a record batch message (``serialize_record_batch``'s output) on the device.

    The batch's buffers are zero-copy slices of ``buffer``, which they keep alive. Only
    metadata is read on the host. A compressed message (written with
    ``IpcWriteOptions(compression=...)``) is copied to the host, decompressed there by
    pyarrow and the batch moved to ``buffer``'s device: its buffers are new device memory.

    Parameters
    ----------
    buffer : CudaBuffer or pyarrow.Buffer
        Device memory that starts with the message.
    schema : pyarrow.Schema
        The schema the batch was written with.
    dictionary_memo : pyarrow.ipc.DictionaryMemo, optional
        The dictionaries of dictionary-encoded fields, read before.
    pool : pyarrow.MemoryPool, optional
        The pool Arrow reads the message with (the default pool if omitted).

    Returns
    -------
    pyarrow.RecordBatch
        The batch, on the device; its ``device_type`` says CUDA.

    Raises
    ------
    TypeError
        If ``schema`` is not a Schema, or ``buffer`` is not a device buffer
        (``pyarrow.ArrowTypeError`` for a host one).
    pyarrow.ArrowInvalid
        If the message is not a record batch, or ``schema`` does not fit it: another
        number of arrays, buffers too short for it, or fixed-width values narrower than
        the message's where its buffer sizes show that.
    EOFError
        If ``buffer`` holds no message.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import Context
    >>> batch = pa.record_batch({"x": [1, 2, 3]})
    >>> device = read_record_batch(serialize_record_batch(batch, Context(0)), batch.schema)
    >>> device.device_type, device.copy_to(pa.default_cpu_memory_manager()).equals(batch)
    (<DeviceAllocationType.CUDA: 2>, True)
    >>> two = pa.schema([("x", pa.int64()), ("y", pa.int64())])
    >>> read_record_batch(serialize_record_batch(batch, Context(0)), two)
    Traceback (most recent call last):
    ...
    pyarrow.lib.ArrowInvalid: the schema describes 2 arrays ... but the message holds 1
    """
    if not isinstance(schema, pa.Schema):
        raise TypeError(f"schema must be a pyarrow.Schema, got '{type(schema).__name__}'")
    reader = _host_decoding_reader(buffer)
    message = read_message(reader, pool)
    if message.type != "record batch":
        raise pa.ArrowInvalid(f"expected a record batch message, got a {message.type} message")
    # Arrow reads a message with more columns than the schema without complaint.
    expected, found = sum(_field_nodes(field.type) for field in schema), _message_nodes(message)
    if expected != found:
        raise pa.ArrowInvalid(f"the schema describes {expected} arrays (nested ones counted) "
                              f"but the message holds {found}")
    _check_value_widths(message, schema)
    batch = pa.ipc.read_record_batch(message, schema, dictionary_memo)
    # Checks buffer sizes against the schema (metadata only, no device data is read).
    batch.validate()
    if message.body is not None and message.body.is_cpu:  # decompressed on the host
        return to_device(batch, CudaBuffer.from_buffer(buffer).context)
    return _marked_on_device(batch)


def _field_nodes(type_: pa.DataType) -> int:
    """How many IPC field nodes an array of this type has (itself and its descendants)."""
    if isinstance(type_, pa.BaseExtensionType):
        type_ = type_.storage_type
    return 1 + sum(_field_nodes(type_.field(i).type) for i in range(type_.num_fields))


def _message_nodes(message: pa.ipc.Message) -> int:
    """The number of field nodes a record batch message holds."""
    return len(_ipc_metadata.record_batch_layout(message.metadata.to_pybytes()).nodes)


def _ipc_buffers(type_: pa.DataType) -> Optional[list[int]]:
    """The IPC buffers of one array of this type, children excluded: the byte width of each
    fixed-width value buffer, 0 for any other buffer; None for layouts not modelled here."""
    if isinstance(type_, pa.BaseExtensionType):
        type_ = type_.storage_type
    if isinstance(type_, pa.DictionaryType):
        type_ = type_.index_type
    if pa.types.is_null(type_) or pa.types.is_run_end_encoded(type_):
        return []
    if pa.types.is_boolean(type_):
        return [0, 0]
    if (pa.types.is_binary(type_) or pa.types.is_string(type_) or
            pa.types.is_large_binary(type_) or pa.types.is_large_string(type_)):
        return [0, 0, 0]
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_map(type_):
        return [0, 0]
    if pa.types.is_fixed_size_list(type_) or pa.types.is_struct(type_):
        return [0]
    if pa.types.is_union(type_):
        return [0] if type_.mode == "sparse" else [0, 0]
    try:
        width = type_.byte_width
    except ValueError:
        return None  # views and anything newer: not checked
    return [0, width] if width > 0 else None


def _check_value_widths(message: pa.ipc.Message, schema: pa.Schema) -> None:
    """Refuses a schema whose fixed-width values are narrower than the message's.

    Arrow's writers send a value buffer whole while it fits in the values' length padded to
    64 bytes (Arrow's alignment) and cut it to that length otherwise, so a longer one was
    written for a wider type: read with this schema, its bytes would be reinterpreted.
    """
    nodes, buffers, compressed, _ = _ipc_metadata.record_batch_layout(
        message.metadata.to_pybytes())
    if compressed:
        return  # compressed bodies: lengths are those of the compressed bytes
    node, buffer = 0, 0

    def visit(name: str, type_: pa.DataType) -> bool:
        nonlocal node, buffer
        layout = _ipc_buffers(type_)
        if layout is None or node >= len(nodes):
            return False
        length = nodes[node][0]
        node += 1
        for width in layout:
            if buffer >= len(buffers):
                return False
            declared = buffers[buffer][1]
            buffer += 1
            if width and declared > (length * width + 63) // 64 * 64:
                raise pa.ArrowInvalid(
                    f"column {name!r} has {length} values of {type_} ({width} bytes each) but "
                    f"the message holds {declared} bytes for them: it was written with a "
                    "wider type; read it with the schema it was written with")
        storage = type_.storage_type if isinstance(type_, pa.BaseExtensionType) else type_
        if isinstance(storage, pa.DictionaryType):
            return True
        return all(visit(f"{name}.{storage.field(i).name}", storage.field(i).type)
                   for i in range(storage.num_fields))

    for schema_field in schema:
        if not visit(schema_field.name, schema_field.type):
            return


def _marked_on_device(batch: pa.RecordBatch) -> pa.RecordBatch:
    """The batch, with the device type of its columns.

    Arrow's IPC readers label every batch CPU; pyarrow's guards against touching device
    memory on the host trust that label, so it must be right.
    """
    if batch.num_columns == 0:
        return batch
    return pa.RecordBatch.from_arrays(batch.columns, schema=batch.schema)


class SharedBatch:
    """A record batch or table exported for another process of this host (CUDA IPC).

    Make one with ``export_batch``. The exporting process must keep this object open until
    every importer is done with the data: ``close()`` (or the end of a ``with`` block, or
    garbage collection) drops the exporter's reference, and once no array of this process
    still uses the memory it is freed (or reused by the caching allocator) — under the
    importers if they still read it.

    Attributes
    ----------
    kind : str
        ``"batch"`` or ``"table"``.
    nbytes : int
        The device bytes the export shares.
    payload : bytes
        What another process needs to import the data: plain bytes, safe to pickle or send
        through a pipe.

    Raises
    ------
    TypeError
        On pickling: send ``payload`` instead.

    Examples
    --------
    >>> import pyarrow as pa
    >>> with export_batch(pa.table({"x": [1, 2]})) as shared:
    ...     shared.kind, shared.closed
    ('table', False)
    >>> shared.closed
    True
    """

    def __init__(self, export: _handoff.Export, kind: str) -> None:
        self._export = export
        self.kind = kind
        self.nbytes: int = export.nbytes
        self.payload: bytes = export.payload
        _handoff.register(export)

    @property
    def closed(self) -> bool:
        """Whether ``close()`` was called: the exporter no longer holds the memory."""
        return self._export.closed

    def close(self) -> None:
        """Stop holding the device memory (importers must be done with it).

        The memory is freed once no array of this process uses it. Closing twice does
        nothing; the payload cannot be imported afterwards in this process.

        Examples
        --------
        >>> import pyarrow as pa
        >>> shared = export_batch(pa.record_batch({"x": [1]}))
        >>> shared.close()
        >>> shared.closed
        True
        """
        self._export.close()

    def __enter__(self) -> "SharedBatch":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __reduce__(self) -> NoReturn:
        raise TypeError("a SharedBatch owns device memory and cannot be pickled; send its "
                        ".payload to the other process instead")

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<arrow_gpu.io.SharedBatch {self.kind} nbytes={self.nbytes} {state}>"


def _renamed_ctx(device: Optional[DeviceLike], ctx: Optional[Context],
                 function: str) -> Optional[DeviceLike]:
    """``device``, or ``ctx`` given by its old name (with a DeprecationWarning)."""
    if ctx is None:
        return device
    if device is not None:
        raise TypeError(f"{function}() takes device or ctx, not both; pass device only")
    warnings.warn(f"{function}(ctx=...) is now {function}(device=...), which also takes a "
                  "device number; ctx= goes in the next release", DeprecationWarning,
                  stacklevel=3)
    return ctx


def export_batch(data: Tabular, device: Optional[DeviceLike] = None, *,
                 isolated: bool = False, ctx: Optional[Context] = None) -> SharedBatch:
    """Export a record batch or table for another process of this host (CUDA IPC).

    Device data on ``device`` is exported where it lives: nothing is copied, and the
    ``SharedBatch`` holds ``data``'s buffers until it is closed. Anything else (host data,
    data on another device, memory the driver cannot export such as a stream-ordered
    pool's or foreign memory) is first copied into one device buffer of ``device``, which
    is exported instead. Dictionaries, lists and structs travel too. Another process gets
    the data back with ``import_batch(shared.payload)``.

    CUDA IPC opens whole driver allocations, and a buffer may share its allocation with
    other buffers of this process: the importer can reach their bytes. With
    ``isolated=True`` the data is copied into a driver allocation of its own (rounded up to
    2 MiB, zero past the data), so the importer sees nothing else.

    Parameters
    ----------
    data : pyarrow.RecordBatch or pyarrow.Table
        The data, on the host or on the device.
    device : DeviceLike, optional
        The device the importer reads from, in any spelling
        ``arrow_gpu.device.as_context`` accepts: the context of ``data`` if omitted and it
        is on the device, otherwise device 0's primary context.
    isolated : bool, default False
        Whether the exported memory shares no driver allocation with anything else.
    ctx : Context, optional
        Deprecated: the former name of ``device``.

    Returns
    -------
    SharedBatch
        The export; send its ``payload`` to the other process.

    Raises
    ------
    TypeError
        If ``data`` is not a RecordBatch or Table, or ``device`` is not a spelling of a
        device.
    MemoryError
        If a copy is needed and the device has not enough free memory
        (``pyarrow.ArrowMemoryError``).

    Examples
    --------
    >>> import pyarrow as pa
    >>> batch = pa.record_batch({"x": [1, 2, 3]})
    >>> with export_batch(batch, device=0) as shared:
    ...     back = import_batch(shared.payload)  # the same process works too
    ...     back.copy_to(pa.default_cpu_memory_manager()).equals(batch)
    True
    """
    kind = kind_of(data)
    if kind not in (Kind.RECORD_BATCH, Kind.TABLE):
        raise TypeError(f"expected a pyarrow RecordBatch or Table, got '{type(data).__name__}'")
    device = _renamed_ctx(device, ctx, "export_batch")
    context = as_context(device) if device is not None else context_of(data) or Context(0)
    name = "table" if kind is Kind.TABLE else "batch"
    return SharedBatch(_handoff.Export(data, context, name, isolated), name)


def set_handoff_key(key: Optional[bytes]) -> None:
    """Set the key this process seals and opens shared device memory with (``export_batch``
    payloads, ``arrow_gpu.dask`` frames, serialized IPC handles).

    Every record is checksummed with a secret key, so that a record someone edits (or makes)
    without it is refused before the CUDA driver, which does not check the handles it opens,
    sees it. By default the processes of one user on one host share a random key kept in
    ``~/.cache/arrow_gpu/handoff.key`` (mode 0600; ``$XDG_CACHE_HOME`` moves it); the
    ``ARROW_GPU_HANDOFF_KEY`` environment variable (hex) sets one for every process that
    sees it, say containers of other users on one host. The exporting and the importing
    process need the same key.

    Parameters
    ----------
    key : bytes or None
        1 to 32 bytes, best random and secret; ``None`` goes back to the environment
        variable's or the user's key.

    Raises
    ------
    TypeError
        If ``key`` is not bytes.
    ValueError
        If ``key`` is empty or longer than 32 bytes.

    Examples
    --------
    >>> import os
    >>> set_handoff_key(os.urandom(32))  # give the same key to the importing processes
    >>> set_handoff_key(None)
    """
    _keys.set_handoff_key(key)


def import_batch(payload: bytes, device: Optional[DeviceLike] = None, *,
                 copy: bool = False, ctx: Optional[Context] = None) -> Tabular:
    """Get the batch or table that ``export_batch`` shared, on this process's device.

    With ``copy=True`` every buffer is copied once, straight from the exporter's memory
    (device to device, or peer to peer across devices), into one new allocation of
    ``device``: the result is this process's own, and the exporter may close its
    ``SharedBatch`` as soon as this returns. This is how ``arrow_gpu.dask`` receives.

    By default (``copy=False``) nothing is copied: the result's buffers are views of the
    exporter's memory. Its contract: the exporter keeps its ``SharedBatch`` open (and so the
    data unchanged) for as long as the result or anything sliced from it is used here;
    bytes read after the exporter closed it or exited are undefined.

    The exporter's allocations are opened once and the most recently used stay open, so
    repeated hand-offs from the same allocations pay no open; they are closed once
    unused and no longer recent, or once their exporter is seen to have exited. A payload
    can be imported any number of times.

    Parameters
    ----------
    payload : bytes
        ``SharedBatch.payload`` from the exporting process (this one works too).
    device : DeviceLike, optional
        Where the data lands, in any spelling ``arrow_gpu.device.as_context`` accepts; the
        primary context of the device the data was exported from (by its number in the
        exporter) if omitted.
    copy : bool, default False
        Whether to copy the data into new memory of ``device``.
    ctx : Context, optional
        Deprecated: the former name of ``device``.

    Returns
    -------
    pyarrow.RecordBatch or pyarrow.Table
        What was exported, on the device.

    Raises
    ------
    TypeError
        If ``device`` is not a spelling of a device.
    ValueError
        If ``payload`` is not an ``export_batch`` payload or is corrupt (truncated,
        extended or changed since it was made), of another format version, the exporter
        closed it (seen in the exporting process only), or the exporting process has
        exited (before or while the data was read).
    OSError
        If CUDA cannot open or copy the memory for another reason.

    Examples
    --------
    >>> import pyarrow as pa
    >>> from arrow_gpu import Context
    >>> with export_batch(pa.record_batch({"x": [1, 2]})) as shared:
    ...     own = import_batch(shared.payload, Context(0), copy=True)
    >>> own.copy_to(pa.default_cpu_memory_manager()).column(0).to_pylist()  # still valid
    [1, 2]
    >>> import_batch(b"not a payload")
    Traceback (most recent call last):
    ...
    ValueError: not an arrow_gpu shared batch payload: it does not start with b'AGPU-BAT'; ...
    """
    parsed = _handoff.parse(payload)
    device = _renamed_ctx(device, ctx, "import_batch")
    context = as_context(device if device is not None else parsed.device_number)
    return _handoff.receive(parsed, context, copy)
