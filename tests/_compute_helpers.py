"""Helpers of the compute tests: kernels made otherwise, null counts known, rows without
columns, pyarrow's results where pyarrow errs."""

import contextlib
import functools
from unittest import mock

import pyarrow as pa
import pyarrow.compute as pc

from arrow_gpu._compute import kernels as _kernels


@contextlib.contextmanager
def kernels_of(make):
    """compute's kernels made by ``make(context)``, launching on the stream a call gives."""
    with mock.patch.object(_kernels, "runs_kernels", lambda context: True), \
            mock.patch.object(_kernels, "kernels_for", make):
        yield


def assert_known_null_counts(result):
    """pyarrow's ChunkedArray constructor counts the nulls of a chunk whose count is unknown,
    on the host (which crashes on device memory): building one proves they are known."""
    if isinstance(result, pa.Array):
        pa.chunked_array([result], type=result.type)
    elif isinstance(result, pa.RecordBatch):
        pa.Table.from_batches([result])
    # ChunkedArrays and Tables were built by such constructors already.


def with_a_chunk(data):
    """``data``, a ChunkedArray without chunks as one of an empty chunk, for pyarrow's host
    functions: pyarrow 25's filter of one whose type holds a map aborts the process (its
    MapArray check of the entries' nulls fails on the empty result it builds)."""
    if isinstance(data, pa.ChunkedArray) and data.num_chunks == 0:
        return pa.chunked_array([pa.nulls(0, data.type)], data.type)
    return data


def filter_on_host(data, mask, null_selection_behavior="drop"):
    """``pc.filter(data, mask, ...)`` of ``with_a_chunk(data)``."""
    return pc.filter(with_a_chunk(data), mask, null_selection_behavior=null_selection_behavior)


def drop_null_on_host(data):
    """``pc.drop_null(data)`` as pyarrow documents it: pyarrow 25 gives an all-null
    dictionary array of unsigned indices the signed index type; keeping the valid rows by a
    filter keeps the type."""
    expected = pc.drop_null(data)
    if isinstance(data, (pa.RecordBatch, pa.Table)):
        if expected.schema == data.schema or not data.num_columns:
            return expected
        return data.filter(functools.reduce(pc.and_, [pc.is_valid(c) for c in data.columns]))
    return expected if expected.type == data.type else data.filter(pc.is_valid(data))


def rows_only(rows, schema=pa.schema([])):
    """A host RecordBatch of ``schema`` (without fields) and ``rows`` rows: pyarrow's
    constructors count rows from the columns (0 without any)."""
    struct = pa.Array.from_buffers(pa.struct([]), rows, [None], null_count=0, children=[])
    return pa.RecordBatch.from_struct_array(struct).replace_schema_metadata(schema.metadata)
