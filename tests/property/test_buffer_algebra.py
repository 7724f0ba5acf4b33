"""CudaBuffer copies and slices agree with a bytearray model of device memory.

Every operation runs against the device and against the model; the model decides whether
the arguments are in range, and the device must raise exactly then, and otherwise end up
holding exactly the model's bytes.
"""

import pytest
from hypothesis import given
from hypothesis import strategies as st

import arrow_gpu
from _leaks import gives_back

contents = st.binary(max_size=96)
positions = st.integers(min_value=-4, max_value=110)
counts = st.integers(min_value=-3, max_value=110)  # negative: the "as much as fits" default
lengths = st.one_of(st.none(), st.integers(min_value=-2, max_value=110))


class OutOfRange(Exception):
    """The model's verdict: these arguments are out of range."""


def copy_extent(size, position, nbytes, source_size, source_kind):
    """Bytes moved by copying ``nbytes`` from a ``source_kind`` source into ``size`` at ``position``.

    Raises OutOfRange with the message the device must give.
    """
    if not 0 <= position <= size:
        raise OutOfRange("position argument is out-of-range")
    room = size - position
    if nbytes < 0:
        return min(room, source_size)
    if nbytes > source_size:
        raise OutOfRange(f"requested more to copy than available from {source_kind} buffer")
    if nbytes > room:
        raise OutOfRange("requested more to copy than available in device buffer")
    return nbytes


def check_no_leak(test):
    """Run ``test`` with a device context and check each example gives back its memory.

    (The ``ctx`` fixture cannot be used: Hypothesis runs many examples per fixture instance.)
    """

    def wrapper(*args, **kwargs):
        ctx = arrow_gpu.Context(0)
        with gives_back(lambda: ctx.bytes_allocated, "device memory leaked"):
            test(ctx, *args, **kwargs)

    return wrapper


@given(data=contents, position=positions, nbytes=counts)
def test_copy_to_host(data, position, nbytes):
    @check_no_leak
    def run(ctx):
        buf = ctx.buffer_from_data(data)
        available = len(data) - position
        if not 0 <= position <= len(data):
            with pytest.raises(ValueError, match="position argument is out-of-range"):
                buf.copy_to_host(position=position, nbytes=nbytes)
        elif nbytes > available:
            with pytest.raises(ValueError, match="requested more to copy than available from device buffer"):
                buf.copy_to_host(position=position, nbytes=nbytes)
        else:
            count = available if nbytes < 0 else nbytes
            assert buf.copy_to_host(position=position, nbytes=nbytes).to_pybytes() == data[position : position + count]

    run()


@given(initial=contents, source=contents, position=positions, nbytes=counts)
def test_copy_from_host(initial, source, position, nbytes):
    @check_no_leak
    def run(ctx):
        buf = ctx.buffer_from_data(initial)
        model = bytearray(initial)
        try:
            count = copy_extent(len(model), position, nbytes, len(source), "host")
        except OutOfRange as error:
            with pytest.raises(ValueError, match=str(error)):
                buf.copy_from_host(source, position=position, nbytes=nbytes)
        else:
            assert buf.copy_from_host(source, position=position, nbytes=nbytes) == count
            model[position : position + count] = source[:count]
        assert buf.to_pybytes() == bytes(model)

    run()


@given(initial=contents, source=contents, source_offset=st.integers(0, 96), position=positions, nbytes=counts)
def test_copy_from_device(initial, source, source_offset, position, nbytes):
    @check_no_leak
    def run(ctx):
        buf = ctx.buffer_from_data(initial)
        offset = min(source_offset, len(source))
        device_source = ctx.buffer_from_data(source).slice(offset)
        model = bytearray(initial)
        try:
            count = copy_extent(len(model), position, nbytes, len(source) - offset, "device")
        except OutOfRange as error:
            with pytest.raises(ValueError, match=str(error)):
                buf.copy_from_device(device_source, position=position, nbytes=nbytes)
        else:
            assert buf.copy_from_device(device_source, position=position, nbytes=nbytes) == count
            model[position : position + count] = source[offset : offset + count]
        assert buf.to_pybytes() == bytes(model)
        assert device_source.to_pybytes() == source[offset:]

    run()


@given(data=contents, offset=positions, length=lengths, write=st.binary(min_size=1, max_size=8))
def test_slice_is_a_window(data, offset, length, write):
    @check_no_leak
    def run(ctx):
        buf = ctx.buffer_from_data(data)
        if not 0 <= offset <= len(data):
            # The exception type is pinned by test_cuda_buffer.py; here: raised exactly then.
            with pytest.raises((IndexError, ValueError), match="offset argument is out-of-range"):
                buf.slice(offset, length)
            return
        if length is not None and length < 0:
            with pytest.raises(ValueError):
                buf.slice(offset, length)
            return
        end = len(data) if length is None else min(offset + length, len(data))
        piece = buf.slice(offset, length)
        assert piece.size == end - offset
        assert piece.address == buf.address + offset
        assert piece.to_pybytes() == data[offset:end]
        # Writes through the slice land in the parent at the slice's offset.
        count = piece.copy_from_host(write)
        model = bytearray(data)
        model[offset : offset + count] = write[:count]
        assert buf.to_pybytes() == bytes(model)
        assert count == min(len(write), end - offset)

    run()


@given(data=contents, start=st.integers(-110, 110) | st.none(), stop=st.integers(-110, 110) | st.none())
def test_getitem_slices_like_bytes(data, start, stop):
    @check_no_leak
    def run(ctx):
        buf = ctx.buffer_from_data(data)
        assert buf[start:stop].to_pybytes() == data[start:stop]

    run()


@given(data=contents, index=st.integers(-110, 110))
def test_getitem_index_like_bytes(data, index):
    @check_no_leak
    def run(ctx):
        buf = ctx.buffer_from_data(data)
        if -len(data) <= index < len(data):
            assert buf[index] == data[index]
        else:
            with pytest.raises(IndexError):
                buf[index]

    run()


@given(data=contents, offset=st.integers(-4, 110), size=st.integers(-3, 110))
def test_buffer_from_data(data, offset, size):
    @check_no_leak
    def run(ctx):
        if not 0 <= offset <= len(data):
            with pytest.raises(ValueError, match="offset argument is out-of-range"):
                ctx.buffer_from_data(data, offset=offset, size=size)
        elif size >= 0 and offset + size > len(data):
            with pytest.raises(ValueError, match="requested larger slice than available in device buffer"):
                ctx.buffer_from_data(data, offset=offset, size=size)
        else:
            end = len(data) if size < 0 else offset + size
            assert ctx.buffer_from_data(data, offset=offset, size=size).to_pybytes() == data[offset:end]

    run()
