"""Devices claimed by the processes of one user on one host, to spread workers over them.

Each claiming process holds an exclusive ``flock`` on one slot file for as long as it lives
(the kernel drops it when the process ends, however it ends): slot ``k`` of device ``d``.
A process takes the first free slot in the order slot 0 of every device, then slot 1 of
every device, ...: workers started together (``dask worker --nworkers N``) land on
different devices, and more workers than devices share them evenly.

>>> import tempfile
>>> directory = tempfile.mkdtemp()
>>> first, second = claim_device(2, directory), claim_device(2, directory)
>>> first.device, second.device  # each holds its slot as another process would
(0, 1)
>>> os.close(first.fd); claim_device(2, directory).device  # a slot freed is taken again
0
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import tempfile
from dataclasses import dataclass

__all__ = ["Claim", "claim_device", "default_directory"]

_MOST_SLOTS = 256  # workers per device before a claim gives up


@dataclass(frozen=True)
class Claim:
    """A device held by this process while ``fd`` (its locked slot file) stays open."""

    device: int
    fd: int


def default_directory() -> str:
    """Where this user's slot files live: private to the user, one set per list of
    visible devices (processes that number the devices alike share it)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "*")
    key = hashlib.blake2b(visible.encode(), digest_size=6).hexdigest()
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return os.path.join(base, f"arrow_gpu-{os.getuid()}-devices-{key}")


def claim_device(count: int, directory: str | None = None) -> Claim:
    """Claim the least-claimed of devices ``0 .. count - 1``.

    Raises
    ------
    OSError
        If the slot files cannot be made, or every slot of every device is held.
    """
    directory = default_directory() if directory is None else directory
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for slot in range(_MOST_SLOTS):
        for device in range(count):
            path = os.path.join(directory, f"device-{device}-slot-{slot}")
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return Claim(device, fd)
    raise OSError(f"every slot of the {count} devices in {directory} is held: more than "
                  f"{_MOST_SLOTS} workers per device")
