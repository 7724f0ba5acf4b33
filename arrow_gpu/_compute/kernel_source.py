"""The CUDA C source of the device kernels of ``arrow_gpu.compute``: ``_compute/kernels.cu``,
shipped as package data and compiled at run time by NVRTC (``kernels``)."""

from importlib import resources

NAME = "kernels.cu"
SOURCE = (resources.files("arrow_gpu") / "_compute" / NAME).read_text(encoding="utf-8")
