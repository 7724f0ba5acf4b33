"""Hostile and careless input: each case ends in a clear Python exception, never an abort,
a hang or a blow-up. Cases that crashed the interpreter before their fix run in a child
process, so that a regression is a failed test, not a dead test run."""

import ctypes
import gc
import os
import re
import subprocess
import sys
import textwrap
import time

import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu.c_device_interface import DeviceData, import_array, import_stream
from arrow_gpu.testing.c_structs import (SCHEMA_RELEASE, STREAM_GET_SCHEMA, ArrowDeviceArray,
                                         ArrowDeviceArrayStream, ArrowSchema, in_new_capsule,
                                         moved_from_capsule)
from arrow_gpu.transfer import to_device, to_host
import _campaign
import _interchange_fuzz

pytestmark = pytest.mark.usefixtures("nothing_left_exported")


def run_child(code):
    """Runs ``code`` in a fresh interpreter; returns its stdout, failing on any crash."""
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                            text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, f"rc {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


@pytest.mark.parametrize("pattern", [
    "list(produce())", "[a for a in produce()]", "tuple(produce())",
    "sorted(produce(), key=len)", "pa.chunked_array(produce())",
    "list(produce(lambda d: pa.array(d)))",
])
def test_release_while_an_exception_is_pending(pattern):
    # Issue 15, item 1: the exported struct's release ran with the generator's exception
    # pending, failed, and Arrow aborted the interpreter.
    out = run_child(f"""
        import pyarrow as pa
        import arrow_gpu

        def produce(importer=arrow_gpu.import_array):
            yield importer(arrow_gpu.DeviceData(arrow_gpu.to_device(pa.array([1, 2, 3]))))
            raise ValueError("the producer fails")

        try:
            {pattern}
        except ValueError as error:
            print("raised:", error)
        """)
    assert "raised: the producer fails" in out


def test_stream_whose_reader_fails_after_its_first_batch():
    out = run_child("""
        import pyarrow as pa
        import arrow_gpu

        schema = pa.schema({"x": pa.int64()})
        def batches():
            yield arrow_gpu.to_device(pa.record_batch({"x": [1, 2]}))
            raise ValueError("the reader fails")

        reader = pa.RecordBatchReader.from_batches(schema, batches())
        try:
            arrow_gpu.import_stream(arrow_gpu.DeviceData(reader))
        except Exception as error:
            print("raised:", type(error).__name__, error)
        """)
    assert "raised:" in out and "the reader fails" in out


@SCHEMA_RELEASE
def _mark_released(pointer):
    pointer.contents.release = SCHEMA_RELEASE()


def test_stream_schema_with_a_null_format(ctx):
    # Item 2: get_schema's result was not checked; a NULL format crashed the importer.
    capsule = DeviceData(to_device(pa.table({"x": [1, 2]}))).__arrow_c_device_stream__()
    stream = moved_from_capsule(capsule, ArrowDeviceArrayStream)
    # A copy of the pointer: the field itself is about to change.
    original_get_schema = STREAM_GET_SCHEMA(ctypes.cast(stream.get_schema, ctypes.c_void_p).value)

    @STREAM_GET_SCHEMA
    def null_format(pointer, out):
        rc = original_get_schema(pointer, out)
        if rc == 0:
            # The producer's schema is released; ours has no format.
            out.contents.release(out)
            out.contents.format = None
            out.contents.n_children = 0
            out.contents.release = _mark_released
        return rc

    stream.get_schema = null_format
    with pytest.raises(ValueError, match="format"):
        import_stream(in_new_capsule(stream))


def test_schema_with_a_huge_child_count_fails_fast(ctx):
    # Item 6: n_children = 2**40 took 22.8 s and 3.6 GB before a MemoryError.
    _, array_capsule = DeviceData(to_device(pa.array([1]))).__arrow_c_device_array__()
    children = (ctypes.POINTER(ArrowSchema) * 1)()
    schema = ArrowSchema(format=b"+s", n_children=2**40, children=children,
                         release=_mark_released)
    started = time.perf_counter()
    with pytest.raises(ValueError, match="children"):
        import_array((in_new_capsule(schema), array_capsule))
    assert time.perf_counter() - started < 1.0


