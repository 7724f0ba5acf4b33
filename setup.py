"""Builds the native core against the pyarrow installed in the build environment.

The extension links to that pyarrow's libarrow (whose soname changes every major), so the
built package requires the same pyarrow major; the version is recorded for the import check.

The native core's sources compile in parallel, one per core (``MAX_JOBS`` or
``build_ext --parallel N`` sets how many), through ccache when it is on PATH
(``ARROW_GPU_NO_CCACHE=1`` turns that off).
"""
import glob
import os
import shutil
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import setuptools
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

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


with open(os.path.join("arrow_gpu", "_util", "build_info.py"), "w") as out:
    out.write(f'"""Written by setup.py."""\nPYARROW_VERSION = "{pa.__version__}"\n')

native = sorted(glob.glob(os.path.join("arrow_gpu", "_native", "*", "*.cc")))
extension = Extension(
    "arrow_gpu._cuda",
    sources=[os.path.join("arrow_gpu", "_cuda.pyx"), *native],
    # pyarrow's Cython headers include numpy's.
    include_dirs=[pa.get_include(), np.get_include(), os.path.join("arrow_gpu", "_native")],
    depends=glob.glob(os.path.join("arrow_gpu", "_cython", "*.px[di]")),
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


def compile_jobs(requested: int | bool | None) -> int:
    """How many sources compile at once: ``--parallel``, else MAX_JOBS, else every core."""
    if requested and requested is not True:
        return int(requested)
    if os.environ.get("MAX_JOBS"):
        return max(1, int(os.environ["MAX_JOBS"]))
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


class ParallelBuildExt(build_ext):
    """build_ext that compiles one extension's sources side by side, largest first (the
    Cython module is most of the work: starting it first keeps the other core busy with the
    rest), and through ccache when it is on PATH."""

    def build_extensions(self) -> None:
        compiler = self.compiler
        if not os.environ.get("ARROW_GPU_NO_CCACHE") and shutil.which("ccache"):
            for name in ("compiler_so", "compiler_so_cxx"):
                command = getattr(compiler, name, None)
                if command and os.path.basename(command[0]) != "ccache":
                    compiler.set_executable(name, ["ccache", *command])
        jobs = compile_jobs(self.parallel)

        def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=False,
                    extra_preargs=None, extra_postargs=None, depends=None):
            # CCompiler.compile, with its loop over the sources run on a pool of threads.
            macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)
            stale = sorted((obj for obj in objects if obj in build),
                           key=lambda obj: os.path.getsize(build[obj][0]), reverse=True)

            def compile_one(obj: str) -> None:
                source, extension = build[obj]
                compiler._compile(obj, source, extension, cc_args, extra_postargs, pp_opts)

            with ThreadPoolExecutor(max_workers=jobs) as pool:
                list(pool.map(compile_one, stale))  # list(): the first failure raises here
            return objects

        compiler.compile = compile
        super().build_extensions()


setup(
    cmdclass={"build_ext": ParallelBuildExt},
    py_modules=["_arrow_gpu_hook"],
    ext_modules=cythonize([extension], language_level=3),
    install_requires=[f"pyarrow>={PYARROW_MAJOR},<{PYARROW_MAJOR + 1}", "numpy>=1.21"],
)
