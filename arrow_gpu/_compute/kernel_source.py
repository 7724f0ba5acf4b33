"""The CUDA C source of the device kernels of ``arrow_gpu.compute``: ``_compute/kernels.cu``
and the headers it includes (``_compute/*.cuh``), shipped as package data and compiled at run
time by NVRTC (``kernels``), which is handed the headers with the source."""

from importlib import resources

NAME = "kernels.cu"
_FOLDER = resources.files("arrow_gpu") / "_compute"
SOURCE = (_FOLDER / NAME).read_text(encoding="utf-8")
# Every header beside kernels.cu, by the name it is included by.
HEADERS = {entry.name: entry.read_text(encoding="utf-8")
           for entry in sorted(_FOLDER.iterdir(), key=lambda entry: entry.name)
           if entry.name.endswith(".cuh")}
# Every file of the source, kernels.cu first: what the compile reads, and its cache key.
FILES = {NAME: SOURCE, **HEADERS}
