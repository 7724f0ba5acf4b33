"""Soaks: many threads, many round trips, memory running out mid-table.

Each soak has a short form in the default run and its full size under ``-m campaign``
(16 threads x 1,000 round trips; 20,000 small and 2,000 large round trips).
"""

import gc
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import c_device_interface as cdi

SHORT, LONG = "short", "long"
SIZES = [pytest.param(SHORT), pytest.param(LONG, marks=[pytest.mark.campaign,
                                                          pytest.mark.timeout(0)])]


def _table(seed, rows):
    rng = np.random.default_rng(seed)
    values = rng.integers(-(2**40), 2**40, rows)
    return pa.table({
        "i": pa.array(values, mask=rng.random(rows) < 0.1),
        "s": pa.array([str(v) for v in values]),
        "l": pa.array([[int(v)] * (k % 3) for k, v in enumerate(values)], pa.list_(pa.int64())),
    })


def _rss_bytes():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("size", SIZES)
def test_threads_round_trip_their_own_data(ctx, size):
    threads, rounds = 16, (1_000 if size == LONG else 30)
    errors, mismatches = [], []

    def work(seed):
        try:
            for k in range(rounds):
                table = _table(seed * rounds + k, 1 + (seed * 37 + k) % 200)
                device = arrow_gpu.to_device(table)
                if not arrow_gpu.to_host(device).equals(table):
                    mismatches.append((seed, k))
                if not arrow_gpu.to_host(cdi.import_stream(cdi.DeviceData(device))).equals(table):
                    mismatches.append((seed, k, "stream"))
        except BaseException as error:  # noqa: BLE001 - reported by the main thread
            errors.append(error)

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert errors == [] and mismatches == []


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc")
@pytest.mark.parametrize("size", SIZES)
def test_round_trips_leave_device_memory_and_rss_flat(ctx, size):
    small_rounds, large_rounds = (20_000, 2_000) if size == LONG else (2_000, 40)
    small, large = _table(1, 8), pa.table({"x": np.arange(1 << 20)})  # 8 rows; 8 MiB

    def round_trips(table, count):
        for _ in range(count):
            assert arrow_gpu.to_host(arrow_gpu.to_device(table)).num_rows == table.num_rows

    round_trips(small, 200)  # warm-up: caches, modules, the allocator's first blocks
    round_trips(large, 5)
    gc.collect()
    device_before, rss_before = ctx.bytes_allocated, _rss_bytes()
    round_trips(small, small_rounds)
    round_trips(large, large_rounds)
    gc.collect()
    assert ctx.bytes_allocated == device_before
    # Far below what one leaked buffer per round trip would cost (2,000 x 8 MiB at least).
    assert _rss_bytes() - rss_before < 64 << 20


def test_out_of_memory_mid_table_gives_everything_back():
    # The simulator's memory limit makes the device run out: a host table larger than the
    # device (one coalesced allocation), and a device-to-device copy that runs out buffer by
    # buffer, halfway through the table.
    code = textwrap.dedent("""
        import gc
        import numpy as np, pyarrow as pa, arrow_gpu
        ctx = arrow_gpu.Context(0)
        chunk = pa.table({"x": np.arange(3 << 20), "y": np.arange(3 << 20)})  # 48 MiB
        on_device = arrow_gpu.to_device(pa.concat_tables([chunk] * 2))       # 96 of 128 MiB
        baseline = ctx.bytes_allocated
        for make in (lambda: arrow_gpu.to_device(pa.concat_tables([chunk] * 3)),
                     lambda: arrow_gpu.to_device(on_device)):
            for _ in range(5):
                try:
                    make()
                except MemoryError:
                    pass
                else:
                    raise AssertionError("more than the device holds fit on it")
                gc.collect()
                assert ctx.bytes_allocated == baseline, (ctx.bytes_allocated, baseline)
        del on_device
        gc.collect()
        assert arrow_gpu.to_host(arrow_gpu.to_device(chunk)).equals(chunk)  # still usable
        print("ok")
    """)
    env = dict(os.environ, ARROW_GPU_SIMULATOR="1", ARROW_GPU_SIMULATOR_MEMORY="128M")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-3000:]
