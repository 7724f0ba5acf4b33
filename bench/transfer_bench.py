"""Transfer benchmark: markdown tables of every workload against its target.

    python bench/transfer_bench.py            # on a GPU (under 5 minutes)
    ARROW_GPU_SIMULATOR=1 NUMBA_ENABLE_CUDASIM=1 python bench/transfer_bench.py --quick

Every figure times the public API (``arrow_gpu.to_device`` / ``to_host``, pyarrow's
``copy_to``, ``Context.buffer_from_data``) at default settings, and every benchmarked
transfer is checked for correctness.

Small calls are timed in fresh processes, as a user's script or a data-loader worker meets
them: "cold" is the first call after import and device initialisation, "steady" the median
of many calls, frees included; CuPy (``cupy.asnumpy(cupy.asarray(h))``) and PyTorch
(``.cuda().cpu()``) move the same 64 bytes in the same run when installed. Then throughput:
our time and GB/s against pyarrow ``copy_to`` per buffer with and without the engine
(``staging_bytes=0``: direct driver copies), Numba and CuPy per buffer, and the pinned /
pageable memcpy peaks measured in the same run; the string column is timed in turn with CuPy's
pinned copy of as many bytes, beside what the host's cores cost the DMA engine (its rate
while as many threads copy other memory, and its rate from lines those threads just wrote);
the wide table is set next to pyarrow's host-only rebuild of the same table. Throughput times are the best of several runs: 15 for
arrow_gpu's transfers, the peaks and pyarrow's rebuild (a few milliseconds each, so a busy host
shows in any one of them), 3 for the slow per-buffer peers.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

import arrow_gpu
from arrow_gpu import to_device, to_host
from arrow_gpu.transfer_options import get_transfer_options, transfer_options

from _timing import best, best_alternating  # bench/_timing.py, beside this script

CPU = pa.default_cpu_memory_manager()
MiB = 1 << 20

try:
    import cupy
except ImportError:  # the baselines and peaks then come from arrow_gpu itself
    cupy = None
try:
    import numba.cuda
except ImportError:
    numba = None


def sync() -> None:
    if cupy is not None:
        cupy.cuda.Device().synchronize()


def buffers_of(data) -> list[pa.Buffer]:
    columns = data.columns if isinstance(data, (pa.Table, pa.RecordBatch)) else [data]
    chunks = [c for column in columns for c in getattr(column, "chunks", [column])]
    out = []
    for chunk in chunks:
        out += [b for b in chunk.buffers() if b is not None]
        if isinstance(chunk, pa.DictionaryArray):
            out += [b for b in chunk.dictionary.buffers() if b is not None]
    return out


def nbytes(data) -> int:
    return sum(b.size for b in buffers_of(data))


def same_bytes(left, right) -> bool:
    """Whether two host tables hold the same bytes in every buffer (NaN-safe)."""
    a, b = buffers_of(left), buffers_of(right)
    return len(a) == len(b) and all(x.equals(y) for x, y in zip(a, b))


def random_strings(rng, rows: int, max_length: int, validity: pa.Buffer | None = None) -> pa.Array:
    """``rows`` random lowercase strings of 0 to ``max_length`` characters, built from buffers."""
    lengths = rng.integers(0, max_length + 1, rows, dtype=np.int32)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    chars = rng.integers(97, 123, int(offsets[-1]), dtype=np.uint8)
    return pa.Array.from_buffers(pa.string(), rows, [validity, pa.py_buffer(offsets),
                                                     pa.py_buffer(chars)])


def mixed_table(target_bytes: int, seed: int = 0) -> pa.Table:
    """About ``target_bytes`` of int64, float64, nullable int32, bool, string and dictionary."""
    rng = np.random.default_rng(seed)
    rows = max(64, target_bytes // 37)
    valid = rng.random(rows) > 0.1
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    strings = random_strings(rng, rows, 16)
    ints = pa.Array.from_buffers(pa.int32(), rows, [bitmap, pa.py_buffer(
        rng.integers(-1000, 1000, rows, dtype=np.int32))])
    dictionary = pa.DictionaryArray.from_arrays(
        pa.array(rng.integers(0, 100, rows, dtype=np.int32)), pa.array([f"v{i}" for i in range(100)]))
    return pa.table({
        "i64": rng.integers(0, 1 << 40, rows, dtype=np.int64),
        "f64": rng.random(rows),
        "i32": ints,
        "flag": pa.array(valid),
        "s": strings,
        "dict": dictionary,
    })


def string_column(rows: int, seed: int = 1) -> pa.Table:
    """``rows`` random ASCII strings of 0-48 characters (about 24 bytes each) and 10 % nulls."""
    rng = np.random.default_rng(seed)
    validity = pa.py_buffer(np.packbits(rng.random(rows) > 0.1, bitorder="little"))
    return pa.table({"s": random_strings(rng, rows, 48, validity)})


def per_buffer_numba_h2d(bufs):
    return [numba.cuda.to_device(np.frombuffer(b, dtype=np.uint8)) for b in bufs]


def per_buffer_cupy_h2d(bufs):
    out = [cupy.asarray(np.frombuffer(b, dtype=np.uint8)) for b in bufs]
    sync()
    return out


def copy_to_device(table, ctx):
    return pa.Table.from_arrays(
        [pa.chunked_array([c.copy_to(ctx.memory_manager) for c in col.chunks], col.type)
         for col in table.columns], schema=table.schema)


def copy_to_host(table):
    return pa.Table.from_arrays(
        [pa.chunked_array([c.copy_to(CPU) for c in col.chunks], col.type) for col in table.columns],
        schema=table.schema)


def peaks(ctx, size: int, repeat: int) -> dict[str, float]:
    """GB/s of one large copy: pinned and pageable, each direction."""
    pageable = np.random.default_rng(1).integers(0, 255, size, dtype=np.uint8)
    out = np.empty_like(pageable)
    if cupy is not None:
        pinned_memory = cupy.cuda.alloc_pinned_memory(size)
        pinned = np.frombuffer(pinned_memory, dtype=np.uint8, count=size)
        pinned[:] = pageable
        device = cupy.empty(size, dtype=np.uint8)
        runs = {
            "pinned H→D": lambda: (device.set(pinned), sync()),
            "pinned D→H": lambda: (device.get(out=pinned), sync()),
            "pageable H→D": lambda: (device.set(pageable), sync()),
            "pageable D→H": lambda: (device.get(out=out), sync()),
        }
        result = {name: size / best(run, repeat) / 1e9 for name, run in runs.items()}
        assert np.array_equal(out, pageable) and np.array_equal(pinned, pageable)
        return result
    pinned = arrow_gpu.new_host_buffer(size)
    np.frombuffer(pinned, dtype=np.uint8)[:] = pageable
    device = ctx.new_buffer(size)
    with transfer_options(staging_bytes=0):  # direct driver copies
        runs = {
            "pinned H→D": lambda: device.copy_from_host(pinned),
            "pinned D→H": lambda: device.copy_to_host(buf=pinned),
            "pageable H→D": lambda: device.copy_from_host(pa.py_buffer(pageable)),
            "pageable D→H": lambda: device.copy_to_host(buf=pa.py_buffer(out)),
        }
        result = {name: size / best(run, repeat) / 1e9 for name, run in runs.items()}
    assert np.array_equal(out, pageable)
    return result


# ---------------------------------------------------------------------------------------
# Small calls, each library in a fresh process

SMALL_CALLS = {
    "table8": "8-row table (int64, float64) `to_device` + `to_host`",
    "array": "8-element int64 `Array.copy_to(ctx.memory_manager)` and back",
    "buffer64": "`ctx.buffer_from_data(64 B).copy_to_host()`",
    "cupy": "CuPy `cupy.asnumpy(cupy.asarray(h))`, h 64 B",
    "torch": "PyTorch `torch.from_numpy(h).cuda().cpu()`, h 64 B",
}


def small_call(name: str) -> Callable[[], object]:
    """Initialises the device for ``name`` and returns one checked call of it."""
    values = np.arange(8, dtype=np.int64)
    if name == "cupy":
        cupy.cuda.runtime.getDeviceCount()
        cupy.cuda.Device(0).synchronize()
        assert np.array_equal(cupy.asnumpy(cupy.asarray(values)), values)
        return lambda: cupy.asnumpy(cupy.asarray(values))
    if name == "torch":
        import torch

        torch.cuda.init()
        host = torch.from_numpy(values)
        return lambda: host.cuda().cpu()
    ctx = arrow_gpu.Context(0)
    if name == "table8":
        table = pa.table({"x": values, "y": values.astype(np.float64)})
        return lambda: to_host(to_device(table))
    if name == "array":
        array = pa.array(values)
        return lambda: array.copy_to(ctx.memory_manager).copy_to(CPU)
    data = values.tobytes()
    return lambda: ctx.buffer_from_data(data).copy_to_host()


def latency_worker(name: str, calls: int) -> None:
    """Prints {"cold": s, "steady": s} for ``name`` in this (fresh) process."""
    call = small_call(name)
    start = time.perf_counter()
    first = call()
    cold = time.perf_counter() - start
    expected = np.arange(8, dtype=np.int64)
    if name == "table8":
        assert np.array_equal(first.column("x").to_numpy(), expected)
    elif name == "torch":
        assert np.array_equal(first.numpy(), expected)
    elif name != "cupy":
        assert np.array_equal(np.frombuffer(first if name == "buffer64" else first.buffers()[1],
                                            dtype=np.int64)[:8], expected)
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    print(json.dumps({"cold": cold, "steady": statistics.median(times)}))


def small_calls(calls: int, processes: int) -> dict[str, dict[str, float]]:
    """Median over ``processes`` fresh processes of each small call's cold and steady time."""
    available = {"cupy": cupy is not None, "torch": importlib.util.find_spec("torch") is not None}
    results = {}
    for name in SMALL_CALLS:
        if not available.get(name, True):
            continue
        runs = []
        for _ in range(processes):
            out = subprocess.run([sys.executable, __file__, "--latency-worker", name,
                                  "--calls", str(calls)], capture_output=True, text=True,
                                 timeout=600, env=os.environ.copy())
            if out.returncode != 0:
                raise RuntimeError(f"{name} worker failed:\n{out.stderr}")
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        results[name] = {key: statistics.median(run[key] for run in runs)
                         for key in ("cold", "steady")}
    return results


