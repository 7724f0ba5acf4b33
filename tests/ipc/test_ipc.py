"""CUDA IPC between real processes: export in one, open in another (GPU and simulator)."""

import gc
import subprocess
import sys
import textwrap

import pytest

from arrow_gpu import IpcMemHandle

# The importer: reads a hex-serialized handle on stdin, prints the bytes it sees as hex, then
# overwrites the first four bytes with 0xff.
IMPORTER = textwrap.dedent(
    """
    import sys
    import arrow_gpu
    ctx = arrow_gpu.Context(0)
    handle = arrow_gpu.IpcMemHandle.from_buffer(bytes.fromhex(sys.stdin.read().strip()))
    buf = ctx.open_ipc_buffer(handle)
    sys.stdout.write(buf.copy_to_host().to_pybytes().hex())
    buf.copy_from_host(b"\\xff" * 4)
    ctx.synchronize()
    """
)

# The exporter: allocates, exports, prints the hex-serialized handle and exits at once.
EXPORTER = textwrap.dedent(
    """
    import arrow_gpu
    ctx = arrow_gpu.Context(0)
    buf = ctx.buffer_from_data(b"exporter is gone" * 4)
    print(buf.export_for_ipc().serialize().to_pybytes().hex())
    """
)


def run_python(code, stdin=""):
    # The child inherits the environment, so it uses the same driver (or simulator).
    result = subprocess.run(
        [sys.executable, "-c", code], input=stdin, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_another_process_reads_and_writes(ctx):
    data = bytes(range(256)) * 4
    buf = ctx.buffer_from_data(data)
    handle = buf.export_for_ipc()
    seen = run_python(IMPORTER, handle.serialize().to_pybytes().hex())
    assert bytes.fromhex(seen) == data
    assert buf.to_pybytes() == b"\xff" * 4 + data[4:]


def test_another_process_opens_a_slice(ctx):
    data = bytes(range(256))
    buf = ctx.buffer_from_data(data)
    handle = buf.slice(100, 50).export_for_ipc()
    seen = run_python(IMPORTER, handle.serialize().to_pybytes().hex())
    assert bytes.fromhex(seen) == data[100:150]
    assert buf.to_pybytes() == data[:100] + b"\xff" * 4 + data[104:]


def test_handle_keeps_exported_memory_alive(ctx):
    baseline = ctx.bytes_allocated
    buf = ctx.buffer_from_data(b"kept alive")
    handle = buf.export_for_ipc()
    del buf
    assert ctx.bytes_allocated == baseline + 10
    seen = run_python(IMPORTER, handle.serialize().to_pybytes().hex())
    assert bytes.fromhex(seen) == b"kept alive"


def test_opening_a_handle_of_a_dead_exporter(ctx):
    serialized = bytes.fromhex(run_python(EXPORTER).strip())
    handle = IpcMemHandle.from_buffer(serialized)
    with pytest.raises(OSError, match=r"Cuda error \d+ in function 'cuIpcOpenMemHandle\w*': \[CUDA_ERROR_\w+\]"):
        ctx.open_ipc_buffer(handle)


SAME_PROCESS = (r"exported by this process, and CUDA opens a handle only in another process; "
                r"here, use the exported buffer itself \(or copy it with "
                r"CudaBuffer\.copy_from_device\)")


def test_opening_in_the_exporting_process_says_to_use_the_buffer(ctx):
    # The driver's refusal, 'Cuda error 201 ... CUDA_ERROR_INVALID_CONTEXT', said nothing of
    # the cause. The exported handle object is gone here: the buffer keeps the export known.
    buf = ctx.buffer_from_data(b"same process")
    handle = IpcMemHandle.from_buffer(buf.export_for_ipc().serialize())
    with pytest.raises(ValueError, match=SAME_PROCESS):
        ctx.open_ipc_buffer(handle)


def test_opening_a_slice_of_an_exported_allocation_in_the_exporter(ctx):
    # Caching-allocator neighbours share one driver allocation, and so one driver handle.
    buffers = neighbours(ctx)
    exported = buffers[3].slice(4, 8).export_for_ipc()
    with pytest.raises(ValueError, match=SAME_PROCESS):
        ctx.open_ipc_buffer(exported)
    isolated = buffers[4].export_for_ipc(isolated=True)
    with pytest.raises(ValueError, match=SAME_PROCESS):
        ctx.open_ipc_buffer(isolated)


# --- what an opener can reach --------------------------------------------------------------

GRANULARITY = 2 << 20  # the driver never shares allocations of whole 2 MiB steps

# Opens a handle and prints the exported bytes, then every byte of the driver allocation the
# opened buffer lives in, both as hex, one per line.
ALLOCATION_READER = textwrap.dedent(
    """
    import sys
    import arrow_gpu
    ctx = arrow_gpu.Context(0)
    handle = arrow_gpu.IpcMemHandle.from_buffer(bytes.fromhex(sys.stdin.read().strip()))
    buf = ctx.open_ipc_buffer(handle)
    base, size = buf._driver_allocation()
    whole = ctx.foreign_buffer(base, size, base=buf)
    print(buf.copy_to_host().to_pybytes().hex())
    print(whole.copy_to_host().to_pybytes().hex())
    """
)


def neighbours(ctx):
    """Small buffers with a secret each, carved next to one another by the allocator."""
    return [ctx.buffer_from_data(f"secret {i:03}".encode() * 20) for i in range(32)]


def test_every_flipped_bit_of_a_serialized_handle_is_refused(ctx):
    # Defect 5: a flipped bit in the offset or size opened other bytes of the exporter's
    # allocation (a neighbouring buffer) without an error.
    buffers = neighbours(ctx)
    raw = bytearray(buffers[5].export_for_ipc().serialize().to_pybytes())
    for bit in range(len(raw) * 8):
        raw[bit // 8] ^= 1 << (bit % 8)
        with pytest.raises(ValueError, match="corrupt|not an arrow_gpu IPC handle|version"):
            IpcMemHandle.from_buffer(bytes(raw))
        raw[bit // 8] ^= 1 << (bit % 8)
    with pytest.raises(ValueError, match="corrupt: .* truncated"):
        IpcMemHandle.from_buffer(bytes(raw[:-1]))
    with pytest.raises(ValueError, match="corrupt: .* extended"):
        IpcMemHandle.from_buffer(bytes(raw) + b"\0")


def test_a_shared_allocation_shows_its_neighbours(ctx):
    # What the README warns about: CUDA IPC opens the whole driver allocation.
    buffers = neighbours(ctx)
    exported = max(buffers, key=lambda buffer: buffer.export_for_ipc().offset)
    lines = run_python(ALLOCATION_READER,
                       exported.export_for_ipc().serialize().to_pybytes().hex()).split()
    assert bytes.fromhex(lines[0]) == exported.to_pybytes()
    assert buffers[0].to_pybytes() in bytes.fromhex(lines[1])


@pytest.mark.parametrize("nbytes", [640, GRANULARITY, GRANULARITY + 1])
def test_an_isolated_export_shows_only_its_bytes(ctx, nbytes):
    buffers = neighbours(ctx)
    data = bytes(range(256)) * (nbytes // 256) + bytes(nbytes % 256)
    source = ctx.buffer_from_data(data)
    handle = source.export_for_ipc(isolated=True)
    assert handle.offset == 0 and handle.size == nbytes
    source.copy_from_host(b"later")  # the export is a copy, made at export time
    exported, whole = run_python(ALLOCATION_READER,
                                 handle.serialize().to_pybytes().hex()).split()
    rounded = -(-nbytes // GRANULARITY) * GRANULARITY
    assert bytes.fromhex(exported) == data
    assert bytes.fromhex(whole) == data + bytes(len(bytes.fromhex(whole)) - nbytes)
    assert nbytes <= len(bytes.fromhex(whole)) <= rounded
    assert not any(buffer.to_pybytes() in bytes.fromhex(whole) for buffer in buffers)


def test_an_isolated_export_is_freed_with_its_handle(ctx):
    baseline = ctx.bytes_allocated
    handle = ctx.buffer_from_data(b"x" * 100).export_for_ipc(isolated=True)
    # The handle keeps the copy's allocation (counted whole), not the source buffer.
    assert ctx.bytes_allocated == baseline + GRANULARITY
    del handle
    gc.collect()
    assert ctx.bytes_allocated == baseline


@pytest.mark.parametrize(("visible", "opens"), [("1", True), ("0", False)])
def test_a_process_that_numbers_devices_otherwise_opens_the_same_device(ctx, visible, opens):
    # With CUDA_VISIBLE_DEVICES=1 the importer's device 0 is the exporter's device 1; one
    # that does not see that device cannot open its memory.
    import os
    import arrow_gpu
    if arrow_gpu.device_count() < 2:
        pytest.skip("needs two devices")
    data = b"on the second device"
    buf = arrow_gpu.Context(1).buffer_from_data(data)
    code = IMPORTER.replace("buf = ctx.open_ipc_buffer(handle)", textwrap.dedent(
        """
        try:
            buf = ctx.open_ipc_buffer(handle)
        except Exception as error:
            print("refused:", error)
            raise SystemExit
        """))
    result = subprocess.run([sys.executable, "-c", code],
                            input=buf.export_for_ipc().serialize().to_pybytes().hex(),
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "CUDA_VISIBLE_DEVICES": visible})
    assert result.returncode == 0, result.stderr
    if opens:
        assert bytes.fromhex(result.stdout) == data
        assert buf.to_pybytes() == b"\xff" * 4 + data[4:]
    else:
        assert result.stdout.startswith("refused:"), result.stdout
    del buf
    gc.collect()
