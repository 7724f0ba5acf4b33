"""The build backend: setuptools', plus a compiler check up front and the start-up hook in
every wheel it builds.

The native core is C++20. A missing or too old compiler would otherwise fail deep in a long
build log, so a tiny C++20 program is compiled first, by the compiler setuptools will use.

``arrow_gpu.pth`` (one line, ``import _arrow_gpu_hook``) makes ``import pyarrow.cuda`` work
in any interpreter of the environment without importing arrow_gpu first. setuptools cannot
place a file at the root of site-packages, and its editable wheels carry only its own path
finder, so the file is added here to regular and editable wheels alike.
"""

import base64
import hashlib
import os
import tempfile
import zipfile

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403 - every other hook as setuptools has it

HOOK_FILE = "arrow_gpu.pth"
HOOK_LINE = b"import _arrow_gpu_hook\n"

# C++20 in the language and the library, as GCC 10 and Clang 10 have it.
CXX20_PROBE = """\
#include <concepts>
#include <span>
template <std::integral T> constexpr T twice(T value) { return value * 2; }
int probe(std::span<const int> values) { return twice(static_cast<int>(values.size())); }
"""


def get_requires_for_build_wheel(config_settings=None):
    requires = _setuptools.get_requires_for_build_wheel(config_settings)
    # A wheel of several pyarrow majors' cores fetches their pyarrow wheels with pip, which
    # an isolated build environment does not have.
    if os.environ.get("ARROW_GPU_PYARROW_MAJORS"):
        requires = [*requires, "pip"]
    return requires


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    require_cxx20_compiler()
    name = _setuptools.build_wheel(wheel_directory, config_settings, metadata_directory)
    add_start_up_hook(os.path.join(wheel_directory, name))
    return name


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    require_cxx20_compiler()
    name = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    add_start_up_hook(os.path.join(wheel_directory, name))
    return name


def require_cxx20_compiler() -> None:
    """Exit with the fix unless the compiler setuptools will use compiles C++20."""
    # setuptools provides distutils (Python 3.12 has none); the backend imported it above.
    from distutils.ccompiler import new_compiler
    from distutils.errors import CCompilerError, DistutilsExecError
    from distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)  # CC, CXX and the flags, as build_ext sets them
    with tempfile.TemporaryDirectory() as directory:
        source = os.path.join(directory, "cxx20_probe.cc")
        with open(source, "w") as out:
            out.write(CXX20_PROBE)
        try:
            compiler.compile([source], output_dir=directory, extra_postargs=["-std=c++20"])
        except (CCompilerError, DistutilsExecError) as error:
            # Newer setuptools compile C++ with compiler_so_cxx (CXX), older ones with CC.
            command = getattr(compiler, "compiler_so_cxx", None) or compiler.compiler_so
            raise SystemExit(
                f"arrow_gpu's native core needs a C++20 compiler (GCC 10 or newer, or Clang 10 "
                f"or newer), and '{command[0]}' could not compile a C++20 test program "
                f"({error}). Install one, e.g. apt-get install g++ (Debian, Ubuntu) or "
                f"dnf install gcc-c++ (Fedora, RHEL), or choose one with the CXX and CC "
                f"environment variables (CXX=g++-12 CC=gcc-12), then build again.") from None


def add_start_up_hook(wheel_path: str) -> None:
    """Rewrite the wheel with ``arrow_gpu.pth`` at its root, listed in its RECORD."""
    with zipfile.ZipFile(wheel_path) as wheel:
        entries = [(info, wheel.read(info)) for info in wheel.infolist()]
    digest = base64.urlsafe_b64encode(hashlib.sha256(HOOK_LINE).digest()).rstrip(b"=").decode()
    record_line = f"{HOOK_FILE},sha256={digest},{len(HOOK_LINE)}\n".encode()
    with zipfile.ZipFile(wheel_path, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr(HOOK_FILE, HOOK_LINE)
        for info, data in entries:
            if info.filename.endswith(".dist-info/RECORD"):
                data = record_line + data
            wheel.writestr(info, data)
