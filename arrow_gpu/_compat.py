"""The import-time check that the native core matches the installed pyarrow."""

import pyarrow


def check_pyarrow_version() -> None:
    """Raise ImportError if pyarrow's major differs from the one the core was built with.

    The core links to ``libarrow.so.<major>00``; loading it against another major would
    fail obscurely or crash, so refuse clearly instead.
    """
    try:
        from arrow_gpu._build_info import PYARROW_VERSION
    except ImportError:  # a source checkout that was never built
        raise ImportError(
            "arrow_gpu's native core is not built. Build it against the installed pyarrow "
            "with: pip install --no-build-isolation -e ."
        ) from None
    built, installed = PYARROW_VERSION.split(".")[0], pyarrow.__version__.split(".")[0]
    if built != installed:
        raise ImportError(
            f"arrow_gpu was built against pyarrow {PYARROW_VERSION} but pyarrow "
            f"{pyarrow.__version__} is installed. Rebuild it against the installed pyarrow: "
            "pip install --no-build-isolation --force-reinstall --no-deps arrow_gpu "
            "(or, in a checkout, pip install --no-build-isolation -e .)"
        )
