"""Round-trip laws: moving or exchanging Arrow data never changes a bit, nor leaks."""

import nanoarrow.device as nd
import pyarrow as pa
from hypothesis import given, strategies as st

from arrow_gpu import _cuda
from arrow_gpu.c_device_interface import DeviceData, import_array, import_record_batch, import_stream
from arrow_gpu.testing import strategies as ags
from arrow_gpu.transfer import to_device, to_host
from arrow_gpu.transfer_options import release_staging, staging_bytes_held, transfer_options
from _arrow_samples import assert_identical
from _leaks import released

ags.register_extension_types()
VIEWS = {"string_view", "binary_view"}
# Our exporter walks arrays from Python, where pyarrow cannot reach these children.
EXPORTABLE = ags.data_types(exclude=ags.OPAQUE_FAMILIES)
EXPORTABLE_SCHEMAS = ags.schemas(EXPORTABLE)


def _released_everything():
    assert released(_cuda._live_exports)


@given(ags.arrays())
def test_host_device_host_is_identity(array):
    device = to_device(array)
    assert_identical(to_host(device), array)


@given(ags.arrays())
def test_device_to_device_is_identity(array):
    assert_identical(to_device(to_device(array)), array)


@given(ags.chunked_arrays())
def test_chunked_arrays_round_trip(chunked):
    back = to_host(to_device(chunked))
    assert back.type == chunked.type and back.num_chunks == chunked.num_chunks
    for got, expected in zip(back.chunks, chunked.chunks):
        assert_identical(got, expected)


@given(ags.record_batches())
def test_record_batches_round_trip(batch):
    assert_identical(to_host(to_device(batch)), batch)


# Tiny rings and chunks put the boundaries of the engine's plan (chunks growing and shrinking,
# units shared by threads, DMAs spanning alignment gaps) inside batches of a few hundred bytes.
# A ring is 2 to 64 slots of chunk_bytes.
ENGINE_OPTIONS = st.builds(
    lambda chunk, slots, threads, small: {"staging_bytes": chunk * slots, "chunk_bytes": chunk,
                                          "threads": threads, "small_copy_bytes": small},
    st.sampled_from([64, 192, 512, 4096]),
    st.sampled_from([2, 3, 16, 64]),
    st.sampled_from([1, 2, 3, 5]),
    st.sampled_from([0, 256, 1 << 20]),
)


@given(ags.record_batches(), ENGINE_OPTIONS)
def test_any_engine_options_keep_batches_identical(batch, options):
    release_staging()  # a ring left by earlier tests is kept until a transfer needs one
    with transfer_options(**options):
        device = to_device(batch)
        assert_identical(to_host(device), batch)
        assert staging_bytes_held() <= options["staging_bytes"]


@given(ags.tables(EXPORTABLE_SCHEMAS))
def test_tables_round_trip_and_stream(table):
    device = to_device(table)
    assert to_host(device).equals(table) or to_host(device).schema == table.schema
    pair = None
    streamed = import_stream(DeviceData(device))
    assert streamed.num_rows == table.num_rows and streamed.schema == table.schema
    for pair in zip(streamed.to_batches(), device.to_batches()):
        assert_identical(pair[0], to_host(pair[1]))
    del streamed, pair
    _released_everything()


@given(ags.arrays(EXPORTABLE))
def test_our_export_then_import(array):
    device = to_device(array)
    assert_identical(import_array(DeviceData(device)), array)
    _released_everything()


@given(ags.arrays(EXPORTABLE))
def test_pyarrow_consumes_our_export(array):
    device = to_device(array)
    imported = pa.Array._import_from_c_device_capsule(*DeviceData(device).__arrow_c_device_array__())
    assert_identical(imported, array)
    del imported
    _released_everything()


@given(ags.arrays(ags.data_types(exclude=VIEWS | ags.OPAQUE_FAMILIES)))
def test_nanoarrow_consumes_and_reexports(array):
    device = to_device(array)
    wrapped = nd.c_device_array(DeviceData(device))
    assert wrapped.array.length == len(array)
    assert_identical(import_array(wrapped), array)
    del wrapped
    _released_everything()


@given(ags.record_batches(EXPORTABLE_SCHEMAS))
def test_record_batch_export_import(batch):
    assert_identical(import_record_batch(DeviceData(to_device(batch))), batch)
    _released_everything()
