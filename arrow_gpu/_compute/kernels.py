"""The device kernels of ``arrow_gpu.compute``: compiled by NVRTC, cached, launched.

The CUDA C source (``_compute/*.cu`` units and their headers, package data) is compiled at
run time for each device architecture met, once per process, each unit on a thread of its own
(a first call waits for the slowest unit, not for their sum), to a CUBIN where NVRTC knows the
architecture (else to PTX, which the driver compiles further), a module per unit. Each image is
also kept on disk (``$XDG_CACHE_HOME/arrow_gpu`` or ``~/.cache/arrow_gpu``), keyed by every file
of its unit, the NVRTC version, the architecture and the options, so later processes skip the
compile; a file ends with its image's digest, and one that does not match (cut short, written
over) is compiled again rather than given to the driver. A cache that cannot be written is
skipped. No CUDA toolkit is needed to build
arrow_gpu; NVRTC comes with a toolkit or with the ``nvidia-cuda-nvrtc`` wheel
(``pip install 'arrow_gpu[compute]'``). The simulator compiles nothing: it runs each kernel's
host twin, built into the package, where a GPU runs the kernel, so it needs no NVRTC.

``DeviceKernels`` launches each kernel by a typed method that takes device addresses; it
is the one place that sizes grids, allocates scratch memory and reads results back. It
launches on one stream, the caller's (``on_stream``), and waits only on that stream: a
context-wide synchronization would wait for every other library's work too.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from arrow_gpu._compute import kernel_source
from arrow_gpu._cuda import (
    CudaBuffer,
    _compile_kernels,
    _compute_capability,
    _copy_device_bytes,
    _count_set_bits,
    _kernels_supported,
    _launch,
    _load_module,
    _module_function,
    _multiprocessor_count,
    _nvrtc_version,
    _range_block_sizes,
    _scan,
    _select_kernels,
    _write_in_order,
)
from arrow_gpu.device import Context, Stream, stream_handle, using_simulator

__all__ = ["BIT_BLOCK_WORDS", "COPY_BLOCK_BYTES", "CompileReport", "Counters",
           "DeviceKernels", "REBASE_BLOCK_ITEMS", "SCAN_TILE", "kernels_for", "last_compile",
           "runs_kernels"]

_THREADS = 256
# The bound of int64 positions, which are below it or -1 (a null row).
_NO_BOUND = (1 << 63) - 1
SCAN_TILE = 256 * 16  # SCAN_THREADS * SCAN_ITEMS in the source
# The work of one block of the batched copies, as in the source (blocks of _THREADS threads),
# as the native plans split it (compute/range_tables.h).
COPY_BLOCK_BYTES, BIT_BLOCK_WORDS, REBASE_BLOCK_ITEMS = _range_block_sizes()
# Options every compile gets (NVRTC's default C++ dialect does): functions are device code
# unless marked; line info helps a profiler name the lines.
_OPTIONS = ("-default-device", "--generate-line-info")


def _wheel_directories() -> list[str]:
    """Where the nvidia-cuda-nvrtc wheel puts libnvrtc, if it is installed."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or spec.submodule_search_locations is None:
        return []
    return [os.path.join(root, sub, "lib") for root in spec.submodule_search_locations
            for sub in ("cuda_nvrtc", "cu13", "cu12")
            if os.path.isdir(os.path.join(root, sub, "lib"))]


def _cache_directory() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "arrow_gpu"


@dataclass(frozen=True)
class CompileReport:
    """How the kernels of one architecture came to be: compiled now (``from_cache`` false
    where any unit was) or read from the cache, as CUBINs or as PTX (``image``)."""

    arch: int
    nvrtc_version: int
    from_cache: bool
    seconds: float
    image: str = "cubin"


# Per architecture: each unit's image, in the order of kernel_source.UNITS, and the report.
_compiled: dict[int, tuple[list[bytes], CompileReport]] = {}
_compile_lock = threading.Lock()


