"""Serves ``pyarrow._cuda`` so that ``import pyarrow.cuda`` works with pip's pyarrow.

pip wheels of pyarrow ship ``pyarrow/cuda.py``, which re-exports ten names from a compiled
``pyarrow._cuda`` that only CUDA-enabled Arrow builds have. arrow_gpu provides those names
as a module registered under that name, unless a real one exists.
"""

import importlib.machinery
import sys
import types

import pyarrow
import pyarrow.lib

import arrow_gpu._cuda as _cuda
import arrow_gpu.io as io

MODULE_NAME = "pyarrow._cuda"
EXPORTED = (
    "Context", "IpcMemHandle", "CudaBuffer", "HostBuffer", "BufferReader", "BufferWriter",
    "new_host_buffer", "serialize_record_batch", "read_message", "read_record_batch",
)


def native_pyarrow_cuda_exists() -> bool:
    """Whether this pyarrow was built with its own CUDA module."""
    if MODULE_NAME in sys.modules:
        return getattr(sys.modules[MODULE_NAME], "__arrow_gpu__", False) is False
    # A compiled module in pyarrow's own folder; the start-up import hook is not asked.
    return importlib.machinery.PathFinder.find_spec(MODULE_NAME, pyarrow.__path__) is not None


def install() -> bool:
    """Register arrow_gpu as ``pyarrow._cuda``; False if a real one is there instead."""
    if native_pyarrow_cuda_exists():
        return False
    module = types.ModuleType(MODULE_NAME, "CUDA support for pyarrow, served by arrow_gpu.")
    setattr(module, "__arrow_gpu__", True)  # noqa: B010 - a marker, not a declared attribute
    for name in EXPORTED:
        setattr(module, name, getattr(_cuda, name, None) or getattr(io, name))
    sys.modules[MODULE_NAME] = module
    pyarrow._cuda = module
    # pyarrow caches a failed `import pyarrow.cuda`; forget it so CUDA imports now succeed.
    if getattr(pyarrow.lib, "__cuda_loaded", None) is not True:
        setattr(pyarrow.lib, "__cuda_loaded", None)
    return True