def test_null_count_larger_than_length_is_refused(ctx):
    schema_capsule, array_capsule = DeviceData(to_device(pa.array([1, 2]))).__arrow_c_device_array__()
    device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    device_array.array.null_count = 3
    with pytest.raises(ValueError, match="null_count"):
        import_array((schema_capsule, in_new_capsule(device_array)))


@pytest.mark.parametrize("device_type,device_id", [(1, -1), (3, 0)], ids=["CPU", "CUDA_HOST"])
def test_device_memory_labelled_host_memory_is_refused(ctx, device_type, device_id):
    # libarrow reads the offsets of host-labelled arrays on the host: on a GPU, a fault.
    strings = to_device(pa.array(["a", None, "ccc"]))
    schema_capsule, array_capsule = DeviceData(strings).__arrow_c_device_array__()
    device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    device_array.device_type, device_array.device_id = device_type, device_id
    with pytest.raises(ValueError, match=r"array.buffers\[0\] is CUDA device memory"):
        import_array((schema_capsule, in_new_capsule(device_array)))


def test_garbage_device_pointer_is_a_fault_not_a_read(ctx):
    # A GPU refuses copies from addresses that are not device memory; the simulator does too.
    schema_capsule, array_capsule = DeviceData(to_device(pa.array([1, 2]))).__arrow_c_device_array__()
    device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    keep = device_array.array.buffers[1]
    garbage = ctypes.create_string_buffer(64)  # host memory: no device memory lives there
    device_array.array.buffers[1] = ctypes.addressof(garbage)
    imported = import_array((schema_capsule, in_new_capsule(device_array)))
    with pytest.raises(OSError, match="CUDA_ERROR_INVALID_VALUE"):
        to_host(imported)
    del imported
    device_array.array.buffers[1] = keep  # the producer's own pointers, for its release


@pytest.mark.parametrize("address", [0x10, 0x8000], ids=hex)
@pytest.mark.parametrize("copy", ["copy_to_host", "to_pybytes", "copy_from_host",
                                  "copy_from_device", "copied_from"])
def test_a_view_of_a_garbage_address_fails_to_copy(address, copy):
    # Issue "Trustworthy at the edges", defect 10: the simulator took any view's address for
    # device memory, and copying through one at 0x10 crashed; a GPU refuses the copy.
    out = run_child(f"""
        import arrow_gpu

        ctx = arrow_gpu.Context(0)
        view = ctx.foreign_buffer({address}, 64)
        device = ctx.buffer_from_data(b"x" * 64)
        copies = {{
            "copy_to_host": view.copy_to_host,
            "to_pybytes": view.to_pybytes,
            "copy_from_host": lambda: view.copy_from_host(b"x" * 64),
            "copy_from_device": lambda: view.copy_from_device(device),
            "copied_from": lambda: device.copy_from_device(view),
        }}
        try:
            copies[{copy!r}]()
            print("copied")
        except OSError as error:
            print("OSError:", error)
        """)
    assert "OSError:" in out and "CUDA_ERROR_INVALID_VALUE" in out, out


_NEVER_MADE = 0x12345678  # no stream or event ever had this handle


@pytest.mark.skipif(not arrow_gpu.using_simulator(),
                    reason="a driver may fault on a handle it never made rather than refuse it")
def test_the_simulator_refuses_stream_and_event_handles_it_never_made(ctx):
    # Defect 10: the simulator accepted any handle, where a GPU's driver errs.
    with pytest.raises(OSError, match="CUDA_ERROR_INVALID_HANDLE"):
        arrow_gpu.Stream.wrap(_NEVER_MADE, ctx).synchronize()
    with pytest.raises(OSError, match="CUDA_ERROR_INVALID_HANDLE"):
        arrow_gpu.Stream.wrap(_NEVER_MADE, ctx).record()
    destroyed = arrow_gpu.Stream(ctx)
    handle = destroyed.handle
    del destroyed
    gc.collect()
    with pytest.raises(OSError, match="CUDA_ERROR_INVALID_HANDLE"):
        arrow_gpu.Stream.wrap(handle, ctx).synchronize()
    arrow_gpu.Stream.wrap(0, ctx).synchronize()  # the default streams are always there
    arrow_gpu.Stream.wrap(1, ctx).synchronize()


