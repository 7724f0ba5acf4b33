"""The CUDA C source of the device kernels of ``arrow_gpu.compute``: the units
``_compute/*.cu`` named in ``UNIT_NAMES`` and the headers they include (``_compute/*.cuh``),
shipped as package data and compiled at run time by NVRTC (``kernels``), each unit a program
of its own, handed the headers it includes. Kernels are defined in units only, so that each
is compiled once; the units of a process compile at once, on threads."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from importlib.abc import Traversable

# Each unit holds the kernels of one concern, and is about as long to compile as the others:
# a first call waits for the slowest.
UNIT_NAMES = ("take.cu", "range_sizes.cu", "scan.cu", "mask.cu", "compact.cu", "rows.cu",
              "copies.cu", "elementwise.cu")
_INCLUDE = re.compile(r'^#include "([^"]+)"', re.MULTILINE)
_KERNEL = re.compile(r'^extern "C" __global__ void (\w+)\(', re.MULTILINE)


@dataclass(frozen=True)
class Unit:
    """One program NVRTC compiles: ``files`` maps the unit's name, first, and every header
    it includes, directly or through other headers, to their text."""

    name: str
    files: dict[str, str]

    @property
    def source(self) -> str:
        return self.files[self.name]

    @property
    def headers(self) -> dict[str, str]:
        return {name: text for name, text in self.files.items() if name != self.name}

    @property
    def kernels(self) -> list[str]:
        """The names of the kernels the unit defines."""
        return _KERNEL.findall(self.source)


def unit_files(folder: Traversable, name: str) -> dict[str, str]:
    """Unit ``name`` of ``folder``, then every header it includes, by the name it is included
    by. Only those: a header left beside them (an install over an older one, a build folder
    that kept a removed file) is no part of the unit."""
    files = {name: (folder / name).read_text(encoding="utf-8")}
    pending = _INCLUDE.findall(files[name])
    while pending:
        header = pending.pop(0)
        if header not in files:
            files[header] = (folder / header).read_text(encoding="utf-8")
            pending += _INCLUDE.findall(files[header])
    return files


def load_units(folder: Traversable) -> tuple[Unit, ...]:
    """The units of ``UNIT_NAMES`` in ``folder``."""
    return tuple(Unit(name, unit_files(folder, name)) for name in UNIT_NAMES)


UNITS = load_units(resources.files("arrow_gpu") / "_compute")
# Every file of the source, by name: units and headers.
FILES = {name: text for unit in UNITS for name, text in unit.files.items()}
