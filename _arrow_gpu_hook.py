"""Lets ``import pyarrow.cuda`` work in any interpreter where arrow_gpu is installed.

A ``.pth`` file imports this tiny module at start-up; it only adds an import finder, at the
end of ``sys.meta_path`` so that a real ``pyarrow._cuda`` (a CUDA-enabled Arrow build) is
always found first. When nothing else provides ``pyarrow._cuda``, the finder imports
arrow_gpu, which serves it.

It runs in every interpreter of the environment, so it imports nothing at start-up: the
import protocol only needs objects with the right methods (``importlib.abc`` alone would add
tens of milliseconds to each start).
"""

import sys

_NAME = "pyarrow._cuda"


class _ServeFromArrowGpu:
    """Loader of ``pyarrow._cuda``: the module arrow_gpu registers under that name."""

    def create_module(self, spec):
        import arrow_gpu  # noqa: F401 - registers pyarrow._cuda in sys.modules

        module = sys.modules.get(_NAME)
        if module is None:  # a CUDA-enabled pyarrow appeared after all: let it load
            raise ImportError("arrow_gpu does not serve pyarrow._cuda here")
        return module

    def exec_module(self, module):
        pass


class PyarrowCudaFinder:
    """Finds ``pyarrow._cuda`` only when no earlier finder did."""

    def find_spec(self, name, path=None, target=None):
        if name != _NAME:
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, _ServeFromArrowGpu())

    def invalidate_caches(self):
        pass


def install() -> None:
    if not any(isinstance(finder, PyarrowCudaFinder) for finder in sys.meta_path):
        sys.meta_path.append(PyarrowCudaFinder())


install()