@pytest.mark.skipif(not arrow_gpu.using_simulator(),
                    reason="a driver may fault on a handle it never made rather than refuse it")
def test_an_imported_sync_event_that_is_no_event_is_refused(ctx):
    exported = DeviceData(to_device(pa.array([1, 2])))
    schema_capsule, array_capsule = exported.__arrow_c_device_array__()
    device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    garbage_event = ctypes.c_void_p(_NEVER_MADE)
    device_array.sync_event = ctypes.addressof(garbage_event)
    with pytest.raises(OSError, match="cuEventSynchronize.*CUDA_ERROR_INVALID_HANDLE"):
        import_array((schema_capsule, in_new_capsule(device_array)))


def test_views_of_pinned_host_memory_stay_usable(ctx):
    # Under unified addressing a page-locked host address is a device address too, so a view of
    # it copies like device memory. (Pageable host memory is refused by a GPU.)
    import numpy as np
    pinned = arrow_gpu.new_host_buffer(32)
    np.frombuffer(pinned, np.int64)[:] = np.arange(4)
    view = ctx.foreign_buffer(pinned.address, pinned.size, base=pinned)
    assert np.frombuffer(view.copy_to_host(), np.int64).tolist() == [0, 1, 2, 3]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_forked_child_gets_a_clear_error(ctx):
    # Item 10: CUDA does not survive fork(); the child must not use the parent's state.
    out = run_child("""
        import os
        import arrow_gpu

        ctx = arrow_gpu.Context(0)
        buf = ctx.buffer_from_data(b"parent")
        pid = os.fork()
        if pid == 0:
            outcomes = []
            for attempt in (lambda: ctx.new_buffer(8), buf.copy_to_host,
                            lambda: arrow_gpu.Context(0)):
                try:
                    attempt()
                    outcomes.append("worked")
                except OSError as error:
                    outcomes.append("forked" if "forked from process" in str(error) else str(error))
            print("child:", outcomes, arrow_gpu.is_available(), flush=True)
            os._exit(0)
        os.waitpid(pid, 0)
        print("parent:", buf.copy_to_host().to_pybytes())
        """)
    assert "child: ['forked', 'forked', 'forked'] False" in out
    assert "parent: b'parent'" in out


def test_interchange_fuzz_fast_subset():
    # Each entry point once, in child processes: a crash is a failed test, not a dead run.
    # (hypothesis may draw fewer distinct cases than asked)
    totals = _campaign.checked_run(_interchange_fuzz, cases=160, batch=40, at_least=80)
    assert totals["imported"] > 0 and any(o.startswith("clean error") for o in totals)


@pytest.mark.campaign
@pytest.mark.timeout(0)  # its child processes have their own limits
def test_interchange_fuzz_campaign():
    _campaign.checked_run(_interchange_fuzz, cases=10_000, batch=500, at_least=5_000)


def test_offset_plus_length_that_overflows_is_refused(ctx):
    schema_capsule, array_capsule = DeviceData(to_device(pa.array([1, 2]))).__arrow_c_device_array__()
    device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
    device_array.array.offset = device_array.array.length = 2**62
    device_array.array.null_count = 0
    with pytest.raises(ValueError, match="exceeds 2\\*\\*48 slots"):
        import_array((schema_capsule, in_new_capsule(device_array)))


def test_a_view_of_freed_pinned_memory_faults(ctx):
    # As on a GPU (and as Arrow's own pyarrow.cuda tests of pyarrow 23-25 expect): a view
    # does not keep memory alive that it was not given as its base.
    host = arrow_gpu.new_host_buffer(10)
    view = ctx.foreign_buffer(host.address, host.size)
    assert view.copy_to_host().size == 10
    del host
    gc.collect()
    with pytest.raises(OSError, match="Cuda error"):
        view.copy_to_host()


def _sharing_fuzz():
    pytest.importorskip("distributed")
    import _sharing_fuzz

    return _sharing_fuzz


