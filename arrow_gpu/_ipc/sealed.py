"""Sealed records: the bytes one process hands another to share device memory (IPC handles,
shared batch payloads), with a versioned header and a keyed checksum.

A record is ``magic (8 bytes) | format version (uint32) | body | BLAKE2b-128 digest`` of
everything before the digest, keyed with the hand-off key (arrow_gpu._ipc.keys). Opening a
record whose bytes changed on the way would map other memory than the exporter meant (a
neighbouring buffer of the same driver allocation), and a forged driver handle can corrupt
the opener's memory inside the driver, so a record that is truncated, extended, altered or
sealed without the key is refused before anything is opened.

A sized record (``seal_sized``) is one whose body starts with its own length (uint64), for
bodies whose length the reader cannot know beforehand.
"""

from __future__ import annotations

import hashlib
import struct

from arrow_gpu._ipc.keys import handoff_key

_VERSION = struct.Struct("<I")
_DIGEST_BYTES = 16


def _digest(data: bytes, key: bytes | None) -> bytes:
    return hashlib.blake2b(data, digest_size=_DIGEST_BYTES,
                           key=handoff_key() if key is None else key).digest()


def sealed_size(body_size: int) -> int:
    """The size of a record whose body is ``body_size`` bytes."""
    return 8 + _VERSION.size + body_size + _DIGEST_BYTES


def seal(magic: bytes, version: int, body: bytes, key: bytes | None = None) -> bytes:
    """The record of ``body``, tagged with ``magic`` (8 bytes) and ``version``, keyed with
    ``key`` (the hand-off key if None)."""
    data = magic + _VERSION.pack(version) + body
    return data + _digest(data, key)


def unseal(data: bytes, magic: bytes, version: int, body_size: int, what: str,
           remedy: str) -> bytes:
    """The body of a record that ``seal(magic, version, body)`` made, with ``body_size`` bytes.

    Raises ValueError naming ``what`` the record is and ``remedy`` (what to do) unless the
    record is exactly as sealed.
    """
    expected = sealed_size(body_size)
    if not data.startswith(magic):
        raise ValueError(f"not {what}: it does not start with {magic!r}; {remedy}")
    if len(data) >= len(magic) + _VERSION.size:
        (found,) = _VERSION.unpack_from(data, len(magic))
        if found != version:
            raise ValueError(f"{what} of format version {found}, but this arrow_gpu reads "
                             f"version {version}: export and open with the same arrow_gpu "
                             "version")
    if len(data) != expected:
        change = "truncated" if len(data) < expected else "extended"
        raise ValueError(f"{what} is corrupt: {len(data)} bytes where {expected} were sent "
                         f"(it was {change} on the way); {remedy}")
    if data[-_DIGEST_BYTES:] != _digest(data[:-_DIGEST_BYTES], None):
        raise ValueError(f"{what} is corrupt: its checksum does not match its bytes (they "
                         f"were changed on the way, or sealed with another hand-off key: "
                         f"processes that share device memory need the same one, which the "
                         f"processes of one user on one host have unless "
                         f"ARROW_GPU_HANDOFF_KEY or arrow_gpu.io.set_handoff_key says "
                         f"otherwise); {remedy}")
    return data[len(magic) + _VERSION.size:-_DIGEST_BYTES]


_SIZE = struct.Struct("<Q")


def seal_sized(magic: bytes, version: int, body: bytes, key: bytes | None = None) -> bytes:
    """The record of ``body`` of any length, its length written first."""
    return seal(magic, version, _SIZE.pack(_SIZE.size + len(body)) + body, key)


def unseal_sized(data: bytes, magic: bytes, version: int, what: str, remedy: str) -> bytes:
    """The body of a record that ``seal_sized(magic, version, body)`` made; raises as
    ``unseal`` does."""
    start = len(magic) + _VERSION.size
    size = _SIZE.size
    if len(data) >= start + _SIZE.size:
        size = max(size, _SIZE.unpack_from(data, start)[0])
    # An impossible length is one that was changed: refused as a length mismatch.
    size = min(size, len(data) + 1)
    return unseal(data, magic, version, size, what, remedy)[_SIZE.size:]
