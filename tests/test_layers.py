"""scripts/check-layers: the package's layers hold, and the script sees each kind of breach."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def check(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(root / "scripts" / "check-layers")],
                          capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the sources check-layers reads."""
    shutil.copytree(ROOT / "arrow_gpu", tmp_path / "arrow_gpu",
                    ignore=shutil.ignore_patterns("*.so", "*.cpp", "__pycache__"))
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "check-layers", tmp_path / "scripts")
    return tmp_path


def test_the_package_keeps_its_layers() -> None:
    result = check(ROOT)
    assert result.returncode == 0, result.stdout


BREACHES = {
    "an upward include": ("arrow_gpu/_native/driver/env.cc", '#include "engine/copy_engine.h"\n',
                          "driver/env.cc includes engine/copy_engine.h, a higher layer"),
    "Python.h below python/": ("arrow_gpu/_native/cuda/context.h", "#include <Python.h>\n",
                               "cuda/context.h includes Python.h; only python/ may"),
    "a file outside the layer folders": ("arrow_gpu/_native/loose.h", "#pragma once\n",
                                         "loose.h is in no layer folder"),
    # The same header in two extern blocks went unseen (cuda/caching_allocator.h was).
    "a header declared twice": ("arrow_gpu/_cython/extern_cuda.pxd",
                                'cdef extern from "cuda/context.h" namespace "arrow_gpu":\n'
                                "    int Twice()\n",
                                "cuda/context.h is declared twice (_cython/extern_cuda.pxd, "
                                "_cython/extern_cuda.pxd)"),
    "a header declared with another layer's": ("arrow_gpu/_cython/extern_cuda.pxd",
                                               'cdef extern from "engine/planner.h":\n'
                                               "    int Elsewhere()\n",
                                               "_cython/extern_cuda.pxd declares engine/planner."
                                               "h; the engine layer is declared in _cython/"
                                               "extern_engine.pxd"),
    "a header declared by a .pxi": ("arrow_gpu/_cython/stream.pxi",
                                    'cdef extern from "driver/env.h":\n    int Here()\n',
                                    "_cython/stream.pxi declares driver/env.h"),
    "a declared header that does not exist": ("arrow_gpu/_cython/extern_driver.pxd",
                                              'cdef extern from "driver/gone.h":\n'
                                              "    int Gone()\n",
                                              "declares driver/gone.h, which does not exist"),
    "an upward import": ("arrow_gpu/device.py", "from arrow_gpu import dask\n",
                         "device -> dask runs up"),
    "an upward import from a .pxi": ("arrow_gpu/_cython/stream.pxi",
                                     "from arrow_gpu.io import Kind\n", "_cuda -> io runs up"),
    "a private name of another module": ("arrow_gpu/io.py", "from arrow_gpu import transfer_options\n"
                                         "x = transfer_options._LOG\n",
                                         "io takes private transfer_options._LOG"),
    "a private attribute of _cuda's class": ("arrow_gpu/io.py", "from arrow_gpu import _cuda\n"
                                             "y = _cuda.Context._thing\n",
                                             "io takes private _cuda.Context._thing"),
    "testing reaching into the package": ("arrow_gpu/testing/profiles.py",
                                          "from arrow_gpu.transfer import _as_pyarrow\n",
                                          "testing.profiles takes private transfer._as_pyarrow"),
    "an upward import within a folder": ("arrow_gpu/_ipc/sealed.py",
                                         "from arrow_gpu._ipc import handoff\n",
                                         "_ipc.sealed -> _ipc.handoff runs up"),
    # "from arrow_gpu import m" in a .pxi went unseen before the imports were read as Python.
    "a .pxi importing a module by name": ("arrow_gpu/_cython/stream.pxi",
                                          "from arrow_gpu import io\n", "_cuda -> io runs up"),
    "an upward import from a .pxi into a folder": ("arrow_gpu/_cython/stream.pxi",
                                                   "from arrow_gpu._compute import take\n",
                                                   "_cuda -> _compute.take runs up"),
    "a private name of a folder's module": ("arrow_gpu/io.py",
                                            "from arrow_gpu._ipc.handoff import _HEADER\n",
                                            "io takes private _ipc.handoff._HEADER"),
    "the ground importing above it": ("arrow_gpu/_util/handles.py",
                                      "from arrow_gpu import device\n",
                                      "_util.handles -> device: _util imports nothing else"),
    "a private module at the top": ("arrow_gpu/_loose.py", "LOOSE = 1\n",
                                    "folder: _loose is a private module at the top"),
    "a folder of no stated purpose": ("arrow_gpu/_misc/loose.py", "LOOSE = 1\n",
                                      "folder: _misc.loose is in _misc/, which is not in"),
    "a folder's __init__ that imports": ("arrow_gpu/_ipc/__init__.py",
                                         "from arrow_gpu._ipc import wire\n",
                                         "folder: _ipc/__init__.py imports"),
}


@pytest.mark.parametrize("breach", sorted(BREACHES))
def test_check_layers_finds(tree: Path, breach: str) -> None:
    path, line, message = BREACHES[breach]
    target = tree / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text((target.read_text() if target.exists() else "") + "\n" + line)
    result = check(tree)
    assert result.returncode == 1
    assert message in result.stdout, result.stdout
