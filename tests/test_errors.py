"""Environment errors: no driver, a pyarrow of another major, an unbuilt core."""

import os
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest

from arrow_gpu._util import build_info as _build_info, compat as _compat


def run_without_driver(code):
    env = dict(os.environ)
    env["ARROW_GPU_SIMULATOR"] = "0"
    env["ARROW_GPU_DRIVER_LIBRARY"] = "/nonexistent/libcuda.so.1"
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120, env=env)


def test_no_driver_is_a_clear_error():
    result = run_without_driver(
        """
        import arrow_gpu
        assert not arrow_gpu.using_simulator()
        try:
            arrow_gpu.Context(0)
        except OSError as error:
            print(error)
        else:
            raise SystemExit("Context(0) worked without a driver")
        """
    )
    assert result.returncode == 0, result.stderr + result.stdout
    message = result.stdout
    assert "NVIDIA driver" in message
    assert "ARROW_GPU_SIMULATOR=1" in message
    # It is read at the first use of a device, not when arrow_gpu is imported.
    assert "read once, at a process's first use of a device (not at import)" in message
    assert "before importing" not in message
    assert "/nonexistent/libcuda.so.1" in message


def test_no_driver_still_imports_and_serves_pyarrow_cuda():
    # Importing must not need a device: only using one does.
    result = run_without_driver(
        """
        import arrow_gpu
        from pyarrow import cuda
        import pyarrow as pa
        assert cuda.Context is arrow_gpu.Context
        print(pa.array([1, 2]).to_pylist())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1, 2]"


def test_no_driver_every_device_call_raises_os_error():
    result = run_without_driver(
        """
        import arrow_gpu
        calls = {
            "get_num_devices": lambda: arrow_gpu.Context.get_num_devices(),
            "new_host_buffer": lambda: arrow_gpu.new_host_buffer(8),
            "Context(1)": lambda: arrow_gpu.Context(1),
        }
        for name, call in calls.items():
            try:
                call()
            except OSError as error:
                assert "NVIDIA driver" in str(error), (name, str(error))
            else:
                raise SystemExit(name + " worked without a driver")
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert result.stdout.strip() == "ok"


def test_simulator_out_of_device_memory():
    env = dict(os.environ, ARROW_GPU_SIMULATOR="1", ARROW_GPU_SIMULATOR_MEMORY=str(1 << 20))
    code = textwrap.dedent(
        """
        import gc
        import arrow_gpu
        ctx = arrow_gpu.Context(0)
        kept = ctx.new_buffer(1 << 19)
        try:
            ctx.new_buffer(1 << 20)
        except MemoryError as error:
            print(error)
        del kept
        gc.collect()
        assert ctx.new_buffer(1 << 20).size == 1 << 20  # the memory came back
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "CUDA_ERROR_OUT_OF_MEMORY" in result.stdout


def test_pyarrow_major_mismatch(monkeypatch):
    monkeypatch.setattr(_build_info, "PYARROW_VERSION", "1.0.0")
    monkeypatch.setattr(_build_info, "PYARROW_MAJORS", (1,))
    with pytest.raises(ImportError) as excinfo:
        _compat.check_pyarrow_version()
    message = str(excinfo.value)
    assert "1.0.0" in message
    assert pa.__version__ in message
    assert "--no-build-isolation" in message


def test_a_wheel_of_several_majors_names_them_and_the_range_to_install(monkeypatch):
    monkeypatch.setattr(_build_info, "PYARROW_MAJORS", (1, 2, 3))
    with pytest.raises(ImportError) as excinfo:
        _compat.check_pyarrow_version()
    message = str(excinfo.value)
    assert f"carries native cores for pyarrow 1, 2 and 3 but pyarrow {pa.__version__}" in message
    assert "-m pip install 'pyarrow>=1,<4'" in message
    assert _compat.rebuild_command() in message


def test_pyarrow_minor_difference_is_accepted(monkeypatch):
    major = pa.__version__.split(".")[0]
    monkeypatch.setattr(_build_info, "PYARROW_VERSION", f"{major}.99.0")
    _compat.check_pyarrow_version()
    monkeypatch.setattr(_build_info, "PYARROW_MAJORS", (int(major) - 1, int(major)))
    _compat.check_pyarrow_version()


def test_unbuilt_core(monkeypatch):
    monkeypatch.setitem(sys.modules, "arrow_gpu._util.build_info", None)
    with pytest.raises(ImportError, match="not built"):
        _compat.check_pyarrow_version()


def test_driver_errors_name_the_function_and_the_error(ctx):
    with pytest.raises(MemoryError, match=r"Cuda error 2 in function 'cuMemAlloc\w*': \[CUDA_ERROR_OUT_OF_MEMORY\]"):
        ctx.new_buffer(1 << 56)


def test_a_driver_library_that_is_not_cuda_is_named_as_such():
    import ctypes.util

    library = ctypes.util.find_library("z") or ctypes.util.find_library("m")
    assert library, "no ordinary shared library found to stand in for the driver"
    env = {**os.environ, "ARROW_GPU_SIMULATOR": "0", "ARROW_GPU_DRIVER_LIBRARY": library}
    code = textwrap.dedent("""
        import arrow_gpu
        try:
            arrow_gpu.Context(0)
        except OSError as error:
            print(error)
        """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    message = result.stdout
    assert f"{library} (named by ARROW_GPU_DRIVER_LIBRARY) is not a CUDA driver library" \
        in message
    assert "has no cuInit" in message
    assert "too old" not in message
