"""What users see when something is off: the diagnostic report, is_available, DEBUG logging,
and errors that name the mistake and the way out."""

import logging
import os
import subprocess
import sys

import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import diagnostics
from arrow_gpu.transfer import to_device, to_host
from arrow_gpu.transfer_options import transfer_options, transfer_progress


def test_python_dash_m_prints_the_report():
    result = subprocess.run([sys.executable, "-m", "arrow_gpu"], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == (f"arrow_gpu {arrow_gpu.__version__} (built against pyarrow "
                        f"{pa.__version__})")
    headings = [line.split(":")[0] for line in lines if not line.startswith(" ")]
    for heading in ("pyarrow.cuda", "simulator", "driver", "devices", "allocator",
                    "transfer options", "environment"):
        assert heading in headings
    assert "pyarrow.cuda: served by arrow_gpu" in lines


def test_the_report_lists_each_device_with_memory_and_peers():
    text = diagnostics.report()
    count = arrow_gpu.device_count()
    device_lines = [line for line in text.splitlines() if line.startswith("  ") and
                    "peer access to:" in line]
    assert len(device_lines) == count
    if arrow_gpu.using_simulator():
        assert "simulator: on" in text
        assert "driver: arrow_gpu host simulator" in text
        # Simulated devices reach every other one.
        assert device_lines[0].endswith(", ".join(str(n) for n in range(1, count)) or "none")
    else:
        assert "driver: NVIDIA driver" in text and "CUDA " in text


def test_the_report_says_what_failed_and_goes_on(monkeypatch):
    def broken():
        raise OSError("no driver here")

    monkeypatch.setattr(diagnostics, "_devices", broken)
    text = diagnostics.report()
    assert "devices: unavailable (OSError: no driver here)" in text
    assert "transfer options:" in text


def test_is_available_answers_without_raising():
    assert arrow_gpu.is_available() is True
    code = "import arrow_gpu; print(arrow_gpu.is_available())"
    env = {"ARROW_GPU_SIMULATOR": "0", "ARROW_GPU_DRIVER_LIBRARY": "/no/such/libcuda.so.1"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_transfers_and_the_allocator_log_their_plans_at_debug(ctx, caplog):
    table = pa.table({"x": [1, 2, None]})
    with caplog.at_level(logging.DEBUG, logger="arrow_gpu"):
        on_gpu = to_device(table, device=ctx)
        to_host(on_gpu)
        arrow_gpu.set_allocator("device")
        try:
            with transfer_options(staging_bytes=1 << 20, chunk_bytes=256 << 10):
                arrow_gpu.Context(0).buffer_from_data(b"x" * (4 << 20))
        finally:
            arrow_gpu.set_allocator()  # the default, for the tests that follow
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("to_device: Table of ") and "to device 0: one coalesced" in m
               for m in messages)
    assert any(m.startswith("to_host: Table of ") for m in messages)
    assert "device allocator set to device" in messages


def test_nothing_is_logged_above_debug(ctx, caplog):
    with caplog.at_level(logging.INFO, logger="arrow_gpu"):
        to_host(to_device(pa.array([1])))
    assert caplog.records == []


@pytest.mark.parametrize("device", ["context", "memory_manager", "device", "pyarrow.cuda"])
def test_to_device_takes_what_pyarrow_users_pass_as_the_device(ctx, device):
    from pyarrow import cuda

    target = {"context": ctx, "memory_manager": ctx.memory_manager, "device": ctx.device,
              "pyarrow.cuda": cuda.Context(0)}[device]
    moved = to_device(pa.array([1, 2]), device=target)
    assert moved.device_type == pa.DeviceAllocationType.CUDA
    assert to_host(moved).to_pylist() == [1, 2]


def test_to_device_refuses_a_host_device_and_other_things_by_name():
    with pytest.raises(ValueError, match="must be a CUDA device.*use to_host"):
        to_device(pa.array([1]), device=pa.default_cpu_memory_manager())
    with pytest.raises(TypeError, match="device must be an int .*, a Context.*got 'str'"):
        to_device(pa.array([1]), device="cuda:0")


class _CudaArrayLike:
    __cuda_array_interface__ = {"shape": (1,), "typestr": "<i4", "data": (0, False),
                                "version": 3}


class _DLPackLike:
    def __dlpack__(self, stream=None):
        raise AssertionError("not called")


@pytest.mark.parametrize(("obj", "hint"), [
    (_CudaArrayLike(), r"it is a CUDA array: .*arrow_gpu\.from_cuda_array\(obj\)"),
    (_DLPackLike(), r"it is a DLPack tensor: .*arrow_gpu\.from_dlpack\(obj\)"),
    ([1, 2], r"to_device\(pa\.array\(obj\)\)"),
])
def test_to_device_of_something_else_says_what_to_do(obj, hint):
    with pytest.raises(TypeError, match=f"cannot move a '{type(obj).__name__}'.*{hint}"):
        to_device(obj)


def test_a_progress_callback_error_is_the_cause_of_the_cancellation(ctx):
    def stop(nbytes):
        raise RuntimeError("stop")

    with pytest.raises(pa.ArrowCancelled) as raised:
        with transfer_options(staging_bytes=1 << 20, chunk_bytes=256 << 10):
            with transfer_progress(stop):
                ctx.buffer_from_data(b"x" * (4 << 20))
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert str(raised.value.__cause__) == "stop"


def test_transfer_progress_without_callback_or_tqdm_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ModuleNotFoundError, match=r"arrow_gpu\[progress\]' \(or tqdm\), or pass a callback"):
        with transfer_progress():
            pass


def test_transfer_progress_refuses_a_callback_that_is_not_callable():
    with pytest.raises(TypeError, match="callback must be callable.*got 'int'"):
        with transfer_progress(5):
            pass
