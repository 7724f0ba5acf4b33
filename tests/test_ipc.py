"""CUDA IPC between real processes: export in one, open in another (GPU and simulator)."""

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


def test_opening_in_the_exporting_process_is_refused(ctx):
    buf = ctx.buffer_from_data(b"same process")
    handle = IpcMemHandle.from_buffer(buf.export_for_ipc().serialize())
    with pytest.raises(OSError, match=r"Cuda error \d+ in function 'cuIpcOpenMemHandle\w*': \[CUDA_ERROR_\w+\]"):
        ctx.open_ipc_buffer(handle)
