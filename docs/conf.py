"""Sphinx configuration: the user guide (Markdown, through MyST) and the API reference,
generated from the docstrings (numpydoc style, through napoleon).

The API pages import arrow_gpu: build with the simulator where there is no GPU,
``ARROW_GPU_SIMULATOR=1 NUMBA_ENABLE_CUDASIM=1 sphinx-build -W --keep-going -b html docs out``.
"""

import importlib
from unittest import mock

import arrow_gpu

project = "arrow_gpu"
author = "arrow_gpu contributors"
copyright = "arrow_gpu contributors"  # noqa: A001 - Sphinx's name
release = version = arrow_gpu.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]

# numpydoc-style docstrings; their "Examples" stay doctest blocks.
napoleon_google_docstring = True  # arrow_gpu.testing's strategies use Google's style
napoleon_numpy_docstring = True
napoleon_use_rtype = False
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
# Signatures keep the annotations as written; the descriptions repeat the types in words.
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
# The device argument's union, by its name (the modules' annotations are strings).
autodoc_type_aliases = {"DeviceLike": "arrow_gpu.device.DeviceLike",
                        "IpcSource": "arrow_gpu.loading.IpcSource"}
# MyST: anchors for headings, so pages can link to sections (page.md#a-heading).
myst_heading_anchors = 3

# Docstrings name types loosely ("int, optional", "pyarrow.Table or DeviceReader"): those
# are prose for the reader, not cross-references to resolve.
nitpicky = False
# The compiled classes are documented once, under the package (arrow_gpu.Context), but the
# annotations name them by every module that re-exports them: any target is the same class.
suppress_warnings = ["ref.python"]


if arrow_gpu.using_simulator():
    # arrow_gpu.numba_memory plugs into the real driver's memory management, which Numba's
    # simulator lacks: its import refuses the simulator. Import it for its docstrings as if
    # on a GPU, with a stand-in for the base class the simulator does not have.
    HostOnlyCUDAMemoryManager = type("HostOnlyCUDAMemoryManager", (), {"__module__": "numba.cuda"})
    with mock.patch("numba.cuda.core.config.ENABLE_CUDASIM", False), \
            mock.patch("numba.cuda.HostOnlyCUDAMemoryManager", HostOnlyCUDAMemoryManager,
                       create=True):
        importlib.import_module("arrow_gpu.numba_memory")

html_theme = "furo"
html_title = f"arrow_gpu {release}"