def _images_for(arch: int) -> tuple[list[bytes], CompileReport]:
    with _compile_lock:
        if arch in _compiled:
            return _compiled[arch]
        started = time.perf_counter()
        directories = _wheel_directories()
        version = _nvrtc_version(directories)

        def path_of(unit: kernel_source.Unit) -> Path:
            stem = unit.name.rsplit(".", 1)[0]
            key = _cache_key(unit.files, version, arch)
            return _cache_directory() / f"kernels-{stem}-sm{arch}-{key}.bin"

        def compile_unit(unit: kernel_source.Unit) -> bytes:
            image = _compile_kernels(directories, unit.source, unit.name, unit.headers, arch,
                                     list(_OPTIONS))
            _write_image(path_of(unit), image)
            return image

        units = kernel_source.UNITS
        cached = [_read_image(path_of(unit)) for unit in units]
        missing = [unit for unit, image in zip(units, cached) if image is None]
        fresh: Iterator[bytes] = iter(())
        if missing:  # NVRTC releases the GIL: the units compile at once
            with ThreadPoolExecutor(min(len(missing), os.cpu_count() or 1)) as pool:
                fresh = iter(list(pool.map(compile_unit, missing)))
        images = [image if image is not None else next(fresh) for image in cached]
        kind = "cubin" if all(image.startswith(b"\x7fELF") for image in images) else "ptx"
        report = CompileReport(arch, version, not missing, time.perf_counter() - started, kind)
        _compiled[arch] = (images, report)
        return _compiled[arch]


def _cache_key(files: dict[str, str], version: int, arch: int) -> str:
    """The disk cache's key of the image of ``files`` (name -> text, a unit's and every
    header's it includes): it changes with any of them, the NVRTC version, the architecture
    or the options."""
    digest = hashlib.sha256()
    for part in [*(f"{name}\0{text}" for name, text in files.items()), str(version), str(arch),
                 *_OPTIONS]:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


_DIGEST_BYTES = 32  # a SHA-256 of the image ends each cache file


def _read_image(path: Path) -> Optional[bytes]:
    """The image kept at ``path``, or None where it cannot be read or its digest does not
    match: the cache is only a cache, and the driver must never load a damaged image."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    image, digest = data[:-_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if not image or hashlib.sha256(image).digest() != digest:
        return None
    return image


def _write_image(path: Path, image: bytes) -> None:
    """Keep ``image`` at ``path`` with its digest, atomically (readers see the old file or
    the new one whole), or not at all: the cache is only a cache."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".kernels-",
                                         delete=False) as out:
            try:
                out.write(image + hashlib.sha256(image).digest())
                out.close()
                os.replace(out.name, path)
            except OSError:
                os.unlink(out.name)
                raise
    except OSError:
        pass


def last_compile(arch: Optional[int] = None) -> Optional[CompileReport]:
    """The report of the kernels compiled (or loaded) for ``arch`` (default: any) so far."""
    reports = [report for a, (_, report) in _compiled.items() if arch in (None, a)]
    return reports[-1] if reports else None


def runs_kernels(context: Context) -> bool:
    """Whether ``context``'s driver runs kernels (the simulator runs their host twins)."""
    return bool(_kernels_supported(context))


