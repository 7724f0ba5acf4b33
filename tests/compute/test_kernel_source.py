"""The device kernels' CUDA source compiles with NVRTC, which needs no GPU: checked in CI too."""

import importlib.util
import re
import threading

import pytest

from arrow_gpu import _cuda
from arrow_gpu._compute import kernel_source as _kernel_source, kernels as _kernels

UNITS = {unit.name: unit for unit in _kernel_source.UNITS}


def nvrtc_directories():
    if importlib.util.find_spec("nvidia") is None:
        pytest.skip("the nvidia-cuda-nvrtc wheel is not installed (arrow_gpu[compute])")
    return _kernels._wheel_directories()


def compile_unit(unit, arch, source=None, headers=None):
    return _cuda._compile_kernels(nvrtc_directories(), unit.source if source is None else source,
                                  unit.name, unit.headers if headers is None else headers, arch,
                                  list(_kernels._OPTIONS))


def elf_symbols(image):
    """The names in an ELF image's string tables: a CUBIN's kernels among them."""
    return set(re.findall(rb"[A-Za-z_]\w+", image))


@pytest.mark.parametrize("unit", _kernel_source.UNIT_NAMES)
def test_each_unit_compiles_to_a_cubin_with_its_kernels(unit):
    image = compile_unit(UNITS[unit], 90)
    assert image.startswith(b"\x7fELF")  # machine code the driver loads as it is
    for name in UNITS[unit].kernels:
        assert name.encode() in elf_symbols(image), name


def test_an_architecture_newer_than_nvrtc_gets_ptx_of_the_newest_it_knows():
    # A GPU that the installed NVRTC does not know yet: PTX, which its driver compiles.
    ptx = compile_unit(UNITS["scan.cu"], 990).decode()
    target = re.search(r"^\.target sm_(\d+)", ptx, re.MULTILINE)
    assert target is not None and 50 <= int(target.group(1)) < 990
    assert ".entry ag_scan(" in ptx


def test_units_compile_at_once_on_threads():
    # NVRTC releases the GIL: each unit's program on its own thread, none blocking another.
    images, errors = {}, []

    def run(unit):
        try:
            images[unit.name] = compile_unit(unit, 80)
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=run, args=(UNITS[name],))
               for name in ("scan.cu", "elementwise.cu", "copies.cu")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert all(images[name].startswith(b"\x7fELF") for name in images) and len(images) == 3


def test_a_compile_error_names_the_line():
    unit = UNITS["elementwise.cu"]
    broken = unit.source + '\nextern "C" __global__ void ag_broken() { undefined(); }\n'
    with pytest.raises(OSError, match=r"elementwise\.cu.*undefined"):
        compile_unit(unit, 90, source=broken)


def test_a_compile_error_in_a_header_names_the_header():
    unit = UNITS["take.cu"]
    headers = dict(unit.headers)
    headers["take.cuh"] += '\n__device__ void ag_broken_helper() { undefined(); }\n'
    with pytest.raises(OSError, match=r"take\.cuh.*undefined"):
        compile_unit(unit, 90, headers=headers)


def test_the_source_ships_as_cuda_files():
    assert _kernel_source.FILES["common.cuh"].lstrip().startswith("// The device kernels")
    assert 'extern "C" __global__ void ag_gather(' in UNITS["take.cu"].source


def quoted_includes(text):
    return re.findall(r'^#include "([^"]+)"', text, re.MULTILINE)


def test_every_include_of_a_unit_is_a_shipped_header():
    """NVRTC is handed a unit's headers, and reads no file: an include of anything else
    would fail the first compile on a GPU, after install."""
    for unit in _kernel_source.UNITS:
        included = {name for text in unit.files.values() for name in quoted_includes(text)}
        assert included == set(unit.headers), unit.name
        for name, text in unit.headers.items():
            assert name.endswith(".cuh") and text.startswith("// ") and "#pragma once" in text
    shipped = {path.name for path in _kernels_folder().iterdir()
               if path.name.endswith((".cu", ".cuh"))}
    assert shipped == set(_kernel_source.FILES)  # no unit left out of UNIT_NAMES


def _kernels_folder():
    from importlib import resources
    return resources.files("arrow_gpu") / "_compute"


def test_a_header_no_unit_includes_is_no_part_of_the_source(tmp_path):
    # A stale header beside the source (a build folder keeps files removed from the tree)
    # once made every kernel load fail: its kernels were looked for in the compiled module.
    for name, text in _kernel_source.FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "stale.cuh").write_text('extern "C" __global__ void ag_stale() {}\n')
    (tmp_path / "stale.cu").write_text('extern "C" __global__ void ag_stale() {}\n')
    assert _kernel_source.load_units(tmp_path) == _kernel_source.UNITS
    assert "stale.cuh" not in _kernel_source.FILES


def test_every_kernel_is_defined_once_in_a_unit_and_never_in_a_header():
    # A kernel in a header would be compiled by every unit that includes it.
    names = _kernels._kernel_names()
    assert len(names) == len(set(names))
    kernel = re.compile(r'^extern "C" __global__ void (\w+)\(', re.MULTILINE)
    for name, text in _kernel_source.FILES.items():
        if name.endswith(".cuh"):
            assert not kernel.findall(text), name
        else:
            assert kernel.findall(text) == UNITS[name].kernels
    assert "ag_gather" in names and "ag_copy_ranges" in names and "ag_and_bits" in names


@pytest.mark.parametrize("change", ["a header's text", "a header's name", "a new header",
                                    "the unit"])
def test_the_cache_key_changes_with_any_file_of_the_unit(change):
    files = dict(UNITS["mask.cu"].files)
    key = _kernels._cache_key(files, 12080, 90)
    assert _kernels._cache_key(dict(files), 12080, 90) == key
    if change == "a header's text":
        files["scan.cuh"] += "\n// one more line\n"
    elif change == "a header's name":
        files["scan2.cuh"] = files.pop("scan.cuh")
    elif change == "a new header":
        files["extra.cuh"] = "#pragma once\n"
    else:
        files["mask.cu"] += "\n"
    assert _kernels._cache_key(files, 12080, 90) != key


def test_the_cache_key_changes_with_the_nvrtc_version_and_the_architecture():
    files = UNITS["take.cu"].files
    keys = {_kernels._cache_key(files, version, arch)
            for version in (12080, 13000) for arch in (75, 90)}
    assert len(keys) == 4


def test_each_unit_is_compiled_with_its_headers_and_cached_apart(monkeypatch, tmp_path):
    handed = []
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(_kernels, "_nvrtc_version", lambda directories: 12080)
    monkeypatch.setattr(_kernels, "_compile_kernels",
                        lambda directories, source, name, headers, arch, options:
                        handed.append((source, name, headers)) or b"\x7fELF " + name.encode())
    monkeypatch.setattr(_kernels, "_compiled", {})
    images, report = _kernels._images_for(90)
    assert sorted(handed, key=lambda args: args[1]) == sorted(
        ((unit.source, unit.name, unit.headers) for unit in _kernel_source.UNITS),
        key=lambda args: args[1])
    assert images == [b"\x7fELF " + name.encode() for name in _kernel_source.UNIT_NAMES]
    assert (report.from_cache, report.image) == (False, "cubin")
    cached = sorted(path.name for path in (tmp_path / "arrow_gpu").iterdir())
    assert cached == sorted(
        f"kernels-{unit.name[:-3]}-sm90-{_kernels._cache_key(unit.files, 12080, 90)}.bin"
        for unit in _kernel_source.UNITS)
