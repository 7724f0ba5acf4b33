"""The hand-off key: the secret every sealed record (IPC handles, shared batch payloads) is
keyed with, so that only processes that hold it can make records another will open.

The CUDA driver does not check the handles it is given: a forged one can corrupt the
opening process's memory inside ``cuIpcOpenMemHandle``. A record that someone edits and
seals again without the key is refused before the driver sees it.

The key is, in order: one set with ``set_handoff_key``; the ``ARROW_GPU_HANDOFF_KEY``
environment variable (hex); else a random key kept in a file only its user can read
(``$XDG_CACHE_HOME/arrow_gpu/handoff.key``, ``~/.cache`` by default) and made on first use,
which every process of that user on that host shares.
"""

from __future__ import annotations

import os
import stat
import threading

KEY_BYTES = 32  # blake2b's largest key
ENVIRONMENT = "ARROW_GPU_HANDOFF_KEY"

_lock = threading.Lock()
_chosen: bytes | None = None  # set_handoff_key's
_default: bytes | None = None  # the environment's or the file's, read once


def handoff_key() -> bytes:
    """The key this process seals and opens records with."""
    global _default
    if _chosen is not None:
        return _chosen
    with _lock:
        if _default is None:
            _default = _from_environment() or _from_file(_key_path())
        return _default


def set_handoff_key(key: bytes | None) -> None:
    """Use ``key`` (1 to 32 bytes) for every record this process seals or opens from now on;
    ``None`` goes back to the environment's or the user's key file."""
    global _chosen
    if key is not None:
        if not isinstance(key, (bytes, bytearray)):
            raise TypeError(f"a hand-off key is bytes, not {type(key).__name__}")
        if not 1 <= len(key) <= KEY_BYTES:
            raise ValueError(f"a hand-off key has 1 to {KEY_BYTES} bytes, not {len(key)}")
        key = bytes(key)
    _chosen = key


def _from_environment() -> bytes | None:
    text = os.environ.get(ENVIRONMENT)
    if not text:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if not 1 <= len(key) <= KEY_BYTES:
        raise ValueError(f"{ENVIRONMENT} must be 2 to {2 * KEY_BYTES} hex digits")
    return key


def _key_path() -> str:
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "arrow_gpu", "handoff.key")


def _from_file(path: str) -> bytes:
    remedy = (f"set {ENVIRONMENT} to the same hex key in every process that shares device "
              "memory, or call arrow_gpu.io.set_handoff_key")
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        if not os.path.exists(path):
            _create(path)
        with open(path, "rb") as file:
            info = os.fstat(file.fileno())
            key = file.read()
    except OSError as error:
        raise OSError(f"cannot read or make the hand-off key file {path} ({error}); "
                      f"{remedy}") from error
    if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
        raise PermissionError(f"the hand-off key file {path} may be read or written by other "
                              f"users: make it yours with mode 0600 (or delete it), or "
                              f"{remedy}")
    if len(key) != KEY_BYTES:
        raise ValueError(f"the hand-off key file {path} holds {len(key)} bytes, not "
                         f"{KEY_BYTES}: delete it to make a new one, or {remedy}")
    return key


def _create(path: str) -> None:
    """Writes a new key to ``path`` unless another process did first: a whole file appears
    at once (linked from a private temporary one), so no reader sees part of a key."""
    temporary = f"{path}.{os.getpid()}.{threading.get_ident()}"
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(os.urandom(KEY_BYTES))
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass  # another process made it: theirs is the key
    finally:
        os.unlink(temporary)