class DeviceKernels:
    """The kernels loaded into one device's primary context, each launched by a method.

    Launches are queued on ``stream`` (the legacy default stream unless ``on_stream`` chose
    another), in order; methods that return a value read it back, which waits for the work
    queued on that stream before; ``finish`` waits for all of it.
    """

    stream = 0  # the handle of the stream every launch, copy and read goes on

    report: Optional[CompileReport] = None  # None on the simulator, which compiles nothing

    def __init__(self, context: Context) -> None:
        self.context = context
        self._functions: dict[str, int] = {}
        if using_simulator():  # its module holds every kernel's host twin, whatever the image
            modules = [(b"", _kernel_names())]
        else:
            images, self.report = _images_for(_compute_capability(context))
            modules = [(image, unit.kernels) for unit, image in zip(kernel_source.UNITS, images)]
        for image, names in modules:
            module = self._load(image)
            for name in names:
                self._functions[name] = _module_function(context, module, name)
        self._max_blocks = 32 * _multiprocessor_count(context)
        # What a native plan launches (arrow_gpu._cuda._select_natively), resolved once.
        self.select_kernels = _select_kernels(context, self._functions, self._max_blocks)

    def _load(self, image: bytes) -> int:
        try:
            return _load_module(self.context, image)
        except OSError as error:
            if self.report is None:  # the simulator's module
                raise
            version = self.report.nvrtc_version
            raise OSError(f"{error}. The kernels were compiled by NVRTC "
                          f"{version // 1000}.{version % 1000 // 10}; a driver of an older CUDA "
                          "major cannot load its CUBINs, nor a driver older than it its PTX: "
                          "update the driver, or install the NVRTC of the driver's CUDA major "
                          "(for CUDA 12: pip install 'arrow_gpu[compute-cu12]')") from error

    def on_stream(self, stream: Any) -> DeviceKernels:
        """These kernels, launching on ``stream`` (any spelling ``stream_handle`` accepts;
        None: the legacy default stream)."""
        handle = stream_handle(stream)
        if handle == self.stream:
            return self
        launcher = copy.copy(self)  # the module and functions are shared, not reloaded
        launcher.stream = handle
        return launcher

    # -- memory --------------------------------------------------------------------------

    def alloc(self, nbytes: int) -> CudaBuffer:
        buffer: CudaBuffer = self.context.new_buffer(max(int(nbytes), 0))
        return buffer

    def zeros(self, nbytes: int) -> CudaBuffer:
        """Zeroed device memory: a launch, queued in order, so nothing waits."""
        buffer = self.alloc(nbytes)
        self._launch("ag_fill_bytes", nbytes, [buffer.address, nbytes, 0])
        return buffer

    def write(self, address: int, data: bytes) -> None:
        """Host bytes to device memory, queued after the launches so far (which may still
        use memory freed since, and so handed out again). The host does not wait: a plan
        uploads its next ranges while the device copies the ones before."""
        _write_in_order(self.context, address, data, self.stream)

    def read(self, address: int, nbytes: int) -> bytes:
        """Device bytes, once the launches queued so far (which may write them) are done."""
        if nbytes <= 0:
            return b""
        buffer = self.context.foreign_buffer(address, nbytes)
        data: bytes = buffer.copy_to_host(stream=self.stream).to_pybytes()
        return data

    def finish(self) -> None:
        """Wait for every launch queued so far on the stream: results are complete when
        compute returns, and its scratch memory may go."""
        Stream.wrap(self.stream, self.context).synchronize()

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        if nbytes > 0:
            _copy_device_bytes(self.context, dst, src, nbytes, self.stream)

    # -- launches ------------------------------------------------------------------------

    def _launch(self, name: str, threads_wanted: int, args: list[int],
                blocks: Optional[int] = None) -> None:
        if blocks is None:
            if threads_wanted <= 0:
                return
            blocks = min(-(-threads_wanted // _THREADS), self._max_blocks)
        _launch(self.context, self._functions[name], blocks, _THREADS, args, self.stream)

    def gather(self, dst: int, src: int, idx: int, n: int, width: int) -> None:
        """Values ``width`` bytes wide at int64 positions (-1: a zero value)."""
        self._launch("ag_gather", n, [dst, src, width, idx, 8, 1, n, _NO_BOUND, 0, 0, 0, 0, 0])

    def gather_bits(self, dst: int, src: int, src_off: int, idx: int, n: int,
                    count_at: int = 0) -> None:
        """Gather bits; adds how many are set to the int64 at ``count_at`` (0: not counted)."""
        self._launch("ag_gather_bits", (n + 7) // 8, [dst, src, src_off, idx, n, count_at])

    def copy_bits(self, dst: int, dst_off: int, src: int, src_off: int, n: int,
                  invert: bool = False) -> None:
        self._launch("ag_copy_bits", (n + 7) // 8 + 1, [dst, dst_off, src, src_off, n,
                                                        int(invert)])

    def popcount(self, bits: int, off: int, n: int) -> int:
        """How many of ``n`` bits from bit ``off`` are set (one wait, counted natively)."""
        count: int = _count_set_bits(self.select_kernels, bits, off, n, self.stream)
        return count

    # The batched copies take a table of ``count`` ranges in device memory (the structs of
    # the source), each with the first of its blocks; ``blocks`` is how many there are in all.

    def copy_ranges(self, table: int, count: int, blocks: int) -> None:
        self._launch("ag_copy_ranges", 0, [table, count], blocks=blocks)

    def copy_bit_ranges(self, table: int, count: int, blocks: int) -> None:
        self._launch("ag_copy_bit_ranges", 0, [table, count], blocks=blocks)

    def rebase_ranges(self, table: int, count: int, blocks: int) -> None:
        self._launch("ag_rebase_ranges", 0, [table, count], blocks=blocks)

    def range_sizes(self, out: int, offsets: int, sizes: int, width: int, idx: int,
                    n: int) -> None:
        self._launch("ag_range_sizes", n, [out, offsets, sizes, width, idx, 8, 1, n, _NO_BOUND,
                                           0, 0, 0, 0, 0, 0, 0])

    def scan(self, src: int, src_width: int, n: int, out: int, out_width: int) -> int:
        """Exclusive scan of ``n`` integers ``src_width`` (4 or 8) bytes wide at ``src`` into
        ``out`` (see ``ag_scan``); returns the total. Planned natively, as the native
        plans scan."""
        total: int = _scan(self.select_kernels, src, src_width, n, out, out_width, self.stream)
        return total

    def compact_bits(self, dst: int, src: int, src_off: int, mask: int, mask_off: int,
                     valid: int, valid_off: int, mode: int, n: int, ranks: int,
                     count_at: int = 0) -> None:
        """The bits of ``src`` (from bit ``src_off``; all set for 0) at the rows a mask
        selects, in order, to ``dst`` (zeroed, in whole 32-bit words); ``ranks``: per group
        of 32 mask rows, the rank of its first selected row (made with the mask's rows). Adds
        how many are set to the int64 at ``count_at`` (0: not counted)."""
        if n <= 0:
            return
        self._launch("ag_compact_bits", -(-n // 32),  # a thread per group of 32 rows
                     [dst, src, src_off, mask, mask_off, valid, valid_off, mode, n, ranks,
                      count_at])

    def expand_ranges(self, out: int, offsets: int, width: int, fixed: int, idx: int,
                      dst_offsets: int, dst_width: int, n: int) -> None:
        self._launch("ag_expand_ranges", n, [out, offsets, width, fixed, idx, dst_offsets,
                                                  dst_width, n])

    def and_bits(self, dst: int, src: int, src_off: int, n: int) -> None:
        self._launch("ag_and_bits", (n + 7) // 8, [dst, src, src_off, n])

    def replace_nulls(self, idx: int, n: int, replacement: int) -> None:
        self._launch("ag_replace_nulls", n, [idx, n, replacement])

    def union_validity(self, out: int, type_ids: int, offsets: int, n: int,
                       children: dict[int, tuple[int, int]]) -> None:
        """Which rows of a union are valid as their child's value: ``children`` maps a type
        code to its child's validity bits (0: all valid) and their bit offset; ``offsets``
        is 0 for a sparse union."""
        table = bytearray(2 * 8 * 128)
        for code, (bits, bit_offset) in children.items():
            table[16 * code:16 * code + 16] = (bits.to_bytes(8, "little")
                                               + bit_offset.to_bytes(8, "little"))
        described = self.alloc(len(table))
        self.write(described.address, bytes(table))
        self._launch("ag_union_validity", (n + 7) // 8, [out, type_ids, offsets, n,
                                                         described.address])

    def type_mask(self, bits: int, type_ids: int, n: int, code: int) -> None:
        self._launch("ag_type_mask", (n + 7) // 8, [bits, type_ids, n, code])

    def scatter_ranks(self, offsets: int, positions: int, n: int) -> None:
        self._launch("ag_scatter_ranks", n, [offsets, positions, n])

    def fill_indices(self, out: int, valid: int, valid_off: int, n: int,
                     replacement: int) -> None:
        self._launch("ag_fill_indices", n, [out, valid, valid_off, n, replacement])

    def run_of_rows(self, out: int, run_ends: int, width: int, runs: int, rows: int,
                    offset: int, n: int) -> None:
        """The run (int64) of each of ``n`` rows of a run-end encoded array: rows at
        ``rows`` (int64, -1 for null, giving -1), or rows 0 to ``n`` for 0."""
        self._launch("ag_run_of_rows", n, [out, run_ends, width, runs, rows, offset, n])


class Counters:
    """Counts that launches add to (``count_at``), in zeroed device memory, read back all
    at once: an operation learns every null count it made in one round trip, after its
    launches are queued, instead of one round trip per count."""

    _PER_BLOCK = 64

    def __init__(self, k: DeviceKernels) -> None:
        self._k = k
        self._blocks: list[CudaBuffer] = []
        self._used = 0
        self._values: Optional[list[int]] = None

    def new(self) -> tuple[int, Callable[[], int]]:
        """A counter's device address, and a function that gives its value after ``read``."""
        if self._used == len(self._blocks) * self._PER_BLOCK:
            self._blocks.append(self._k.zeros(8 * self._PER_BLOCK))
        index = self._used
        self._used += 1
        address = self._blocks[-1].address + 8 * (index % self._PER_BLOCK)
        return address, lambda: self._value(index)

    def read(self) -> None:
        """Read every counter, once the launches queued so far are done."""
        data = b"".join(self._k.read(block.address, block.size) for block in self._blocks)
        self._values = [int(value) for value in memoryview(data).cast("q")]

    def _value(self, index: int) -> int:
        if self._values is None:
            raise RuntimeError("the counters have not been read yet")
        return self._values[index]


def _kernel_names() -> list[str]:
    return [name for unit in kernel_source.UNITS for name in unit.kernels]


_kernels: dict[int, DeviceKernels] = {}  # by device number
_kernels_lock = threading.Lock()


def kernels_for(context: Context) -> DeviceKernels:
    """The kernels of ``context``'s device, compiled and loaded at the first call."""
    with _kernels_lock:
        kernels = _kernels.get(context.device_number)
        if kernels is None:
            kernels = DeviceKernels(Context(context.device_number))  # the primary context
            _kernels[context.device_number] = kernels
        return kernels
