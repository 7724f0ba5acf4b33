"""The mistakes a new user makes first each get an error that says what to do instead."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import arrow_gpu
from arrow_gpu import compute, to_device, to_host
from arrow_gpu.loading import read_parquet

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def parquet_file(tmp_path):
    path = tmp_path / "data.parquet"
    pq.write_table(pa.table({"x": [1, 2, 3], "y": ["a", "b", "c"]}), path)
    return path


def test_a_missing_column_lists_only_the_files_columns(parquet_file):
    with pytest.raises(pa.ArrowInvalid) as raised:
        read_parquet(parquet_file, columns=["x", "z"])
    message = str(raised.value)
    assert message == "no column named 'z' in the dataset; its columns are 'x', 'y'"


def test_a_misspelt_keyword_names_read_parquet_and_what_it_takes(parquet_file):
    with pytest.raises(TypeError) as raised:
        read_parquet(parquet_file, filtr=None)
    message = str(raised.value)
    assert message.startswith("read_parquet() got an unexpected keyword argument 'filtr'")
    assert "scanner()" not in message
    for keyword in ("columns", "stream", "decoders", "filter", "batch_size"):
        assert keyword in message


@pytest.mark.parametrize("path", ["data.parquet", Path("data.arrow")], ids=["str", "Path"])
def test_to_device_of_a_path_points_to_the_readers(path):
    with pytest.raises(TypeError) as raised:
        to_device(path)
    message = str(raised.value)
    assert "arrow_gpu.loading.read_parquet(path)" in message
    assert "arrow_gpu.loading.read_ipc(path)" in message
    assert "pa.array(obj)" not in message


def test_from_cuda_array_of_host_memory_says_so():
    with pytest.raises(TypeError) as raised:
        arrow_gpu.from_cuda_array(np.arange(3))
    assert "it is in host memory" in str(raised.value)
    assert "arrow_gpu.to_device(pa.array(obj))" in str(raised.value)


def test_take_out_of_range_says_the_length():
    data = to_device(pa.array([1, 2, 3]))
    with pytest.raises(IndexError) as raised:
        compute.take(data, to_device(pa.array([5])))
    assert "take indices must lie in [0, 3)" in str(raised.value)


@pytest.mark.parametrize("selection", ["filter=to_device(pa.array([True, False, True]))",
                                       "indices=to_device(pa.array([2, 0]))"])
def test_to_host_of_host_data_with_a_device_selection(selection):
    # pyarrow's kernels read the selection's device buffers on the host: the process died.
    code = f"""
        import pyarrow as pa
        from arrow_gpu import to_device, to_host
        print(to_host(pa.array([1, 2, 3]), {selection}).to_pylist())
        """
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, f"rc {result.returncode}\n{result.stderr}"
    expected = to_host(pa.array([1, 2, 3]), **(
        {"filter": pa.array([True, False, True])} if selection.startswith("filter")
        else {"indices": pa.array([2, 0])}))
    assert result.stdout.strip() == str(expected.to_pylist())


FAKE_PYTHON = """#!/bin/sh
echo "$@" >> "$CALLS"
case "$*" in *"import Cython"*) exit 1 ;; esac  # as in a venv without the build tools
"""


def test_gpu_test_installs_missing_build_tools_and_leaves_no_log_in_the_checkout(tmp_path):
    # A python3 that only records its calls: what gpu-test runs, not what it builds.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").write_text(FAKE_PYTHON)
    (bin_dir / "python3").chmod(0o755)
    calls = tmp_path / "calls"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "CALLS": str(calls)}
    env.pop("LOG_DIR", None)
    before = set(os.listdir(ROOT))
    result = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-test"), "tests/test_docs.py"],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    logs = [name for name in set(os.listdir(ROOT)) - before if name.endswith(".log")]
    assert not logs, f"gpu-test left {logs} in the checkout"
    log_dir = re.search(r"^gpu-test: logs in (.+)$", result.stdout, re.MULTILINE).group(1)
    assert (Path(log_dir) / "build.log").exists()
    shutil.rmtree(log_dir)
    lines = calls.read_text().splitlines()
    build = next(i for i, line in enumerate(lines) if "--no-build-isolation" in line)
    tools = next(i for i, line in enumerate(lines) if "cython" in line.lower())
    assert tools < build, lines
