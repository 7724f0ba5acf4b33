"""The CUDA C source of the device kernels of ``arrow_gpu.compute``: ``_compute/kernels.cu``
and the headers it includes (``_compute/*.cuh``), shipped as package data and compiled at run
time by NVRTC (``kernels``), which is handed the headers with the source."""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Traversable

NAME = "kernels.cu"
_INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)


def source_files(folder: Traversable) -> dict[str, str]:
    """``kernels.cu`` of ``folder``, then every header it includes, directly or through other
    headers, by the name it is included by. Only those: a header left beside them (an
    install over an older one, a build folder that kept a removed file) is no part of the
    source, and its kernels are not looked for in the compiled module."""
    files = {NAME: (folder / NAME).read_text(encoding="utf-8")}
    pending = _INCLUDE.findall(files[NAME])
    while pending:
        name = pending.pop(0)
        if name not in files:
            files[name] = (folder / name).read_text(encoding="utf-8")
            pending += _INCLUDE.findall(files[name])
    return files


# Every file of the source, kernels.cu first: what the compile reads, and its cache key.
FILES = source_files(resources.files("arrow_gpu") / "_compute")
SOURCE = FILES[NAME]
HEADERS = {name: text for name, text in FILES.items() if name != NAME}
