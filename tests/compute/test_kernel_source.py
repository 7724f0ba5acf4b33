"""The device kernels' CUDA source compiles with NVRTC, which needs no GPU: checked in CI too."""

import importlib.util
import re

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
                             _kernel_source.HEADERS, arch, list(_kernels._OPTIONS))
    assert f".target sm_{arch}" in ptx.decode()
    for name in _kernels._kernel_names():
        assert f".entry {name}(" in ptx.decode(), name


def test_a_compile_error_names_the_line():
    broken = _kernel_source.SOURCE + '\nextern "C" __global__ void ag_broken() { undefined(); }\n'
    with pytest.raises(OSError, match=r"kernels\.cu.*undefined"):
        _cuda._compile_ptx(nvrtc_directories(), broken, _kernel_source.NAME,
                           _kernel_source.HEADERS, 90, list(_kernels._OPTIONS))


def test_a_compile_error_in_a_header_names_the_header():
    headers = dict(_kernel_source.HEADERS)
    headers["take.cuh"] += '\n__device__ void ag_broken_helper() { undefined(); }\n'
    with pytest.raises(OSError, match=r"take\.cuh.*undefined"):
        _cuda._compile_ptx(nvrtc_directories(), _kernel_source.SOURCE, _kernel_source.NAME,
                           headers, 90, list(_kernels._OPTIONS))


def test_the_source_ships_as_a_cuda_file():
    assert _kernel_source.SOURCE.lstrip().startswith("// The device kernels")
    assert 'extern "C" __global__ void ag_gather(' in _kernel_source.HEADERS["take.cuh"]


def quoted_includes(text):
    return re.findall(r'^#include "([^"]+)"', text, re.MULTILINE)


def test_every_include_of_the_source_is_a_shipped_header():
    """NVRTC is handed HEADERS, and reads no file: an include of anything else would fail the
    first compile on a GPU, after install."""
    included = {name for text in _kernel_source.FILES.values() for name in quoted_includes(text)}
    assert included == set(_kernel_source.HEADERS)
    assert set(quoted_includes(_kernel_source.SOURCE)) == set(_kernel_source.HEADERS)
    for name, text in _kernel_source.HEADERS.items():
        assert text.startswith("// ") and "#pragma once" in text, name


def test_a_header_the_source_does_not_include_is_no_part_of_it(tmp_path):
    # A stale header beside the source (a build folder keeps files removed from the tree)
    # once made every kernel load fail: its kernels were looked for in the compiled module.
    for name, text in _kernel_source.FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "stale.cuh").write_text('extern "C" __global__ void ag_stale() {}\n')
    assert _kernel_source.source_files(tmp_path) == _kernel_source.FILES
    assert "stale.cuh" not in _kernel_source.FILES


def test_every_kernel_is_found_once_across_the_files():
    names = _kernels._kernel_names()
    assert len(names) == len(set(names))
    for name, text in _kernel_source.FILES.items():
        for kernel in re.findall(r'^extern "C" __global__ void (\w+)\(', text, re.MULTILINE):
            assert kernel in names, (name, kernel)
    assert "ag_gather" in names and "ag_copy_ranges" in names and "ag_and_bits" in names


@pytest.mark.parametrize("change", ["a header's text", "a header's name", "a new header",
                                    "the source"])
def test_the_cache_key_changes_with_any_file_of_the_source(change):
    files = dict(_kernel_source.FILES)
    key = _kernels._cache_key(files, 12080, 90)
    assert _kernels._cache_key(dict(files), 12080, 90) == key
    if change == "a header's text":
        files["scan.cuh"] += "\n// one more line\n"
    elif change == "a header's name":
        files["scan2.cuh"] = files.pop("scan.cuh")
    elif change == "a new header":
        files["extra.cuh"] = "#pragma once\n"
    else:
        files[_kernel_source.NAME] += "\n"
    assert _kernels._cache_key(files, 12080, 90) != key


def test_the_cache_key_changes_with_the_nvrtc_version_and_the_architecture():
    files = _kernel_source.FILES
    keys = {_kernels._cache_key(files, version, arch)
            for version in (12080, 13000) for arch in (75, 90)}
    assert len(keys) == 4


def test_the_compile_is_handed_every_header(monkeypatch, tmp_path):
    handed = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_kernels, "_nvrtc_version", lambda directories: 12080)
    monkeypatch.setattr(_kernels, "_compile_ptx",
                        lambda directories, source, name, headers, arch, options:
                        handed.append((source, name, headers)) or b"// ptx")
    monkeypatch.setattr(_kernels, "_compiled", {})
    _kernels._ptx_for(90)
    assert handed == [(_kernel_source.SOURCE, _kernel_source.NAME, _kernel_source.HEADERS)]
    cached = [path.name for path in (tmp_path / "arrow_gpu").iterdir()]
    assert cached == [f"kernels-sm90-{_kernels._cache_key(_kernel_source.FILES, 12080, 90)}.ptx"]
