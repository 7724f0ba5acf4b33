"""arrow_gpu.compute on the caller's stream, and with other libraries' masks and indices.

Compute queues its work on the stream it is given and waits only on that stream: a
context-wide synchronization would also wait for every other library's streams. Masks and
indices may be any CUDA array (``__cuda_array_interface__`` or DLPack), bools included.
"""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import arrow_gpu
from arrow_gpu import _cuda, compute
from arrow_gpu.interop import CudaArrayView, from_cuda_array, from_dlpack
from arrow_gpu.transfer import to_device, to_host

HOST = pa.table({"x": [1, None, 3, 4, 5], "s": ["a", None, "ccc", "dd", ""],
                 "f": [0.5, 1.5, None, 3.5, 4.5]})
KEEP = [True, False, True, True, False]


def cuda_view(values, dtype):
    """A CUDA array (CAI and DLPack) of ``values`` as ``dtype``, over device memory."""
    host = np.asarray(values, dtype=dtype)
    buffer = arrow_gpu.Context(0).buffer_from_data(host.tobytes())
    return CudaArrayView(buffer, buffer.address, len(host), host.dtype)


class DLPackOnly:
    """A producer that speaks DLPack and nothing else (as JAX arrays may)."""

    def __init__(self, view):
        self._view = view

    def __dlpack__(self, **kwargs):
        return self._view.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._view.__dlpack_device__()


def calls_of_every_function(data, stream):
    """One call of each compute function on ``data`` (a device table), on ``stream``."""
    column = data["x"]
    mask = compute.is_valid(column, stream=stream)
    return [
        compute.filter(data, mask, stream=stream),
        compute.take(data, to_device(pa.array([4, 0, 2]), stream=stream), stream=stream),
        compute.is_null(column, stream=stream),
        compute.null_count(column, stream=stream),
        compute.drop_null(data, stream=stream),
        compute.fill_null(column, 7, stream=stream),
        compute.slice(data, 1, 3, stream=stream),
        compute.concat([data, data], stream=stream),
        compute.combine_chunks(pa.chunked_array([column.chunk(0), column.chunk(0)]),
                               stream=stream),
    ]


def expected_of_every_function(host):
    column = host["x"]
    return [
        host.filter(pc.is_valid(column)),
        host.take([4, 0, 2]),
        pc.is_null(column),
        column.null_count,
        pc.drop_null(host),
        pc.fill_null(column, 7),
        host.slice(1, 3),
        pa.concat_tables([host, host]),
        pa.chunked_array([column.chunk(0), column.chunk(0)]).combine_chunks(),
    ]


def on_host(result):
    return result if isinstance(result, int) else to_host(result)


def test_every_function_gives_the_same_on_any_stream(ctx):
    data = to_device(HOST)
    expected = expected_of_every_function(HOST)
    for stream in (None, 0, arrow_gpu.Stream(ctx), arrow_gpu.Stream(ctx, non_blocking=True)):
        results = calls_of_every_function(data, stream)
        for result, want in zip(results, expected):
            got = on_host(result)
            if isinstance(want, pa.Table):
                got = got.combine_chunks()
                want = want.combine_chunks()
            assert got == want, (stream, got, want)


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's calls")
def test_the_kernel_path_never_synchronizes_a_whole_context(ctx):
    # The simulator runs the kernel path, its kernels' host twins in their place.
    data = to_device(HOST)
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    before = _cuda._simulated_context_synchronizations()
    calls_of_every_function(data, stream)
    to_host(data, stream, filter=to_device(pa.array(KEEP)))
    to_host(data, stream, indices=to_device(pa.array([1])))
    assert _cuda._simulated_context_synchronizations() == before


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's calls")
def test_a_call_on_a_non_blocking_stream_stays_off_the_legacy_stream(ctx):
    # The legacy default stream waits for every blocking stream of every library (CuPy's
    # streams are blocking unless asked otherwise): work given a non-blocking stream queues
    # nothing there, waits for nothing there, and does not wait for the memory it freed
    # while that stream is held up.
    data = to_device(HOST)
    keep, one = to_device(pa.array(KEEP)), to_device(pa.array([1]))
    # Other libraries' masks and indices: their producers order their work before the stream.
    foreign = [(wrap(cuda_view(KEEP, np.bool_)), wrap(cuda_view([3, 0], np.int32)))
               for wrap in (lambda view: view, DLPackOnly)]
    stream = arrow_gpu.Stream(ctx, non_blocking=True)
    before = _cuda._simulated_legacy_stream_uses()
    _cuda._simulate_busy_legacy_stream(True)
    try:
        for _ in range(2):  # the second round's memory is what the first round freed
            calls_of_every_function(data, stream)
            to_host(data, stream, filter=keep)
            to_host(data, stream, indices=one)
            to_host(to_device(HOST, stream=stream), stream)
            for mask, indices in foreign:
                compute.filter(data, mask, stream=stream)
                compute.take(data, indices, stream=stream)
    finally:
        _cuda._simulate_busy_legacy_stream(False)
    assert _cuda._simulated_legacy_stream_uses() == before


