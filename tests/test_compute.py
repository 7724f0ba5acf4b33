"""arrow_gpu.compute: its errors, the kernels' compile cache, and to_host's selections.

The results themselves are property-tested against pyarrow.compute in
tests/property/test_compute_laws.py.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import _cuda, _kernels, compute
from arrow_gpu.transfer import to_device, to_host
from _compute_paths import PATHS, compute_path


@pytest.fixture
def table():
    return to_device(pa.table({"x": [1, None, 3], "s": ["a", None, "ccc"]}))


@pytest.mark.parametrize("path", PATHS)
def test_host_data_is_refused_with_the_way_out(path, table):
    with compute_path(path), pytest.raises(TypeError, match="to_device"):
        compute.take(pa.table({"x": [1]}), to_device(pa.array([0])))
    with compute_path(path), pytest.raises(TypeError, match="host memory"):
        compute.take(table, pa.array([0]))


@pytest.mark.parametrize("path", PATHS)
def test_bad_indices_raise_before_anything_is_gathered(path, table):
    with compute_path(path):
        for bad in ([3], [-1], [0, 7]):
            with pytest.raises(IndexError):
                compute.take(table, to_device(pa.array(bad)))
        with pytest.raises(TypeError, match="integers"):
            compute.take(table, to_device(pa.array([0.5])))


@pytest.mark.parametrize("path", PATHS)
def test_bad_masks_raise(path, table):
    with compute_path(path):
        with pytest.raises(ValueError, match="3"):
            compute.filter(table, to_device(pa.array([True])))
        with pytest.raises(TypeError, match="boolean"):
            compute.filter(table, to_device(pa.array([1, 0, 1])))
        with pytest.raises(ValueError, match="null_selection_behavior"):
            compute.filter(table, to_device(pa.array([True] * 3)),
                           null_selection_behavior="keep")


@pytest.mark.parametrize("path", PATHS)
def test_functions_of_one_column_name_the_way_to_one(path, table):
    with compute_path(path), pytest.raises(TypeError, match="one column"):
        compute.null_count(table)


@pytest.mark.parametrize("path", PATHS)
def test_results_are_plain_device_objects_with_known_null_counts(path, table, ctx):
    with compute_path(path):
        picked = compute.take(table, to_device(pa.array([1, 2, None])))
        assert picked["x"].chunk(0).device_type == pa.DeviceAllocationType.CUDA
        assert compute.null_count(picked["x"]) == 2
        # pyarrow's own constructors count nulls on the host where they are unknown (and
        # crash on device memory): these know them.
        sliced = compute.slice(picked, 1)
        assert to_host(sliced).to_pydict() == {"x": [3, None], "s": ["ccc", None]}


@pytest.mark.parametrize("path", PATHS)
def test_to_host_copies_only_the_selected_rows(path, table):
    with compute_path(path):
        mask = to_device(pa.array([True, False, True]))
        assert to_host(table, filter=mask).to_pydict() == {"x": [1, 3], "s": ["a", "ccc"]}
        rows = to_device(pa.array([2, 0]))
        assert to_host(table["s"], indices=rows).to_pylist() == ["ccc", "a"]
        with pytest.raises(ValueError, match="not both"):
            to_host(table, filter=mask, indices=rows)
    host = pa.array([1, 2, 3])
    assert to_host(host, indices=pa.array([1])).to_pylist() == [2]


@pytest.mark.parametrize("path", PATHS)
def test_run_end_encoded_data_names_the_workaround(path):
    data = to_device(pa.RunEndEncodedArray.from_arrays([2, 3], [1, None]))
    with compute_path(path), pytest.raises(NotImplementedError, match="run_end_decode|run_end"):
        compute.take(data, to_device(pa.array([0])))


@pytest.mark.multi_gpu
def test_data_on_two_devices_is_refused(table):
    other = to_device(pa.array([0]), device=1)
    with pytest.raises(ValueError, match="devices 0 and 1"):
        compute.take(table, other)


def test_without_nvrtc_the_error_names_the_wheel():
    # NVRTC is loaded once per process: a fresh one, where an earlier test cannot have.
    code = ("import pytest\nfrom arrow_gpu import _cuda\n"
            "with pytest.raises(OSError, match='nvidia-cuda-nvrtc'):\n"
            "    _cuda._nvrtc_version([])\n")
    env = dict(os.environ, ARROW_GPU_NVRTC_LIBRARY="/nonexistent/libnvrtc.so")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("path", PATHS)
def test_chunks_with_other_dictionaries_are_refused_not_unified_differently(path):
    # pyarrow unifies the dictionaries of every chunk, empty ones included; the device
    # cannot, and must not keep one chunk's dictionary instead.
    chunks = [pa.DictionaryArray.from_arrays(pa.array([], pa.int8()), pa.array([0.5])),
              pa.DictionaryArray.from_arrays(pa.array([0], pa.int8()), pa.array([1.5]))]
    data = to_device(pa.chunked_array(chunks))
    expected = pa.chunked_array(chunks).combine_chunks()
    with compute_path(path):
        try:
            combined = compute.combine_chunks(data)
        except NotImplementedError as error:
            assert "share one dictionary" in str(error)
        else:
            assert to_host(combined).equals(expected)


def test_compiled_kernels_are_cached_on_disk(monkeypatch, tmp_path):
    compiles = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_kernels, "_nvrtc_version", lambda directories: 12080)
    monkeypatch.setattr(_kernels, "_compile_ptx",
                        lambda *args: compiles.append(args) or b"// ptx")
    monkeypatch.setattr(_kernels, "_compiled", {})
    ptx, report = _kernels._ptx_for(75)
    assert (ptx, report.from_cache, len(compiles)) == (b"// ptx", False, 1)
    monkeypatch.setattr(_kernels, "_compiled", {})  # a new process
    ptx, report = _kernels._ptx_for(75)
    assert (ptx, report.from_cache, len(compiles)) == (b"// ptx", True, 1)
    assert [p.name for p in (tmp_path / "arrow_gpu").iterdir()][0].startswith("kernels-sm75-")


def test_an_unwritable_cache_is_not_an_error(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file: no directory under it
    monkeypatch.setattr(_kernels, "_nvrtc_version", lambda directories: 12080)
    monkeypatch.setattr(_kernels, "_compile_ptx", lambda *args: b"// ptx")
    monkeypatch.setattr(_kernels, "_compiled", {})
    assert _kernels._ptx_for(80)[0] == b"// ptx"


def test_the_simulator_runs_no_kernels(ctx):
    assert _kernels.runs_kernels(ctx) == (not arrow_gpu.using_simulator())


@pytest.mark.gpu
def test_on_a_gpu_compute_runs_the_compiled_kernels(table, ctx):
    picked = compute.filter(table, to_device(pa.array([True, None, True])))
    assert to_host(picked).num_rows == 2
    report = _kernels.last_compile()
    assert report is not None and report.arch >= 50
    assert os.path.isdir(_kernels._cache_directory()) or not report.from_cache


def test_every_kernel_launched_is_in_the_source():
    # The host stand-ins cannot catch a misspelt kernel name; the GPU would, late.
    launched = set(re.findall(r'"(ag_\w+)"', Path(_kernels.__file__).read_text()))
    assert launched == set(_kernels._kernel_names())


@pytest.mark.parametrize("path", PATHS)
def test_chunks_that_shared_a_dictionary_on_the_host_concatenate(path):
    # Moving a table copies each chunk's dictionary: equal values, other memory.
    values = pa.array(["a", "b", "c"])
    host = pa.chunked_array([pa.DictionaryArray.from_arrays(pa.array(i, pa.int8()), values)
                             for i in ([0, 1], [2, None], [1])])
    with compute_path(path):
        combined = compute.combine_chunks(to_device(host))
    assert to_host(combined).equals(host.combine_chunks())
