"""The two ways arrow_gpu.compute runs on the simulator, for tests to run both.

``"default"`` is what users get: on the simulator, pyarrow's CPU kernels over host copies;
on a GPU, the CUDA kernels. ``"host_kernels"`` runs compute.py's kernel path with the
kernels done by NumPy on the host (tests/_host_kernels.py), so that the simulator checks the
buffers and children compute.py gathers for each type; on a GPU it is skipped, the default
path running the real kernels there.
"""

import contextlib
from unittest import mock

import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import compute
from _host_kernels import HostKernels

PATHS = ["default", "host_kernels"]


@contextlib.contextmanager
def compute_path(path):
    if path == "default":
        yield
        return
    if not arrow_gpu.using_simulator():
        pytest.skip("on a GPU the default path runs the CUDA kernels")
    with mock.patch.object(compute, "_kernels_of",
                           lambda context: None if context is None else HostKernels(context)):
        yield


def assert_known_null_counts(result):
    """pyarrow's ChunkedArray constructor counts the nulls of a chunk whose count is unknown,
    on the host (which crashes on device memory): building one proves they are known."""
    if isinstance(result, pa.Array):
        pa.chunked_array([result], type=result.type)
    elif isinstance(result, pa.RecordBatch):
        pa.Table.from_batches([result])
    # ChunkedArrays and Tables were built by such constructors already.


def rows_only(rows, schema=pa.schema([])):
    """A host RecordBatch of ``schema`` (without fields) and ``rows`` rows: pyarrow's
    constructors count rows from the columns (0 without any)."""
    struct = pa.Array.from_buffers(pa.struct([]), rows, [None], null_count=0, children=[])
    return pa.RecordBatch.from_struct_array(struct).replace_schema_metadata(schema.metadata)
