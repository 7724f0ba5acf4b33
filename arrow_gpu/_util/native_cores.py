"""The native core a wheel built for several pyarrow majors loads: the one of the installed pyarrow.

A source build makes one core, ``arrow_gpu/_cuda.*.so``, against the pyarrow it was built
with. A release wheel carries one core per supported pyarrow major instead, each compiled as
module ``arrow_gpu._cuda`` against that major's headers and libarrow, under
``arrow_gpu/_cores/pyarrow<major>/``, and a module ``arrow_gpu/_cuda.py`` that loads the
matching one in its own place: a pyarrow upgrade or downgrade within the supported majors
needs no rebuild. (Where both exist, Python imports the extension first, so a source build
never runs this.)
"""

from __future__ import annotations

import glob
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

__all__ = ["CORES", "core_path", "load_core"]

CORES = "_cores"  # the folder of the per-major cores, in the package


def core_path(major: int) -> str | None:
    """The core built for pyarrow ``major`` in this install, or None."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this is _util/
    folder = os.path.join(package, CORES, f"pyarrow{major}")
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        found = glob.glob(os.path.join(glob.escape(folder), f"_cuda{suffix}"))
        if found:
            return found[0]
    return None


def load_core(name: str, major: int) -> ModuleType:
    """Import the core built for pyarrow ``major`` as module ``name`` (``arrow_gpu._cuda``),
    in place of the module that calls this."""
    path = core_path(major)
    if path is None:
        raise ImportError(f"this arrow_gpu install has no native core for pyarrow {major}",
                          name=name)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # the import that runs the caller returns this module
    spec.loader.exec_module(module)
    return module
