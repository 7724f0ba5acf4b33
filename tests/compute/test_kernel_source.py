"""The device kernels' CUDA source compiles with NVRTC, which needs no GPU: checked in CI too."""

import importlib.util

import pytest

from arrow_gpu import _cuda
from arrow_gpu._compute import kernel_source as _kernel_source, kernels as _kernels


def nvrtc_directories():
    if importlib.util.find_spec("nvidia") is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (arrow_gpu[compute])")
    return _kernels._wheel_directories()


@pytest.mark.parametrize("arch", [75, 90])
def test_the_kernels_compile_to_ptx_with_every_kernel(arch):
    ptx = _cuda._compile_ptx(nvrtc_directories(), _kernel_source.SOURCE, _kernel_source.NAME,
                             arch, list(_kernels._OPTIONS))
    assert f".target sm_{arch}" in ptx.decode()
    for name in _kernels._kernel_names():
        assert f".entry {name}(" in ptx.decode(), name


def test_a_compile_error_names_the_line():
    broken = _kernel_source.SOURCE + '\nextern "C" __global__ void ag_broken() { undefined(); }\n'
    with pytest.raises(OSError, match=r"kernels\.cu.*undefined"):
        _cuda._compile_ptx(nvrtc_directories(), broken, _kernel_source.NAME, 90,
                           list(_kernels._OPTIONS))


def test_the_source_ships_as_a_cuda_file():
    assert _kernel_source.SOURCE.lstrip().startswith("// The device kernels")
    assert 'extern "C" __global__ void ag_gather(' in _kernel_source.SOURCE
