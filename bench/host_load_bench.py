"""How fast the GPU reads and writes pinned host memory, alone and while CPU threads copy
host memory: the physical limit under a pageable transfer, whose threads must copy.

Needs CuPy and a GPU. Prints a Markdown table: 134 MiB moved between pinned memory and the
device in back-to-back asynchronous copies of 1 MiB, 8 MiB and one copy (the copy engine),
and pulled by a CUDA kernel through the memory's mapped address; first with the CPU idle,
then while ``--threads`` threads copy host memory (numpy, outside the GIL). A second table
times the copy engine alone (CUDA events) reading chunks that the threads wrote just before
each copy, as a pageable upload's staging does, against chunks no CPU has touched lately.

    python bench/host_load_bench.py [--threads 12]
"""

from __future__ import annotations

import argparse
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import cupy as cp
import numpy as np

from _timing import best  # bench/_timing.py, beside this script

SIZE = 134 << 20
PULL = cp.RawKernel(r'''
extern "C" __global__ void pull(const uint4* __restrict__ src, uint4* __restrict__ dst,
                                unsigned long long n) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x) dst[i] = src[i];
}''', "pull")


def engine_copy(host: np.ndarray, device: cp.ndarray, chunk: int, upload: bool):
    stream = cp.cuda.Stream(non_blocking=True)
    runtime = cp.cuda.runtime
    kind = runtime.memcpyHostToDevice if upload else runtime.memcpyDeviceToHost

    def run():
        for offset in range(0, SIZE, chunk):
            n = min(chunk, SIZE - offset)
            to_device, to_host = device.data.ptr + offset, host.ctypes.data + offset
            dst, src = (to_device, to_host) if upload else (to_host, to_device)
            runtime.memcpyAsync(dst, src, n, kind, stream.ptr)
        stream.synchronize()
    return run


def kernel_pull(host: np.ndarray, device: cp.ndarray):
    # Unified addressing: pinned host memory is mapped into the device at its own address.
    args = (np.uint64(host.ctypes.data), np.uint64(device.data.ptr), np.uint64(SIZE // 16))

    def run():
        PULL((528,), (256,), args)
        cp.cuda.Device().synchronize()
    return run


def engine_rate_after_writes(host: np.ndarray, device: cp.ndarray, chunk: int,
                             writers: ThreadPoolExecutor | None, threads: int) -> float:
    """GB/s of the copy engine alone moving ``host`` to the device in ``chunk``-sized copies,
    each chunk first written by ``threads`` threads (none if ``writers`` is None)."""
    stream = cp.cuda.Stream(non_blocking=True)
    start, end = cp.cuda.Event(), cp.cuda.Event()
    source = np.full(chunk, 7, np.uint8)
    seconds = 0.0
    for offset in range(0, SIZE - chunk + 1, chunk):
        if writers is not None:
            part = -(-chunk // threads)
            pieces = [(offset + k * part, min(chunk, (k + 1) * part) - k * part)
                      for k in range(threads)]
            list(writers.map(lambda p: np.copyto(host[p[0]:p[0] + p[1]], source[:p[1]]), pieces))
        start.record(stream)
        cp.cuda.runtime.memcpyAsync(device.data.ptr + offset, host.ctypes.data + offset, chunk,
                                    cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
        end.record(stream)
        end.synchronize()
        seconds += cp.cuda.get_elapsed_time(start, end) / 1e3
    return SIZE // chunk * chunk / seconds / 1e9


class HostLoad:
    """``threads`` threads copying 64 MiB of host memory over and over, until closed."""

    def __init__(self, threads: int):
        self.stop = threading.Event()
        self.buffers = [np.ones(128 << 20, np.uint8) for _ in range(threads)]
        self.threads = [threading.Thread(target=self.copy, args=(b,)) for b in self.buffers]
        for thread in self.threads:
            thread.start()
        time.sleep(0.2)

    def copy(self, buffer: np.ndarray) -> None:
        half = buffer.size // 2
        while not self.stop.is_set():
            np.copyto(buffer[half:], buffer[:half])

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=12, help="host threads copying")
    args = parser.parse_args()
    host = np.frombuffer(cp.cuda.alloc_pinned_memory(SIZE), np.uint8, SIZE)
    host[:] = 1
    device = cp.empty(SIZE, cp.uint8)
    ways = {f"copy engine, {chunk >> 20} MiB copies, host → device":
            engine_copy(host, device, chunk, True) for chunk in (1 << 20, 8 << 20)}
    ways["copy engine, one copy, host → device"] = engine_copy(host, device, SIZE, True)
    ways["kernel pulling mapped memory (528 blocks), host → device"] = kernel_pull(host, device)
    ways["copy engine, 8 MiB copies, device → host"] = engine_copy(host, device, 8 << 20, False)

    def rates() -> dict[str, float]:
        return {name: SIZE / best(run, 7) / 1e9 for name, run in ways.items()}

    idle = rates()
    load = HostLoad(args.threads)
    try:
        loaded = rates()
    finally:
        load.close()
    print(f"{cp.cuda.runtime.getDeviceProperties(0)['name'].decode()}: 134 MiB of pinned "
          f"memory, best of 7 (GB/s)\n")
    print(f"| way | CPU idle | {args.threads} threads copying host memory | ratio |")
    print("|---|---|---|---|")
    for name in ways:
        print(f"| {name} | {idle[name]:.1f} | {loaded[name]:.1f} | "
              f"{loaded[name] / idle[name]:.2f} |")

    print(f"\nThe copy engine alone, host → device (GB/s, CUDA events), reading chunks that "
          f"{args.threads} threads wrote just before each copy\n")
    print(f"| copies of | lines untouched | lines just written by {args.threads} threads | ratio |")
    print("|---|---|---|---|")
    with ThreadPoolExecutor(args.threads) as writers:
        for chunk in (1 << 20, 8 << 20):
            untouched = max(engine_rate_after_writes(host, device, chunk, None, args.threads)
                            for _ in range(3))
            written = max(engine_rate_after_writes(host, device, chunk, writers, args.threads)
                          for _ in range(3))
            print(f"| {chunk >> 20} MiB | {untouched:.1f} | {written:.1f} | "
                  f"{written / untouched:.2f} |")


if __name__ == "__main__":
    main()
