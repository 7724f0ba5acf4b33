"""The import-time check that the native core matches the installed pyarrow."""

import importlib.metadata
import os
import shlex
import sys

import pyarrow


def check_pyarrow_version() -> None:
    """Raise ImportError if pyarrow's major differs from the one the core was built with.

    The core links to ``libarrow.so.<major>00``; loading it against another major would
    fail obscurely or crash, so refuse clearly instead, with the command that rebuilds it.
    The error names arrow_gpu as the module that failed, so that ``python -m arrow_gpu``
    reports it in one line rather than as a traceback.
    """
    try:
        from arrow_gpu._util.build_info import PYARROW_VERSION
    except ImportError:  # a source checkout that was never built
        raise ImportError("arrow_gpu's native core is not built. Build it against the "
                          f"installed pyarrow with: {rebuild_command()}",
                          name="arrow_gpu") from None
    built, installed = PYARROW_VERSION.split(".")[0], pyarrow.__version__.split(".")[0]
    if built != installed:
        python = shlex.quote(sys.executable)
        raise ImportError(
            f"arrow_gpu was built against pyarrow {PYARROW_VERSION} but pyarrow "
            f"{pyarrow.__version__} is installed, and its native core works with one pyarrow "
            f"major only. Rebuild it against the installed pyarrow: {rebuild_command()} "
            f"(or install the pyarrow it was built for: {python} -m pip install "
            f"'pyarrow=={built}.*')",
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
