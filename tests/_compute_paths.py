"""The two ways arrow_gpu.compute runs on the simulator, for tests to run both.

``"default"`` is what users get. ``"host_kernels"`` runs compute.py's kernel path, whatever
the default: on the simulator each kernel's host twin runs in its place, so that the
simulator checks the planning, the refusals and the results a GPU gives; on a GPU it is
skipped, the default path running the real kernels there.
"""

import contextlib
from unittest import mock

import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import compute
from arrow_gpu._compute import kernels as _kernels

PATHS = ["default", "host_kernels"]


@contextlib.contextmanager
def compute_path(path):
    if path == "default":
        yield
        return
    if not arrow_gpu.using_simulator():
        pytest.skip("on a GPU the default path runs the CUDA kernels")
    with kernels_of(lambda context: _kernels.kernels_for(context)):
        yield


def kernels_of(make):
    """compute's kernels made by ``make(context)``, launching on the stream a call gives."""
    return mock.patch.object(compute, "_kernels_of", lambda context, stream: (
        None if context is None else make(context).on_stream(stream)))


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
