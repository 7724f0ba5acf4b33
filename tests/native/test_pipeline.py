"""The staging ring's lease and the pipeline on their own, without the shortcuts of the
transfers above them (small copies, pinned memory), through private hooks of the engine.

The ring is made tiny, so that a few kilobytes take many chunks, inline and with workers.
"""

import threading

import numpy as np
import pytest

from arrow_gpu import _cuda
from arrow_gpu.transfer_options import release_staging, staging_bytes_held, transfer_options

CHUNK = 512
SLOTS = 8
BUSY = "another transfer holds the staging ring"


@pytest.fixture(params=[1, 3], ids=["inline", "threads"])
def ring(request):
    release_staging()  # a ring of other sizes, left by earlier tests, would be re-made anyway
    with transfer_options(staging_bytes=SLOTS * CHUNK, chunk_bytes=CHUNK,
                          threads=request.param, small_copy_bytes=256) as options:
        yield options
    release_staging()


def in_another_thread(function):
    """What ``function()`` returns when run by another thread, which must not block."""
    result = []
    thread = threading.Thread(target=lambda: result.append(function()))
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive(), "the second transfer waited for the first"
    return result[0]


def lease_taken(ctx):
    return _cuda._with_staging_lease(ctx, lambda held: held)


# ---- the lease ---------------------------------------------------------------------------

def test_the_lease_is_one_transfers_at_a_time_and_the_second_gets_none_at_once(ctx, ring):
    def while_held(held):
        assert held
        assert staging_bytes_held() == SLOTS * CHUNK
        return in_another_thread(lambda: lease_taken(ctx))

    assert _cuda._with_staging_lease(ctx, while_held) is False
    assert lease_taken(ctx)  # given back


def test_a_transfer_while_the_ring_is_leased_copies_directly(ctx, ring):
    data = np.random.default_rng(1).integers(0, 256, 20 * CHUNK, dtype=np.uint8).tobytes()

    def while_held(held):
        assert held
        return in_another_thread(lambda: ctx.buffer_from_data(data).copy_to_host().to_pybytes())

    assert _cuda._with_staging_lease(ctx, while_held) == data


def test_the_pipeline_refuses_to_run_while_another_transfer_holds_the_ring(ctx, ring):
    device = ctx.new_buffer(CHUNK)
    host = np.zeros(CHUNK, np.uint8)
    pieces = [(host.ctypes.data, device.address, CHUNK, device.address, device.address + CHUNK)]

    def attempt():
        with pytest.raises(RuntimeError, match=BUSY):
            _cuda._run_pipeline(ctx, True, pieces)
        return True

    assert _cuda._with_staging_lease(ctx, lambda held: in_another_thread(attempt))