def test_a_bad_stream_is_refused_before_any_work():
    data = to_device(HOST)
    with pytest.raises(TypeError):
        compute.filter(data, to_device(pa.array(KEEP)), stream="not a stream")
    with pytest.raises(ValueError):
        compute.null_count(data["x"], stream=-1)


@pytest.mark.parametrize("wrap", [lambda view: view, DLPackOnly], ids=["cai", "dlpack"])
def test_masks_and_indices_of_other_libraries(wrap, ctx):
    data = to_device(HOST)
    filtered = compute.filter(data, wrap(cuda_view(KEEP, np.bool_)))
    assert to_host(filtered).combine_chunks() == HOST.filter(pa.array(KEEP))
    for dtype in (np.int8, np.uint16, np.int32, np.int64, np.uint64):
        taken = compute.take(data, wrap(cuda_view([3, 3, 0], dtype)))
        assert to_host(taken).combine_chunks() == HOST.take([3, 3, 0])
    selected = to_host(data, filter=wrap(cuda_view(KEEP, np.bool_)))
    assert selected.combine_chunks() == HOST.filter(pa.array(KEEP))
    with pytest.raises(TypeError, match="boolean"):
        compute.filter(data, wrap(cuda_view([1, 0, 1, 1, 0], np.int32)))
    with pytest.raises(ValueError, match="5"):
        compute.filter(data, wrap(cuda_view([True], np.bool_)))


class ForgedStream:
    """A CUDA array interface naming a producer stream that is no stream."""

    def __init__(self, view, stream):
        self.__cuda_array_interface__ = {**view.__cuda_array_interface__, "stream": stream}


@pytest.mark.parametrize("stream", ["abc", -1, 2**70, 1.5])
def test_a_mask_naming_no_stream_is_refused_clearly(stream, ctx):
    data = to_device(HOST)
    mask = ForgedStream(cuda_view(KEEP, np.bool_), stream)
    for mine in (None, arrow_gpu.Stream(ctx, non_blocking=True)):
        with pytest.raises((TypeError, ValueError), match="stream"):
            compute.filter(data, mask, stream=mine)


def test_host_arrays_as_masks_name_the_way_to_the_device():
    with pytest.raises(TypeError, match="host"):
        compute.filter(to_device(HOST), np.array(KEEP))


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 64, 1000])
def test_bools_become_arrow_booleans(length, ctx):
    flags = np.random.default_rng(length).random(length) < 0.5
    for make in (from_cuda_array, from_dlpack):
        array = make(cuda_view(flags, np.bool_))
        assert array.type == pa.bool_() and not array.is_cpu
        host = to_host(array)
        host.validate(full=True)
        assert host.to_pylist() == flags.tolist()
    nulls = np.arange(length) % 3 == 0
    with_nulls = to_host(from_dlpack(cuda_view(flags, np.bool_),
                                     mask=cuda_view(nulls, np.bool_)))
    assert with_nulls == pa.array(flags, mask=nulls)


