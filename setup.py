"""Builds the native core against the pyarrow installed in the build environment.

The extension links to that pyarrow's libarrow (whose soname changes every major), so the
built package requires the same pyarrow major; the version is recorded for the import check.

A release wheel is built with ``ARROW_GPU_PYARROW_MAJORS=23,24,25,26`` instead: one core per
major, each against that major's headers, Cython declarations and libarrow (from its wheel
for this Python, fetched with ``pip download``), under ``arrow_gpu/_cores/pyarrow<major>/``,
and a module ``arrow_gpu/_cuda.py`` that loads the one of the installed pyarrow
(``arrow_gpu/_util/native_cores.py``): the wheel then works with any of those majors.

The native core's sources compile in parallel, one per core (``MAX_JOBS`` or
``build_ext --parallel N`` sets how many), through ccache when it is on PATH
(``ARROW_GPU_NO_CCACHE=1`` turns that off).
"""
import glob
import os
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import setuptools
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

# pyproject.toml's SPDX license string needs setuptools 77; older ones fail obscurely.
if int(setuptools.__version__.split(".")[0]) < 77:
    raise SystemExit(f"building arrow_gpu needs setuptools>=77 (found {setuptools.__version__}): "
                     "pip install --upgrade setuptools")

PYARROW_MAJOR = int(pa.__version__.split(".")[0])
MAJORS = sorted({int(m) for m in os.environ.get("ARROW_GPU_PYARROW_MAJORS", "").split(",") if m})
if MAJORS and MAJORS != list(range(MAJORS[0], MAJORS[-1] + 1)):
    raise SystemExit(f"ARROW_GPU_PYARROW_MAJORS must be consecutive majors, got {MAJORS}: the "
                     "wheel requires pyarrow from the first to the last")


def soname(library_dir: str, stem: str) -> str:
    """The versioned file name of one of pyarrow's shared libraries, e.g. libarrow.so.2600."""
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(library_dir, f"{stem}.so.*")))
    if not names:
        raise RuntimeError(f"{stem}.so.* not found in {library_dir}; is pyarrow installed?")
    return min(names, key=len)


def unpacked_pyarrow(major: int) -> str:
    """The folder holding package ``pyarrow`` of the newest ``major`` for this Python: its
    wheel, fetched and unpacked under build/."""
    folder = os.path.join("build", "pyarrow", str(major))
    if not os.path.isdir(os.path.join(folder, "pyarrow")):
        wheels = os.path.join("build", "pyarrow", "wheels")
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", "--dest", wheels, f"pyarrow=={major}.*"],
                       check=True)
        wheel = max(glob.glob(os.path.join(wheels, f"pyarrow-{major}.*.whl")))
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(folder)
    return folder


def native_core(name: str, pyx: str, root: str | None, rpath: str) -> Extension:
    """The extension ``name`` of Cython ``pyx`` and the native sources against the pyarrow
    package in folder ``root`` (None: the installed one)."""
    include = pa.get_include() if root is None else os.path.join(root, "pyarrow", "include")
    library_dir = LIBRARY_DIR if root is None else os.path.join(root, "pyarrow")
    return Extension(
        name,
        sources=[pyx, *sorted(glob.glob(os.path.join("arrow_gpu", "_native", "*", "*.cc")))],
        # pyarrow's Cython headers include numpy's.
        include_dirs=[include, np.get_include(), os.path.join("arrow_gpu", "_native")],
        depends=glob.glob(os.path.join("arrow_gpu", "_cython", "*.px[di]")),
        language="c++",
        extra_compile_args=["-std=c++20", "-fvisibility=hidden", "-Wno-unused-function"],
        extra_link_args=[
            f"-L{library_dir}",
            f"-l:{soname(library_dir, 'libarrow')}",
            f"-l:{soname(library_dir, 'libarrow_python')}",
            # libarrow_python links it too: no library more loaded
            f"-l:{soname(library_dir, 'libparquet')}",
            "-ldl",
            # pyarrow is imported first and has loaded these; the relative path (pyarrow next
            # to the installed package) is a fallback. No build path: the build is gone.
            f"-Wl,-rpath,{rpath}",
            # Debug information and the symbol table are most of the size; .dynsym stays.
            "-Wl,--strip-all",
        ],
        define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
    )


def major_core(major: int) -> Extension:
    """The core of pyarrow ``major``: the C++ of module arrow_gpu._cuda against that major's
    Cython declarations, built into the folder of the cores (still loaded under its own
    name). Made when build_ext runs, not for metadata: it may fetch pyarrow."""
    root = None if major == PYARROW_MAJOR else unpacked_pyarrow(major)
    # A bare extension: cythonize merges the options of the extensions of one file it saw.
    [generated] = cythonize([Extension("arrow_gpu._cuda", [PYX], language="c++")],
                            language_level=3, build_dir=os.path.join("build", f"cython{major}"),
                            include_path=[] if root is None else [root], force=True, quiet=True)
    return native_core(core_name(major), generated.sources[0], root, "$ORIGIN/../../../pyarrow")


def core_name(major: int) -> str:
    return f"arrow_gpu._cores.pyarrow{major}._cuda"


LIBRARY_DIR = pa.get_library_dirs()[0]
PYX = os.path.join("arrow_gpu", "_cuda.pyx")
if not MAJORS:
    extensions = cythonize([native_core("arrow_gpu._cuda", PYX, None, "$ORIGIN/../pyarrow")],
                           language_level=3)
else:  # named now, made by build_ext
    extensions = [Extension(core_name(major), [PYX]) for major in MAJORS]

with open(os.path.join("arrow_gpu", "_util", "build_info.py"), "w") as out:
    out.write(f'"""Written by setup.py."""\nPYARROW_VERSION = "{pa.__version__}"\n'
              f"PYARROW_MAJORS = {tuple(MAJORS or [PYARROW_MAJOR])!r}\n")


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

    def run(self) -> None:
        # The named cores made now, in place (setuptools has finalized them): here only, as
        # metadata and the sdist's file list finalize this command too.
        for major, ext in zip(MAJORS, self.extensions):
            made = major_core(major)
            for option in ("sources", "include_dirs", "extra_link_args", "extra_compile_args",
                           "define_macros", "depends", "language"):
                setattr(ext, option, getattr(made, option))
        super().run()

    def build_extension(self, ext: Extension) -> None:
        # The cores of several majors compile the same sources: objects apart, by core.
        base = self.build_temp
        if MAJORS:
            self.build_temp = os.path.join(base, ext.name)
        try:
            super().build_extension(ext)
        finally:
            self.build_temp = base


class BuildPy(build_py):
    """build_py, adding the module that loads the installed pyarrow's core in a wheel of
    several majors' cores."""

    def run(self) -> None:
        super().run()
        if MAJORS:
            with open(os.path.join(self.build_lib, "arrow_gpu", "_cuda.py"), "w") as out:
                out.write('"""Loads the native core of the installed pyarrow\'s major."""\n'
                          "import pyarrow\n"
                          "from arrow_gpu._util.native_cores import load_core\n"
                          "load_core(__name__, int(pyarrow.__version__.split('.')[0]))\n")


lowest, highest = (MAJORS[0], MAJORS[-1]) if MAJORS else (PYARROW_MAJOR, PYARROW_MAJOR)
setup(
    cmdclass={"build_ext": ParallelBuildExt, "build_py": BuildPy},
    py_modules=["_arrow_gpu_hook"],
    ext_modules=extensions,
    install_requires=[f"pyarrow>={lowest},<{highest + 1}", "numpy>=1.21"],
)