def test_campaign_crash_output_names_the_dying_call(tmp_path):
    # A batch that aborts (as glibc does on a corrupt heap) reports the Python call it died
    # in, so that the case that corrupted the heap can be told from the one that found it.
    script = tmp_path / "aborting_batch.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        def import_the_case():
            print("the case", file=sys.stderr, flush=True)
            os.abort()
        import_the_case()
    """))
    totals = _campaign.run_batches([([str(script)], 3)], workers=1)
    assert totals[_campaign.CRASH] == 3
    (output,) = [outcome for outcome in totals if outcome.startswith("crash output")]
    assert "rc -6" in output and "the case" in output
    assert "Fatal Python error: Aborted" in output and "import_the_case" in output


def test_sharing_fuzz_fast_subset(ctx):
    # Handles, payloads, Dask frames and forged dictionary batches, mutated, opened in child
    # processes: only clean errors or exactly the exported bytes.
    totals = _campaign.checked_run(_sharing_fuzz(), cases=400, batch=80)  # each target once
    assert any(outcome.startswith("clean error") for outcome in totals)


@pytest.mark.campaign
@pytest.mark.timeout(0)  # its child processes have their own limits
def test_sharing_fuzz_campaign(ctx):
    _campaign.checked_run(_sharing_fuzz(), cases=9_000, batch=250)


# Every field of an untrusted array is checked before anything walks it, whatever the array's
# label: CPU and CUDA_HOST arrays are read on the host, where walking a lie faults at once.
# Each case: the sample, the field changed ("child." for the batch's column), the value (an
# int, or "+1": one above the producer's, with a pointer array that long), the message.
_BAD_FIELDS = {
    "n_buffers one too many": ("int64", "n_buffers", "+1",
                               r"invalid n_buffers \(3\) for type int64: expected 2"),
    "n_buffers 2**31": ("int64", "n_buffers", 2**31, r"invalid n_buffers \(2147483648\)"),
    "n_buffers 2**62": ("int64", "n_buffers", 2**62, r"invalid n_buffers \(4611686018427387904\)"),
    "negative n_buffers": ("int64", "n_buffers", -1,
                           r"invalid n_buffers \(-1\) for type int64: expected 2"),
    "too few view buffers": ("string_view", "n_buffers", 2,
                             r"invalid n_buffers \(2\) for type string_view: expected 2 \+"),
    "view n_buffers 2**31": ("string_view", "n_buffers", 2**31,
                             r"invalid n_buffers \(2147483648\) for type string_view"),
    "view n_buffers 2**62": ("string_view", "n_buffers", 2**62,
                             r"invalid n_buffers \(4611686018427387904\) for type string_view"),
    "column n_buffers 2**31": ("int64", "child.n_buffers", 2**31,
                               r"array.children\[0\]: invalid n_buffers \(2147483648\)"),
    "n_children one too many": ("int64", "n_children", "+1",
                                "has 1 children, its type int64 needs 0"),
    "n_children 2**62": ("int64", "n_children", 2**62, "has 4611686018427387904 children"),
    "negative length": ("int64", "length", -1, r"negative length \(-1\)"),
    "huge offset": ("int64", "offset", 2**62, "exceeds 2\\*\\*48 slots"),
    "null_count above length": ("int64", "null_count", 5, "invalid null_count 5 for length 3"),
    "NULL buffers": ("int64", "buffers", None, "2 buffers but a NULL buffers pointer"),
    "dictionary of a plain array": ("int64", "dictionary", "dictionary",
                                    "a dictionary for a int64 array"),
    "dictionary missing": ("dictionary", "dictionary", None, "the dictionary is NULL"),
}

_LABELS = {"CPU": (1, -1), "CUDA": (2, 0), "CUDA_HOST": (3, 0), "unknown (99)": (99, 0)}


@pytest.mark.parametrize("label", list(_LABELS))
def test_each_bad_field_is_refused_before_it_is_walked(label):
    # Issue "Trustworthy at the edges", defect 3: n_buffers of a CPU or CUDA_HOST array was
    # walked before it was checked (2**31 crashed), a string_view's crashed or aborted.
    device_type, device_id = _LABELS[label]
    cases = {name: case[:3] for name, case in _BAD_FIELDS.items()}
    out = run_child(f"""
        import ctypes
        import pyarrow as pa
        import arrow_gpu
        from arrow_gpu.c_device_interface import DeviceData, import_array, import_record_batch
        from arrow_gpu.testing.c_structs import (ArrowArray, ArrowDeviceArray, in_new_capsule,
                                                 moved_from_capsule, release_as_produced)

        samples = {{"int64": pa.array([1, None, 3]),
                    "string_view": pa.array(["a" * 20, None, "c"], pa.string_view()),
                    "dictionary": pa.array(["x", None, "x"]).dictionary_encode()}}
        keep, released = [], []
        for name, (sample, field, value) in {cases!r}.items():
            data = samples[sample]
            if {device_type} == 2:
                data = arrow_gpu.to_device(data)
            if field.startswith("child."):
                data, field = pa.record_batch([data], names=["c"]), field[len("child."):]
            schema, capsule = DeviceData(data).__arrow_c_device_array__()
            device_array = moved_from_capsule(capsule, ArrowDeviceArray)
            keep.append(release_as_produced(device_array.array,
                                            lambda name=name: released.append(name)))
            device_array.device_type, device_array.device_id = {device_type}, {device_id}
            array = device_array.array
            if isinstance(data, pa.RecordBatch):
                array = array.children[0].contents
                keep.append(release_as_produced(array))
            if value == "+1":
                pointers = {{"n_buffers": "buffers", "n_children": "children"}}[field]
                entries = getattr(array, pointers)
                value = getattr(array, field) + 1
                padded = (entries._type_ * value)(*[entries[i] for i in range(value - 1)])
                keep.append(padded)
                setattr(array, pointers, ctypes.cast(padded, type(entries)))
            elif value == "dictionary":
                value = ArrowArray()
                keep.append(value)
                value = ctypes.pointer(value)
            setattr(array, field, value)
            importer = import_record_batch if isinstance(data, pa.RecordBatch) else import_array
            try:
                importer((schema, in_new_capsule(device_array)))
                print(name, "| imported")
            except Exception as error:
                print(name, "|", type(error).__name__, error)
        print("released once | ", sorted(released) == sorted({cases!r}))
        """)
    results = dict(line.split(" | ", 1) for line in out.splitlines())
    assert results.pop("released once").strip() == "True"
    for name, (_, _, _, message) in _BAD_FIELDS.items():
        if device_type == 99:
            message = "unsupported device_type 99"
        assert re.match(f"ArrowInvalid .*{message}", results[name]), (name, results[name])


def test_a_device_ipc_stream_of_delta_dictionaries_is_refused():
    # Issue 47: pyarrow concatenates a delta dictionary batch's values with the dictionary
    # before them on the host; read from device memory, that crashed.
    stream = _sharing_fuzz().dictionary_stream(deltas=True)
    out = run_child(f"""
        import pyarrow as pa
        import arrow_gpu
        from arrow_gpu.io import BufferReader

        buffer = arrow_gpu.Context(0).buffer_from_data(bytes.fromhex("{stream.hex()}"))
        try:
            pa.ipc.open_stream(BufferReader(buffer)).read_all()
        except NotImplementedError as error:
            print("refused:", error)
        """)
    assert "refused: this Arrow IPC stream has a delta dictionary batch" in out


def test_ipc_metadata_counting_more_nodes_than_it_holds_reads_as_empty():
    # Issue 47's campaign: the metadata reader that vets hand-offs and device IPC reads
    # reserved room for a forged count of nodes, and aborted (std::bad_alloc).
    import struct

    import _flatbuffers
    metadata = bytearray(pa.ipc.read_message(pa.record_batch({"x": [1, 2]}).serialize())
                         .metadata.to_pybytes())
    batch = _flatbuffers.record_batch(metadata)
    nodes = _flatbuffers.follow(metadata, _flatbuffers.field(metadata, batch, 1))
    struct.pack_into("<I", metadata, nodes, 0xFFFFFFF0)
    out = run_child(f"""
        from arrow_gpu._ipc.metadata import record_batch_layout
        print(record_batch_layout(bytes.fromhex("{metadata.hex()}")))
        """)
    assert "nodes=[], buffers=[]" in out