# ---------------------------------------------------------------------------------------
# One-shot downloads, each size in a fresh process

def engine_threads() -> int:
    """The copy threads the engine runs at its current options."""
    return get_transfer_options()["threads"] or max(1, 3 * (os.cpu_count() or 1) // 4)


HUGE_PAGE_COUNTERS = ("thp_fault_alloc", "thp_fault_fallback", "compact_stall")


def huge_page_counters() -> dict[str, int]:
    """The host's counts (Linux, system-wide; empty elsewhere) of faults given a huge page, of
    faults that fell back to 4 KiB pages and of direct compactions: why a fresh destination's
    faults cost what they do on one host and not on another."""
    try:
        with open("/proc/vmstat") as counters:
            fields = (line.split() for line in counters)
            return {f[0]: int(f[1]) for f in fields
                    if len(f) == 2 and f[0] in HUGE_PAGE_COUNTERS and f[1].isdigit()}
    except OSError:
        return {}


def fresh_copy(size: int, threads: int) -> float:
    """Seconds for ``threads`` threads to copy ``size`` bytes into memory the process never
    touched, each a contiguous share in pieces of a huge page read from a 64 MiB source:
    a one-shot download's CPU work (unstaging into fresh pages) without the DMA, the host's
    bound on it."""
    from concurrent.futures import ThreadPoolExecutor

    piece, ring = 2 * MiB, 64 * MiB
    source = np.ones(ring, dtype=np.uint8)
    fresh = np.empty(size, dtype=np.uint8)  # mapped, not yet touched
    share = -(-size // threads // piece) * piece

    def copy(i: int) -> None:
        for at in range(i * share, min(size, (i + 1) * share), piece):
            end = min(size, at + piece)
            np.copyto(fresh[at:end], source[at % ring:at % ring + end - at])

    with ThreadPoolExecutor(threads) as pool:
        start = time.perf_counter()
        list(pool.map(copy, range(threads)))
        seconds = time.perf_counter() - start
    assert fresh[size - 1] == 1
    return seconds


def pinned_beside_copies(size: int, threads: int) -> dict[str, float]:
    """GB/s of a pinned copy of ``size`` bytes each way while ``threads`` threads copy host
    memory as an engine's staging does (the same bytes, pageable to pageable): the bus's rate
    when the CPU shares the host's memory with it, the bound on a pageable transfer."""
    import threading

    if cupy is None:
        return {}
    pinned = np.frombuffer(cupy.cuda.alloc_pinned_memory(size), dtype=np.uint8, count=size)
    device = cupy.empty(size, dtype=np.uint8)
    sources = [np.ones(size // threads, dtype=np.uint8) for _ in range(threads)]
    targets = [np.empty_like(source) for source in sources]
    for target in targets:
        target.fill(0)  # touched: the staging's memory is
    busy = threading.Event()

    def copy(i: int) -> None:
        while busy.is_set():
            np.copyto(targets[i], sources[i])

    rates = {}
    for name, run in (("H→D", lambda: (device.set(pinned), sync())),
                      ("D→H", lambda: (device.get(out=pinned), sync()))):
        busy.set()
        workers = [threading.Thread(target=copy, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        time.sleep(0.05)  # every thread copying before the first DMA
        rates[name] = size / best(run, 7) / 1e9
        busy.clear()
        for worker in workers:
            worker.join()
    return rates


def fresh_lines_h2d(threads: int) -> dict[str, float]:
    """GB/s of a pinned copy to the device of 8 MiB that ``threads`` threads have just
    written (best and median of 9), and of the same 8 MiB once the threads have written 32 MiB
    more elsewhere: what the DMA engine pays to read lines still in the writing cores' private
    caches, as it must at the start of a staged upload, before staging has got far enough
    ahead."""
    from concurrent.futures import ThreadPoolExecutor

    if cupy is None:
        return {}
    size, more = 8 * MiB, 32 * MiB
    pinned = np.frombuffer(cupy.cuda.alloc_pinned_memory(size), dtype=np.uint8, count=size)
    elsewhere = np.frombuffer(cupy.cuda.alloc_pinned_memory(more), dtype=np.uint8, count=more)
    source = np.ones(more, dtype=np.uint8)
    device = cupy.empty(size, dtype=np.uint8)

    def write(target: np.ndarray) -> Callable[[int], None]:
        share = -(-len(target) // threads)

        def part(i: int) -> None:
            mine = target[i * share:(i + 1) * share]
            np.copyto(mine, source[i * share:i * share + len(mine)])
        return part

    def timed_copy() -> float:
        start = time.perf_counter()
        device.set(pinned)
        sync()
        return time.perf_counter() - start

    just_written, settled = [], []
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(10):  # the first a warm-up
            list(pool.map(write(pinned), range(threads)))
            just_written.append(timed_copy())
            list(pool.map(write(pinned), range(threads)))
            list(pool.map(write(elsewhere), range(threads)))
            settled.append(timed_copy())
    return {"just written": size / min(just_written[1:]) / 1e9,
            "just written, median": size / statistics.median(just_written[1:]) / 1e9,
            "after 32 MiB more": size / min(settled[1:]) / 1e9}


def pinned_copy_runs(size: int) -> dict[str, Callable[[], object]]:
    """One pinned copy of ``size`` bytes each way (cupy), to time beside ours."""
    if cupy is None:
        return {}
    pinned = np.frombuffer(cupy.cuda.alloc_pinned_memory(size), dtype=np.uint8, count=size)
    device = cupy.empty(size, dtype=np.uint8)
    return {"H→D": lambda: (device.set(pinned), sync()),
            "D→H": lambda: (device.get(out=pinned), sync())}


def pinned_d2h(size: int) -> float:
    """Seconds of one pinned device-to-host copy of ``size`` bytes (the bus's bound)."""
    runs = pinned_copy_runs(size)
    if runs:
        return best(runs["D→H"], 2)
    device_buffer = arrow_gpu.Context(0).new_buffer(size)
    pinned = arrow_gpu.new_host_buffer(size)
    with transfer_options(staging_bytes=0):
        return best(lambda: device_buffer.copy_to_host(buf=pinned), 2)


def download_worker(size: int) -> None:
    """Prints, as JSON, the seconds of the first ``to_host`` of a ``size``-byte device table
    in this fresh process, of downloads into the pinned pool (the first, which pins, and the
    next, which reuses) and of the pinned copy of as many bytes."""
    chunk_rows = min(size, 1 << 30) // 8 // 4
    chunk = pa.record_batch({f"c{i}": np.arange(i, chunk_rows * 4 + i, 4) for i in range(4)})
    table = pa.Table.from_batches([chunk] * (size // chunk.nbytes))  # one host chunk, repeated
    nbytes = table.nbytes
    on_device = to_device(table)
    del table

    def timed(call: Callable[[], pa.Table]) -> float:
        start = time.perf_counter()
        back = call()
        seconds = time.perf_counter() - start
        assert back.num_rows == on_device.num_rows
        last = back.to_batches()[-1]
        assert last.equals(chunk), "download differs"
        return seconds

    before = huge_page_counters()
    result = {"bytes": nbytes, "to_host": timed(lambda: to_host(on_device))}
    after = huge_page_counters()
    result["faults"] = {name: after[name] - before[name] for name in after}
    pool = arrow_gpu.pinned_memory_pool()
    result["pool_first"] = timed(lambda: to_host(on_device, memory_pool=pool))
    result["pool_again"] = timed(lambda: to_host(on_device, memory_pool=pool))
    arrow_gpu.trim()
    result["pinned"] = pinned_d2h(nbytes)
    print(json.dumps(result))


def fresh_copy_worker(size: int) -> None:
    """Prints, as JSON, the seconds of ``fresh_copy`` of ``size`` bytes in this fresh
    process (which has touched no other memory), by the engine's threads and by 16."""
    counts = sorted({engine_threads(), min(os.cpu_count() or 1, 16)})
    print(json.dumps({str(threads): fresh_copy(size, threads) for threads in counts}))


def worker_result(flag: str, size: int) -> dict:
    """The JSON a ``flag`` worker of this script prints, from a fresh process."""
    out = subprocess.run([sys.executable, __file__, flag, str(size)], capture_output=True,
                         text=True, timeout=900, env=os.environ.copy())
    if out.returncode != 0:
        raise RuntimeError(f"{flag} ({size} bytes) failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def downloads(sizes: list[int]) -> list[list[str]]:
    """The one-shot download table's rows, fresh processes for each size."""
    rows = []
    for size in sizes:
        r = worker_result("--download-worker", size)
        n = r["bytes"]
        threads, fresh = min(worker_result("--fresh-copy-worker", n).items(),
                             key=lambda item: item[1])
        bound = max(r["pinned"], fresh)  # a fresh destination costs both, at best overlapped
        ratio = r["pinned"] / r["to_host"]
        label = f"{n / (1 << 30):.0f} GiB" if n >= 1 << 30 else f"{n / MiB:.0f} MiB"
        rows.append([label, fmt_rate(n, r["to_host"]), fmt_rate(n, r["pinned"]),
                     f"{fmt_rate(n, fresh)} ({threads} threads)",
                     f"{bound / r['to_host']:.2f}", fmt_rate(n, r["pool_first"]),
                     fmt_rate(n, r["pool_again"]),
                     f"{ratio:.2f} × pinned {'✓' if ratio >= 0.8 else '✗'}",
                     f"{r['pinned'] / r['pool_again']:.2f} × pinned", huge_pages(r["faults"])])
    return rows


def huge_pages(faults: dict[str, int]) -> str:
    """A download's huge-page faults, "given (fell back, stalls)"."""
    if len(faults) < len(HUGE_PAGE_COUNTERS):
        return "n/a"
    return (f"{faults['thp_fault_alloc']} ({faults['thp_fault_fallback']}, "
            f"{faults['compact_stall']})")


def fmt_time(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def fmt_rate(size: int, seconds: float | None) -> str:
    return "n/a" if seconds is None or size == 0 else f"{size / seconds / 1e9:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (e.g. the simulator)")
    parser.add_argument("--calls", type=int, default=None,
                        help="small calls timed per process (default 2000, 200 with --quick)")
    parser.add_argument("--processes", type=int, default=None,
                        help="fresh processes per small call (default 3, 1 with --quick)")
    parser.add_argument("--downloads-only", action="store_true",
                        help="only the one-shot downloads (fresh processes, 1, 6 and 24 GB)")
    parser.add_argument("--latency-worker", choices=sorted(SMALL_CALLS), help=argparse.SUPPRESS)
    parser.add_argument("--download-worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--fresh-copy-worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    calls = args.calls or (200 if args.quick else 2000)
    if args.latency_worker:
        latency_worker(args.latency_worker, calls)
        return
    if args.download_worker:
        download_worker(args.download_worker)
        return
    if args.fresh_copy_worker:
        fresh_copy_worker(args.fresh_copy_worker)
        return
    download_sizes = [16 * MiB, 64 * MiB] if args.quick else [1 << 30, 6 << 30, 24 << 30]
    if args.downloads_only:
        print_downloads(downloads(download_sizes))
        return
    big = 16 * MiB if args.quick else 1 << 30
    repeat = 2 if args.quick else 3  # the slow peers
    runs = 5 if args.quick else 15    # ours, the peaks and the rebuild
    ctx = arrow_gpu.Context(0)
    rows: list[list[str]] = []

    small = small_calls(calls, args.processes or (1 if args.quick else 3))
    small_rows = []
    reference = small.get("cupy", {}).get("steady")
    for name, times in small.items():
        target = result = ""
        if name in ("table8", "array"):
            target = "≤ CuPy steady"
            if reference is not None:
                ok = times["steady"] <= reference
                result = f"{times['steady'] / reference:.2f} × CuPy {'✓' if ok else '✗'}"
            else:
                result = "n/a (no CuPy)"
        small_rows.append([SMALL_CALLS[name], fmt_time(times["cold"]), fmt_time(times["steady"]),
                           target, result])

    peak = peaks(ctx, (4 if args.quick else 256) * MiB, runs)
    for name, rate in peak.items():
        rows.append([f"{name} memcpy peak ({'cupy' if cupy else 'arrow_gpu'})", "", "",
                     f"{rate:.1f}", "", "", "", "", "", ""])

    def near_peak(size, seconds, peak_name):
        ratio = size / seconds / 1e9 / peak[peak_name]
        return {"target": "≥ 0.9 × pinned peak",
                "result": f"{ratio:.2f} × peak {'✓' if ratio >= 0.9 else '✗'}"}

    def row(name, size, ours, engine=None, plain=None, nb=None, cp=None, target="", result=""):
        rows.append([name, f"{size / MiB:.1f} MiB", fmt_time(ours), fmt_rate(size, ours),
                     fmt_time(engine), fmt_time(plain), fmt_time(nb), fmt_time(cp), target, result])

    # 1. 1 GiB mixed-type table, pageable host -> device.
    table = mixed_table(big)
    size = nbytes(table)
    bufs = buffers_of(table)
    on_device = to_device(table)
    assert same_bytes(copy_to_host(on_device), table), "H→D copy differs"
    ours = best(lambda: to_device(table), runs)
    engine = best(lambda: copy_to_device(table, ctx), runs)
    with transfer_options(staging_bytes=0):
        assert same_bytes(copy_to_host(copy_to_device(table, ctx)), table)
        plain = best(lambda: copy_to_device(table, ctx), repeat)
    nb = best(lambda: per_buffer_numba_h2d(bufs), repeat) if numba else None
    cp = best(lambda: per_buffer_cupy_h2d(bufs), repeat) if cupy else None
    row("mixed table, pageable H→D", size, ours, engine, plain, nb, cp, **near_peak(
        size, ours, "pinned H→D"))

    # 2. device -> pageable host.
    assert same_bytes(to_host(on_device), table), "D→H copy differs"
    ours = best(lambda: to_host(on_device), runs)
    engine = best(lambda: copy_to_host(on_device), runs)
    with transfer_options(staging_bytes=0):
        assert same_bytes(copy_to_host(on_device), table)
        plain = best(lambda: copy_to_host(on_device), repeat)
    nb = cp = None
    if numba:
        numba_arrays = per_buffer_numba_h2d(bufs)
        nb = best(lambda: [a.copy_to_host() for a in numba_arrays], repeat)
        del numba_arrays
    if cupy:
        cupy_arrays = per_buffer_cupy_h2d(bufs)
        cp = best(lambda: [a.get() for a in cupy_arrays], repeat)
        del cupy_arrays
    row("mixed table, D→pageable H", size, ours, engine, plain, nb, cp, **near_peak(
        size, ours, "pinned D→H"))
    del on_device, table, bufs

    # 2b. String-heavy: one column of 5M strings (1/32 of it with --quick), both ways.
    strings = string_column(5_000_000 // (32 if args.quick else 1))
    size = nbytes(strings)
    strings_on_device = to_device(strings)
    assert same_bytes(to_host(strings_on_device), strings), "string round trip differs"
    # A pageable transfer's CPU threads stage its bytes while the DMA runs: the pinned copy
    # beside as many threads copying host memory is the bound the host sets on it. Ours is
    # timed alternately with the pinned copy of as many bytes, so the host's drift moves both.
    threads = engine_threads()
    beside = pinned_beside_copies(size, threads)
    for direction, rate in beside.items():
        rows.append([f"pinned {direction} memcpy beside {threads} CPU copies (cupy)", "", "",
                     f"{rate:.1f}", "", "", "", "", "", ""])
    fresh = fresh_lines_h2d(threads)
    if fresh:
        rows.append([f"pinned H→D memcpy of 8 MiB {threads} CPU threads just wrote (cupy)", "",
                     "", f"{fresh['just written']:.1f}", "", "", "", "", "",
                     f"median {fresh['just written, median']:.1f}; "
                     f"{fresh['after 32 MiB more']:.1f} once they wrote 32 MiB more"])
    pinned_runs = pinned_copy_runs(size)

    def strings_row(direction, ours, peak_name):
        if direction in pinned_runs:
            seconds, pinned = best_alternating([ours, pinned_runs[direction]], runs)
            ratio = pinned / seconds
            checked = {"target": "≥ 0.95 × pinned copy of its bytes",
                       "result": f"{ratio:.2f} × pinned {'✓' if ratio >= 0.95 else '✗'} "
                                 f"({fmt_time(pinned)}); "
                                 f"{size / seconds / 1e9 / peak[peak_name]:.2f} × peak"}
        else:
            seconds = best(ours, runs)
            checked = near_peak(size, seconds, peak_name)
        if direction in beside:
            checked["result"] += f"; {size / seconds / 1e9 / beside[direction]:.2f} × beside"
        row(f"{strings.num_rows:,}-row string column, {direction.replace('H→', 'pageable H→')}"
            .replace("D→H", "D→pageable H"), size, seconds, **checked)

    strings_row("H→D", lambda: to_device(strings), "pinned H→D")
    strings_row("D→H", lambda: to_host(strings_on_device), "pinned D→H")
    del strings, strings_on_device

    # 3. Many small buffers: a wide int64 table, next to pyarrow rebuilding it on the host.
    rng = np.random.default_rng(2)
    wide = pa.table({f"c{i}": rng.integers(0, 1 << 60, 1000, dtype=np.int64)
                     for i in range(1000)})
    size = nbytes(wide)
    bufs = buffers_of(wide)
    rebuild = best(lambda: pa.table(wide.columns, names=wide.column_names), runs)
    wide_on_device = to_device(wide)
    assert same_bytes(copy_to_host(wide_on_device), wide), "wide H→D copy differs"
    assert same_bytes(to_host(wide_on_device), wide), "wide D→H copy differs"
    ours = best(lambda: to_device(wide), runs)
    engine = best(lambda: copy_to_device(wide, ctx), runs)
    with transfer_options(staging_bytes=0):
        plain = best(lambda: copy_to_device(wide, ctx), repeat)
    nb = best(lambda: per_buffer_numba_h2d(bufs), repeat) if numba else None
    cp = best(lambda: per_buffer_cupy_h2d(bufs), repeat) if cupy else None
    rebuild_target = "≤ 0.5 × pyarrow's host-only rebuild " + f"({fmt_time(rebuild)})"
    row("1000 cols × 1000 rows int64 → device", size, ours, engine, plain, nb, cp,
        rebuild_target, f"{ours / rebuild:.2f} × rebuild {'✓' if ours <= rebuild / 2 else '✗'}")
    ours = best(lambda: to_host(wide_on_device), runs)
    engine = best(lambda: copy_to_host(wide_on_device), runs)
    with transfer_options(staging_bytes=0):
        plain = best(lambda: copy_to_host(wide_on_device), repeat)
    row("1000 cols × 1000 rows int64 → host", size, ours, engine, plain, target=rebuild_target,
        result=f"{ours / rebuild:.2f} × rebuild {'✓' if ours <= rebuild / 2 else '✗'}")
    del wide_on_device

    # 4. Importing a 10-column device batch through capsules (O(1) in data size).
    imports = []
    for n in (1000, 100_000 if args.quick else 10_000_000):
        batch = to_device(pa.record_batch(
            {f"c{i}": np.arange(n, dtype=np.int64) for i in range(10)}))

        def roundtrip(batch=batch):
            return pa.RecordBatch._import_from_c_device_capsule(*batch.__arrow_c_device_array__())

        imported = roundtrip()
        assert imported.num_rows == n and not imported.column(0).is_cpu
        assert imported.column(9).buffers()[1].address == batch.column(9).buffers()[1].address
        imports.append((n, best(lambda: [roundtrip() for _ in range(100)], repeat) / 100))
    (small_n, small_t), (big_n, big_t) = imports
    row(f"capsule import, 10 cols ({small_n:,} vs {big_n:,} rows)", 0, big_t, target="≤ 50 µs, O(1)",
        result=f"{small_t * 1e6:.1f} vs {big_t * 1e6:.1f} µs "
               f"{'✓' if big_t <= 50e-6 and big_t <= 3 * small_t else '✗'}")

    device = "simulator" if arrow_gpu.using_simulator() else "CUDA device 0"
    try:
        if cupy is not None:
            device = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except Exception:  # noqa: BLE001 - the name is only decoration
        pass
    options = get_transfer_options()
    print(f"# arrow_gpu transfer benchmark{' (--quick)' if args.quick else ''}\n")
    print(f"{datetime.date.today()} · {device} · Python {platform.python_version()} · "
          f"pyarrow {pa.__version__} · numba-cuda "
          f"{getattr(numba, '__version__', 'n/a') if numba else 'n/a'} · "
          f"cupy {cupy.__version__ if cupy else 'n/a'} · engine options {options}\n")
    print(f"## Small calls (fresh processes; steady: median of {calls} calls, frees included)\n")
    header = ["call", "cold (first call)", "steady", "target", "result"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in small_rows:
        print("| " + " | ".join(cells) + " |")
    print("\n## Throughput (best of runs)\n")
    header = ["workload", "bytes", "ours", "ours GB/s", "copy_to + engine",
              "copy_to, no engine", "numba per buffer", "cupy per buffer", "target", "result"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")
    print_downloads(downloads(download_sizes))


def print_downloads(rows: list[list[str]]) -> None:
    print("\n## One-shot downloads (`to_host` of a device table, each size in a fresh process)\n")
    print("The first `to_host` writes memory the process never touched: each page costs a "
          "fault, so the host's rate of copying into fresh memory (CPU threads copying as many "
          "bytes into fresh pages in a process of their own, no DMA) bounds it as the bus does "
          "(\"÷ bound\": the slower of the two, over ours). Downloads into "
          "`arrow_gpu.pinned_memory_pool()` pin their memory the first time and reuse it after. "
          "The host's huge-page faults during the first `to_host` (system-wide): given a huge "
          "page (fell back to 4 KiB pages, direct compactions).\n")
    header = ["table", "to_host GB/s", "pinned D→H GB/s", "fresh copy GB/s", "÷ bound",
              "pinned pool, first GB/s", "pinned pool, again GB/s", "target ≥ 0.8 × pinned",
              "pool again", "huge pages (fell back, stalls)"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for cells in rows:
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
