"""Builds the native core against the pyarrow installed in the build environment.

The extension links to that pyarrow's libarrow (whose soname changes every major), so the
built package requires the same pyarrow major; the version is recorded for the import check.
"""
import glob
import os

import numpy as np
import pyarrow as pa
import setuptools
from Cython.Build import cythonize
from setuptools import Extension, setup

# pyproject.toml's SPDX license string needs setuptools 77; older ones fail obscurely.
if int(setuptools.__version__.split(".")[0]) < 77:
    raise SystemExit(f"building arrow_gpu needs setuptools>=77 (found {setuptools.__version__}): "
                     "pip install --upgrade setuptools")

PYARROW_MAJOR = int(pa.__version__.split(".")[0])
LIBRARY_DIR = pa.get_library_dirs()[0]


def soname(stem: str) -> str:
    """The versioned file name of one of pyarrow's shared libraries, e.g. libarrow.so.2600."""
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(LIBRARY_DIR, f"{stem}.so.*")))
    if not names:
        raise RuntimeError(f"{stem}.so.* not found in {LIBRARY_DIR}; is pyarrow installed?")
    return min(names, key=len)


with open(os.path.join("arrow_gpu", "_build_info.py"), "w") as out:
    out.write(f'"""Written by setup.py."""\nPYARROW_VERSION = "{pa.__version__}"\n')

native = sorted(glob.glob(os.path.join("arrow_gpu", "_native", "*", "*.cc")))
extension = Extension(
    "arrow_gpu._cuda",
    sources=[os.path.join("arrow_gpu", "_cuda.pyx"), *native],
    # pyarrow's Cython headers include numpy's.
    include_dirs=[pa.get_include(), np.get_include(), os.path.join("arrow_gpu", "_native")],
    depends=glob.glob(os.path.join("arrow_gpu", "*.pxi")),
    language="c++",
    extra_compile_args=["-std=c++20", "-fvisibility=hidden", "-Wno-unused-function"],
    extra_link_args=[
        f"-L{LIBRARY_DIR}",
        f"-l:{soname('libarrow')}",
        f"-l:{soname('libarrow_python')}",
        f"-l:{soname('libparquet')}",  # libarrow_python links it too: no library more loaded
        "-ldl",
        # pyarrow is imported first and has loaded these; the relative path (pyarrow next to
        # the installed package) is a fallback. No build path: the build environment is gone.
        "-Wl,-rpath,$ORIGIN/../pyarrow",
        # Debug information and the symbol table are most of the size; .dynsym stays.
        "-Wl,--strip-all",
    ],
    define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
)


setup(
    py_modules=["_arrow_gpu_hook"],
    ext_modules=cythonize([extension], language_level=3),
    install_requires=[f"pyarrow>={PYARROW_MAJOR},<{PYARROW_MAJOR + 1}", "numpy>=1.21"],
)
