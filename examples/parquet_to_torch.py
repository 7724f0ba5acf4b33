"""Feed the batches of a Parquet dataset to PyTorch (or CuPy) on the GPU, a batch at a time.

Nothing is trained: each batch's feature column is summed on the GPU, to show the loop a
training loop would have. A thread reads and decodes the next row groups and copies them to
the device while the consumer works on the current batch; host memory stays about one batch.

    python examples/parquet_to_torch.py
    # without a GPU, PyTorch or CuPy, it says so and exits
"""

import sys
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

import arrow_gpu
from arrow_gpu import as_cuda_array
from arrow_gpu.loading import read_parquet


def gpu_consumer():
    """A function taking a device column to a GPU tensor, with its library's name; None
    where neither PyTorch nor CuPy can use a GPU."""
    if arrow_gpu.using_simulator():
        return None  # the simulator's memory is host memory: no library can use it
    try:
        import torch
        if torch.cuda.is_available():
            return "PyTorch", lambda column: torch.as_tensor(as_cuda_array(column), device="cuda")
    except ImportError:
        pass
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return "CuPy", lambda column: cupy.asarray(as_cuda_array(column))
    except Exception:  # not installed, or no usable device
        return None


def write_dataset(folder: str, rows: int) -> None:
    rng = np.random.default_rng(0)
    table = pa.table({"feature": rng.random(rows), "label": rng.integers(0, 10, rows)})
    ds.write_dataset(table, folder, format="parquet", max_rows_per_group=50_000,
                     max_rows_per_file=200_000)


def main() -> int:
    consumer = gpu_consumer()
    if consumer is None:
        print("skipped: needs a GPU with PyTorch or CuPy")
        return 0
    name, as_tensor = consumer
    rows = 1_000_000
    with tempfile.TemporaryDirectory() as folder:
        write_dataset(folder, rows)
        total, seen = 0.0, 0
        with read_parquet(folder, columns=["feature", "label"], stream=True) as batches:
            for batch in batches:  # device RecordBatches; the next is copied meanwhile
                features = as_tensor(batch.column("feature"))
                total += float(features.sum())  # the GPU works on this batch
                seen += batch.num_rows
    print(f"{name}: {seen} rows in batches, feature sum {total:.1f}")
    assert seen == rows
    return 0


if __name__ == "__main__":
    sys.exit(main())