@pytest.mark.gpu
def test_cupy_and_torch_masks_and_indices(ctx):
    cupy = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    data = to_device(HOST)
    expected = HOST.filter(pa.array(KEEP))
    for mask in (cupy.asarray(KEEP), torch.tensor(KEEP, device="cuda")):
        assert to_host(compute.filter(data, mask)).combine_chunks() == expected
    for indices in (cupy.asarray([4, 1], dtype=cupy.int32),
                    torch.tensor([4, 1], device="cuda", dtype=torch.int64)):
        assert to_host(compute.take(data, indices)).combine_chunks() == HOST.take([4, 1])


def busy_torch_stream():
    """A PyTorch stream (non-blocking) kept busy for about a second; its ``query``."""
    torch = pytest.importorskip("torch")
    busy = torch.cuda.Stream()
    with torch.cuda.stream(busy):
        torch.cuda._sleep(int(2e9))
    return busy.query


SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
"""


def busy_cupy_stream():
    """A CuPy stream as CuPy makes it by default (a blocking one, which the legacy default
    stream waits for) kept busy for about a second; its ``query``."""
    cupy = pytest.importorskip("cupy")
    busy = cupy.cuda.Stream()
    with busy:
        cupy.RawKernel(SPIN, "spin")((1,), (1,), (cupy.int64(2_000_000_000),))
    return lambda: busy.done


@pytest.mark.gpu
@pytest.mark.parametrize("wrap", [lambda view: view, DLPackOnly], ids=["cai", "dlpack"])
def test_a_mask_still_being_made_on_another_stream_is_read_once_made(wrap, ctx):
    # The producer orders its work before the call's stream (DLPack's stream argument, or
    # an event on the stream the CUDA array interface names): no host wait, no early read.
    cupy = pytest.importorskip("cupy")
    data = to_device(HOST)
    mine = arrow_gpu.Stream(ctx, non_blocking=True)
    spin = cupy.RawKernel(SPIN, "spin")
    keep = cupy.asarray(np.array(KEEP, np.int8))
    producer = cupy.cuda.Stream(non_blocking=True)
    with producer:
        for round in range(3):
            spin((1,), (1,), (cupy.int64(100_000_000),))  # the mask comes after this
            mask = (keep if round % 2 == 0 else 1 - keep) > 0
            filtered = compute.filter(data, wrap(mask), stream=mine)
            want = [flag == (round % 2 == 0) for flag in KEEP]
            assert to_host(filtered, mine).combine_chunks() == HOST.filter(pa.array(want))


@pytest.mark.gpu
@pytest.mark.parametrize("make_busy", [busy_torch_stream, busy_cupy_stream],
                         ids=["torch", "cupy-blocking"])
def test_a_call_on_its_own_stream_does_not_wait_for_other_streams(make_busy, ctx):
    data = to_device(HOST)
    mask = to_device(pa.array(KEEP))
    mine = arrow_gpu.Stream(ctx, non_blocking=True)
    # A process's first calls load the kernels and reserve device memory, which the driver
    # may do by waiting for the whole device: this test, run first in its process, failed
    # without these calls ahead of the busy stream.
    calls_of_every_function(data, mine)
    mine.synchronize()
    done = make_busy()  # another library's stream, kept busy for about a second
    results = calls_of_every_function(data, mine)
    filtered = compute.filter(data, mask, stream=mine)
    still_busy = not done()
    ctx.synchronize()
    assert still_busy, "compute waited for another library's stream"
    assert to_host(filtered).combine_chunks() == HOST.filter(pa.array(KEEP))
    for result, want in zip(results, expected_of_every_function(HOST)):
        got = on_host(result)
        if isinstance(want, pa.Table):
            got, want = got.combine_chunks(), want.combine_chunks()
        assert got == want