def test_an_error_while_the_lease_is_held_gives_it_back(ctx, ring):
    with pytest.raises(ZeroDivisionError):
        _cuda._with_staging_lease(ctx, lambda held: 1 // 0)
    assert in_another_thread(lambda: lease_taken(ctx))


def test_staging_released_while_leased_is_freed_when_the_lease_ends(ctx, ring):
    def while_held(held):
        in_another_thread(release_staging)  # must not wait for the holder, nor free under it
        return staging_bytes_held()

    assert _cuda._with_staging_lease(ctx, while_held) == SLOTS * CHUNK
    assert staging_bytes_held() == 0


# ---- the pipeline ------------------------------------------------------------------------

def scattered(seed, count=12):
    """Piece sizes, the order of the pieces on the device, and the gaps before each there:
    around the largest gap one DMA spans (256), so that some join and some do not."""
    rng = np.random.default_rng(seed)
    sizes = [int(size) for size in rng.integers(0, 3 * CHUNK, count)]
    order = [int(index) for index in rng.permutation(count)]
    gaps = [int(rng.choice([0, 1, 63, 255, 256, 257, 1000])) for _ in range(count)]
    return sizes, order, gaps


def layout(sizes, order, gaps, skew=3):
    """Each piece's (host offset, device offset), and the host and device sizes: host in
    piece order at odd offsets, device in ``order`` with ``gaps``."""
    host_offsets, position = [], skew
    for size in sizes:
        host_offsets.append(position)
        position += size + skew
    device_offsets, cursor = [0] * len(sizes), 0
    for index in order:
        cursor += gaps[index]
        device_offsets[index] = cursor
        cursor += sizes[index]
    return list(zip(host_offsets, device_offsets)), position, cursor + 1


def pieces_of(offsets, sizes, host, device):
    begin, end = device.address, device.address + device.size
    return [(host.ctypes.data + h, begin + d, size, begin, end)
            for (h, d), size in zip(offsets, sizes)]


@pytest.mark.parametrize("seed", range(4))
def test_uploads_land_each_piece_where_it_says_and_nothing_else(ctx, ring, seed):
    sizes, order, gaps = scattered(seed)
    offsets, host_size, device_size = layout(sizes, order, gaps)
    host = np.random.default_rng(seed).integers(0, 256, host_size, dtype=np.uint8)
    device = ctx.buffer_from_data(b"\xab" * device_size)
    _cuda._run_pipeline(ctx, True, pieces_of(offsets, sizes, host, device))
    got = np.frombuffer(device.copy_to_host().to_pybytes(), np.uint8)
    written = np.zeros(device_size, bool)
    for (h, d), size in zip(offsets, sizes):
        assert got[d:d + size].tobytes() == host[h:h + size].tobytes()
        written[d:d + size] = True
    # Gaps that one DMA spans may be zero-filled (the region is the buffer's), never garbage.
    assert set(np.unique(got[~written]).tolist()) <= {0, 0xAB}


@pytest.mark.parametrize("seed", range(4))
def test_downloads_write_each_piece_and_no_other_host_byte(ctx, ring, seed):
    sizes, order, gaps = scattered(seed)
    offsets, host_size, device_size = layout(sizes, order, gaps)
    source = np.random.default_rng(seed).integers(0, 256, device_size, dtype=np.uint8)
    device = ctx.buffer_from_data(source.tobytes())
    host = np.full(host_size, 0xCD, np.uint8)
    _cuda._run_pipeline(ctx, False, pieces_of(offsets, sizes, host, device))
    written = np.zeros(host_size, bool)
    for (h, d), size in zip(offsets, sizes):
        assert host[h:h + size].tobytes() == source[d:d + size].tobytes()
        written[h:h + size] = True
    assert (host[~written] == 0xCD).all()  # the gaps of a DMA stay in staging


@pytest.mark.parametrize("to_device", [True, False], ids=["upload", "download"])
def test_an_error_mid_transfer_is_reported_and_gives_the_ring_back(ctx, ring, to_device):
    size = 3 * CHUNK  # each piece takes several chunks: the bad one fails mid-transfer
    device = ctx.buffer_from_data(bytes(2 * size))
    host = np.arange(2 * size, dtype=np.uint8)
    begin, end = device.address, device.address + device.size
    bad = begin + (1 << 40)  # no device memory there
    pieces = [(host.ctypes.data, begin, size, begin, end),
              (host.ctypes.data + size, bad, size, bad, bad + size),
              (host.ctypes.data + size, begin + size, size, begin, end)]
    copy = "HtoD" if to_device else "DtoH"
    with pytest.raises(OSError, match=f"cuMemcpy{copy}Async.*CUDA_ERROR_INVALID_VALUE"):
        _cuda._run_pipeline(ctx, to_device, pieces)
    assert in_another_thread(lambda: lease_taken(ctx))
    # The ring works on: no DMA, task or worker of the failed transfer is left on it.
    host[:] = np.arange(2 * size, dtype=np.uint8)[::-1]
    good = [pieces[0], pieces[2]]
    _cuda._run_pipeline(ctx, True, good)
    back = np.zeros(2 * size, np.uint8)
    _cuda._run_pipeline(ctx, False, [(back.ctypes.data + h - host.ctypes.data, d, n, b, e)
                                     for h, d, n, b, e in good])
    assert back.tobytes() == host.tobytes()


def test_an_empty_transfer_moves_nothing(ctx, ring):
    _cuda._run_pipeline(ctx, True, [])
    assert lease_taken(ctx)


def test_the_pipeline_needs_staging(ctx):
    with transfer_options(staging_bytes=0):
        with pytest.raises(RuntimeError, match="staging is off"):
            _cuda._run_pipeline(ctx, True, [])
