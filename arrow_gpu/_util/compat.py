"""The import-time check that the native core matches the installed pyarrow."""

import importlib.metadata
import os
import shlex
import sys

import pyarrow


def check_pyarrow_version() -> None:
    """Raise ImportError if no native core of this install fits the installed pyarrow.

    A core links to ``libarrow.so.<major>00``; loading it against another major would fail
    obscurely or crash, so refuse clearly instead, with the command that rebuilds it. A
    source build has the one core of the pyarrow it was built with; a release wheel one per
    supported major. The error names arrow_gpu as the module that failed, so that
    ``python -m arrow_gpu`` reports it in one line rather than as a traceback.
    """
    try:
        from arrow_gpu._util.build_info import PYARROW_MAJORS, PYARROW_VERSION
    except ImportError:  # a source checkout that was never built (or built before majors)
        raise ImportError("arrow_gpu's native core is not built. Build it against the "
                          f"installed pyarrow with: {rebuild_command()}",
                          name="arrow_gpu") from None
    installed = int(pyarrow.__version__.split(".")[0])
    if installed in PYARROW_MAJORS:
        return
    python = shlex.quote(sys.executable)
    if len(PYARROW_MAJORS) == 1:
        built = f"was built against pyarrow {PYARROW_VERSION}"
        supported = f"'pyarrow=={PYARROW_MAJORS[0]}.*'"
        works = "its native core works with one pyarrow major only"
    else:
        built = ("carries native cores for pyarrow "
                 + ", ".join(map(str, PYARROW_MAJORS[:-1])) + f" and {PYARROW_MAJORS[-1]}")
        supported = f"'pyarrow>={min(PYARROW_MAJORS)},<{max(PYARROW_MAJORS) + 1}'"
        works = "none of them works with it"
    raise ImportError(
        f"arrow_gpu {built} but pyarrow {pyarrow.__version__} is installed, and {works}. "
        f"Rebuild it against the installed pyarrow: {rebuild_command()} "
        f"(or install a pyarrow it was built for: {python} -m pip install {supported})",
        name="arrow_gpu",
    )


def rebuild_command() -> str:
    """The shell command that builds this install of arrow_gpu against the installed pyarrow.

    Without build isolation, so that the build sees the installed pyarrow rather than the
    newest; that needs the build tools installed first. A checkout (an editable install) is
    rebuilt in place; any other install from source, never from a cached or published wheel
    (those were built against some other pyarrow).
    """
    pip = f"{shlex.quote(sys.executable)} -m pip"
    build_tools = f"{pip} install cython 'setuptools>=77'"
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this is _util/
    checkout = os.path.dirname(package)
    if os.path.isfile(os.path.join(checkout, "setup.py")):
        return f"{build_tools} && {pip} install --no-build-isolation -e {shlex.quote(checkout)}"
    try:
        requirement = f"arrow_gpu=={importlib.metadata.version('arrow_gpu')}"
    except importlib.metadata.PackageNotFoundError:  # not installed by pip: any release
        requirement = "arrow_gpu"
    return (f"{build_tools} && {pip} install --no-build-isolation --no-cache-dir "
            f"--force-reinstall --no-deps --no-binary arrow_gpu {requirement}")
