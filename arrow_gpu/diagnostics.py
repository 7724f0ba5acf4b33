"""What to paste into a bug report: ``python -m arrow_gpu`` prints :func:`report`.

It says which driver is in use (the NVIDIA driver or the simulator) and its CUDA version, the
devices with their memory and peer access, the versions of the libraries arrow_gpu works
with, who serves ``pyarrow.cuda``, the allocator with its counters, the transfer options and
the ``ARROW_GPU_*`` environment variables that are set. A part that fails (no driver, say)
is reported as the error it raised; the report itself never raises.

>>> text = report()
>>> text.splitlines()[0].startswith("arrow_gpu ")
True
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable

import pyarrow as pa

import arrow_gpu
from arrow_gpu import _cuda, memory_manager, transfer_options
from arrow_gpu._util.build_info import PYARROW_MAJORS, PYARROW_VERSION
from arrow_gpu.device import Context, device_count, using_simulator

__all__ = ["report"]


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def _gib(nbytes: int) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def _built_against() -> str:
    if len(PYARROW_MAJORS) == 1:
        return f"built against pyarrow {PYARROW_VERSION}"
    return "native cores for pyarrow " + ", ".join(map(str, PYARROW_MAJORS))


def _driver() -> str:
    if using_simulator():
        return "arrow_gpu host simulator (ARROW_GPU_SIMULATOR)"
    version = _cuda._driver_cuda_version()
    cuda = f"CUDA {version[0]}.{version[1]}" if version else "CUDA version unknown"
    library = os.environ.get("ARROW_GPU_DRIVER_LIBRARY") or "libcuda.so.1"
    return f"NVIDIA driver ({library}), {cuda}"


def _devices() -> list[str]:
    lines = []
    for ordinal in range(device_count()):
        device = _cuda._describe_device(ordinal)
        free, total = Context(ordinal).memory_info()
        peers = ", ".join(map(str, device["peers"])) or "none"
        lines.append(f"  {ordinal}: {device['name']}, {_gib(total)} total, {_gib(free)} free; "
                     f"peer access to: {peers}")
    return lines or ["  (none)"]


def _pyarrow_cuda() -> str:
    if arrow_gpu.serves_pyarrow_cuda:
        return "served by arrow_gpu"
    return "a CUDA-enabled pyarrow build (arrow_gpu steps aside)"


def _allocator() -> list[str]:
    stats = memory_manager.memory_stats(0)
    counters = ", ".join(f"{name}={value}" for name, value in stats.items()
                         if name not in ("allocator", "device_free_bytes", "device_total_bytes"))
    return [f"  {stats['allocator']}; device 0: {counters}"]


def _transfer_options() -> str:
    options = transfer_options.get_transfer_options()
    return ", ".join(f"{name}={value}" for name, value in sorted(options.items()))


def _environment() -> list[str]:
    names = sorted(name for name in os.environ
                   if name.startswith("ARROW_GPU_") or name == "NUMBA_ENABLE_CUDASIM")
    return [f"  {name}={os.environ[name]}" for name in names] or ["  (none set)"]


def _section(title: str, part: Callable[[], str | list[str]]) -> list[str]:
    """``title: value`` lines, or the error the part raised (the report goes on)."""
    try:
        value = part()
    except Exception as error:  # noqa: BLE001 - every failure is a fact worth reporting
        return [f"{title}: unavailable ({type(error).__name__}: {error})"]
    if isinstance(value, str):
        return [f"{title}: {value}"]
    return [f"{title}:", *value]


def report() -> str:
    """The diagnostic report, as text.

    A part that fails is reported as the error it raised; the report itself never raises.

    Returns
    -------
    str
        One fact a line: versions, simulator, driver, devices, allocator, transfer options
        and the ``ARROW_GPU_*`` environment variables that are set.

    Examples
    --------
    >>> "transfer options: " in report()
    True
    """
    lines = [
        f"arrow_gpu {arrow_gpu.__version__} ({_built_against()})",
        f"python {platform.python_version()} ({sys.executable}) on {platform.platform()}",
        f"pyarrow {pa.__version__}, numpy {_version('numpy')}, numba {_version('numba')}, "
        f"numba-cuda {_version('numba-cuda')}",
        *_section("pyarrow.cuda", _pyarrow_cuda),
        "CUDA device mappers: " + ("registered by arrow_gpu" if arrow_gpu.device_mappers_registered
                                   else "registered by another library"),
        *_section("simulator", lambda: "on" if using_simulator() else "off"),
        *_section("driver", _driver),
        *_section("devices", _devices),
        *_section("allocator", _allocator),
        *_section("transfer options", _transfer_options),
        "environment:", *_environment(),
    ]
    return "\n".join(lines)
