"""Hand-offs between processes of one host (export_batch / import_batch): one device copy
per hand-off, opened allocations cached, lifetimes, fallbacks and the zero-copy contract.

The simulator's CUDA IPC is real shared memory between processes, so these run anywhere;
on a GPU they run against the driver.
"""

import gc
import os
import signal
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pyarrow as pa
import pytest

import arrow_gpu
from arrow_gpu import CudaBuffer, _cuda, to_device, to_host
from arrow_gpu._ipc.handoff import parse
from arrow_gpu._ipc.sealed import seal
from arrow_gpu.io import export_batch, import_batch

# A receiver that imports every payload it reads (one hex line each) and answers with the
# data (as a dict), whether it equals nothing in particular, and its open count so far.
RECEIVER = textwrap.dedent(
    """
    import gc, json, sys
    import pyarrow as pa
    import arrow_gpu
    from arrow_gpu._ipc.handoff import OPENED
    from arrow_gpu.io import import_batch
    ctx = arrow_gpu.Context(0)
    copy = sys.argv[1] == "copy"
    for line in sys.stdin:
        try:
            before = ctx.memory_stats()["live_allocations"]
            data = import_batch(bytes.fromhex(line.strip()), copy=copy)
            allocations = ctx.memory_stats()["live_allocations"] - before
            answer = {"data": arrow_gpu.to_host(data).to_pydict(), "allocations": allocations}
            del data
            gc.collect()
        except (ValueError, OSError) as error:
            answer = {"error": str(error)}
        answer.update(OPENED.stats())
        print(json.dumps(answer), flush=True)
    """
)


class Receiver:
    """A receiving process, kept running across hand-offs."""

    def __init__(self, copy=True):
        self.process = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, "copy" if copy else "view"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def receive(self, payload):
        import json
        self.process.stdin.write(payload.hex() + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, self.process.stderr.read()
        return json.loads(line)

    def close(self):
        self.process.stdin.close()
        assert self.process.wait(timeout=60) == 0, self.process.stderr.read()


@pytest.fixture
def receiver():
    opened = []

    def make(copy=True):
        opened.append(Receiver(copy))
        return opened[-1]

    yield make
    for process in opened:
        process.close()


def table(start, rows=100):
    return pa.table({"i": pa.array(range(start, start + rows), pa.int64()),
                     "s": [f"v{start + n}" for n in range(rows)]})


def test_device_data_is_exported_where_it_lives(ctx):
    data = to_device(table(0), ctx)
    before = ctx.bytes_allocated
    with export_batch(data) as shared:
        assert ctx.bytes_allocated == before  # no staging copy
        mine = import_batch(shared.payload)  # this process reads the sources themselves
        assert [CudaBuffer.from_buffer(b).address for b in mine.column(0).chunk(0).buffers()[1:]] \
            == [CudaBuffer.from_buffer(b).address for b in data.column(0).chunk(0).buffers()[1:]]
        del mine


@pytest.mark.skipif(not arrow_gpu.using_simulator(), reason="counts the simulator's calls")
def test_a_copying_import_waits_for_its_copies_not_the_whole_context(ctx):
    data = to_device(table(0), ctx)
    with export_batch(data) as shared:
        before = _cuda._simulated_context_synchronizations()
        copied = import_batch(shared.payload, copy=True)
        assert _cuda._simulated_context_synchronizations() == before
        assert to_host(copied).to_pydict() == table(0).to_pydict()
        del copied


def test_the_receiver_copies_once_into_one_allocation(ctx, receiver):
    data = to_device(table(0), ctx)
    with export_batch(data) as shared:
        answer = receiver().receive(shared.payload)
    assert answer["data"] == table(0).to_pydict()
    assert answer["allocations"] == 1


def test_repeated_hand_offs_open_each_allocation_once(ctx, receiver):
    data = to_device(table(0), ctx)
    process = receiver()
    first = export_batch(data)
    answers = [process.receive(first.payload)]
    allocations = len(parse(first.payload).allocations)
    assert answers[0]["opens"] == allocations
    for _ in range(4):  # new exports of the same memory: new tokens, the same allocations
        with export_batch(data) as shared:
            answers.append(process.receive(shared.payload))
    first.close()
    assert all(answer["data"] == table(0).to_pydict() for answer in answers)
    assert answers[-1]["opens"] == allocations


def test_a_block_reused_for_new_data_shows_the_new_data(ctx, receiver):
    # The caching allocator hands a freed block out again: the same driver allocation (the
    # same handle), cached open in the receiver, now holding other data.
    process = receiver()
    old = to_device(table(0), ctx)
    with export_batch(old) as shared:
        old_allocations = parse(shared.payload).allocations
        assert process.receive(shared.payload)["data"] == table(0).to_pydict()
    del old, shared
    gc.collect()
    new = to_device(table(1000), ctx)
    with export_batch(new) as shared:
        assert set(parse(shared.payload).allocations) & set(old_allocations)  # reused
        answer = process.receive(shared.payload)
    assert answer["data"] == table(1000).to_pydict()
    assert answer["opens"] == len(set(old_allocations) | set(parse(shared.payload).allocations))
    del new


def test_a_freed_allocation_and_a_new_one_are_not_confused(ctx, receiver):
    # With nothing cached, a freed buffer's allocation goes back to the driver, and a new
    # one (maybe at the same address) has another handle: it is opened anew.
    process = receiver()
    arrow_gpu.set_allocator("device")
    try:
        old = to_device(table(0), ctx)
        with export_batch(old) as shared:
            old_allocations = set(parse(shared.payload).allocations)
            first = process.receive(shared.payload)
        del old, shared
        gc.collect()
        new = to_device(table(1000), ctx)
        with export_batch(new) as shared:
            new_allocations = set(parse(shared.payload).allocations)
            second = process.receive(shared.payload)
        del new, shared
    finally:
        arrow_gpu.set_allocator()
    assert first.get("data") == table(0).to_pydict(), first
    assert second.get("data") == table(1000).to_pydict(), second
    # Allocations the receiver has not seen have handles it has not seen: opened anew.
    assert second["opens"] == first["opens"] + len(new_allocations - old_allocations)


def test_many_receivers_of_one_export(ctx, receiver):
    data = to_device(table(0), ctx)
    processes = [receiver(copy=n % 2 == 0) for n in range(4)]
    with export_batch(data) as shared:
        answers = [process.receive(shared.payload) for process in processes]
    assert all(answer["data"] == table(0).to_pydict() for answer in answers)
    assert [answer["allocations"] for answer in answers] == [1, 0, 1, 0]  # copies, views


def test_the_zero_copy_receive_allocates_nothing_and_views_the_exporters_memory(ctx):
    data = to_device(pa.table({"i": pa.array([1, 2, 3], pa.int64())}), ctx)
    code = textwrap.dedent(
        """
        import sys
        import pyarrow as pa
        import arrow_gpu
        from arrow_gpu import CudaBuffer
        from arrow_gpu.io import import_batch
        ctx = arrow_gpu.Context(0)
        before = ctx.memory_stats()["live_allocations"]
        table = import_batch(bytes.fromhex(sys.stdin.read().strip()))
        print(ctx.memory_stats()["live_allocations"] - before)
        values = CudaBuffer.from_buffer(table.column(0).chunk(0).buffers()[1])
        values.copy_from_host(pa.array([-7], pa.int64()).buffers()[1])
        ctx.synchronize()
        """
    )
    with export_batch(data) as shared:
        result = subprocess.run([sys.executable, "-c", code], input=shared.payload.hex(),
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0"]
    assert to_host(data).column(0).to_pylist() == [-7, 2, 3]  # the receiver wrote ours


def test_the_sender_may_release_its_value_once_the_receiver_has_copied(ctx, receiver):
    process = receiver()
    data = to_device(table(0), ctx)
    shared = export_batch(data)
    first = process.receive(shared.payload)
    shared.close()
    del data
    gc.collect()
    assert first["data"] == table(0).to_pydict()
    # The receiver's copy is its own; this process's import of the closed export is refused.
    with pytest.raises(ValueError, match="closed by its exporter"):
        import_batch(shared.payload)


EXPORTER = textwrap.dedent(
    """
    import sys
    import pyarrow as pa
    import arrow_gpu
    from arrow_gpu.io import export_batch
    data = arrow_gpu.to_device(pa.table({"i": pa.array(range(100), pa.int64())}))
    shared = export_batch(data)
    print(shared.payload.hex(), flush=True)
    sys.stdin.read()  # until killed
    """
)


def test_a_sender_killed_mid_transfer_is_refused_never_read(ctx):
    from arrow_gpu._ipc.handoff import OPENED
    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        payload = bytes.fromhex(exporter.stdout.readline().strip())
        received = import_batch(payload, copy=True)  # opens and caches its allocation
        assert to_host(received).column(0).to_pylist() == list(range(100))
        assert OPENED.stats()["recent"] >= 1
    finally:
        exporter.send_signal(signal.SIGKILL)
        exporter.wait(timeout=60)
    # Its memory may still be mapped here; the hand-off is refused all the same.
    with pytest.raises(ValueError, match=f"exporting process {exporter.pid} has exited"):
        import_batch(payload, copy=True)
    with pytest.raises(ValueError, match="has exited"):
        import_batch(payload)
    assert to_host(received).column(0).to_pylist() == list(range(100))  # ours, still valid
    del received
    gc.collect()
    assert not any(key[0] == exporter.pid for key in OPENED._recent)


def test_the_cache_of_open_allocations_is_bounded(ctx, receiver):
    from arrow_gpu._ipc.handoff import OPENED
    process = receiver()
    exports = [export_batch(table(n, rows=4), ctx, isolated=True) for n in range(OPENED.limit + 4)]
    answers = [process.receive(shared.payload) for shared in exports]
    for shared in exports:
        shared.close()
    assert [answer["data"] for answer in answers] == [table(n, rows=4).to_pydict()
                                                      for n in range(len(exports))]
    assert answers[-1]["opens"] == len(exports)  # one allocation each
    assert answers[-1]["recent"] == OPENED.limit
    assert answers[-1]["open"] == OPENED.limit  # the others were closed once unused


# ---------------------------------------------------------------------------------------
# What is staged: memory the driver cannot export where it lives

def test_host_data_is_staged_into_one_device_buffer(ctx, receiver):
    before = ctx.memory_stats()["live_allocations"]
    with export_batch(table(0), ctx) as shared:
        assert ctx.memory_stats()["live_allocations"] == before + 1
        assert len(parse(shared.payload).allocations) == 1
        assert receiver().receive(shared.payload)["data"] == table(0).to_pydict()


def test_pool_memory_is_staged(ctx, receiver):
    arrow_gpu.set_allocator("pool")
    try:
        data = to_device(table(0), ctx)
    finally:
        arrow_gpu.set_allocator()
    before = ctx.bytes_allocated
    with export_batch(data) as shared:
        assert ctx.bytes_allocated > before  # the staging copy, in exportable memory
        assert receiver().receive(shared.payload)["data"] == table(0).to_pydict()
    del data


def test_pool_memory_is_staged_even_when_the_pool_is_current(ctx, receiver):
    arrow_gpu.set_allocator("pool")
    try:
        data = to_device(table(0), ctx)
        with export_batch(data) as shared:  # staged into a driver allocation of its own
            answer = receiver().receive(shared.payload)
        del data, shared
    finally:
        arrow_gpu.set_allocator()
    assert answer["data"] == table(0).to_pydict()


def test_pinned_host_memory_viewed_as_device_memory_is_staged(ctx, receiver):
    # A foreign view of memory the driver did not allocate as device memory: it cannot be
    # exported where it lives.
    host = arrow_gpu.new_host_buffer(50 * 8)
    np.frombuffer(host, dtype=np.int64)[:] = np.arange(50)
    foreign = ctx.foreign_buffer(host.address, host.size, base=host)
    data = pa.record_batch([pa.Array.from_buffers(pa.int64(), 50, [None, foreign])], ["i"])
    with export_batch(data) as shared:
        answer = receiver().receive(shared.payload)
    assert answer["data"] == {"i": list(range(50))}
    del data, foreign


# ---------------------------------------------------------------------------------------
# Payloads

def test_a_payload_of_the_previous_format_is_refused_clearly():
    old = seal(b"AGPU-BAT", 2, bytes(200))
    with pytest.raises(ValueError, match="format version 2, but this arrow_gpu reads "
                                         "version 3"):
        import_batch(old)


def test_a_forged_payload_naming_bytes_outside_its_allocations_is_refused(ctx):
    from arrow_gpu._ipc import handoff as _handoff
    from arrow_gpu._ipc.sealed import seal_sized, unseal_sized
    with export_batch(to_device(table(0), ctx)) as shared:
        body = bytearray(unseal_sized(shared.payload, b"AGPU-BAT", 3, "", ""))
        parsed = parse(shared.payload)
        # The first allocation's size, shrunk below what its segments name.
        position = _handoff._HEADER.size + 64
        body[position:position + 8] = (1).to_bytes(8, "little")
        with pytest.raises(ValueError, match="outside its allocations"):
            import_batch(seal_sized(b"AGPU-BAT", 3, bytes(body)))
        assert parsed.allocations


def test_a_payload_forged_without_the_key_never_reaches_the_driver(ctx, monkeypatch):
    # Its driver handle changed and the record sealed again, as someone who knows the format
    # but not the key would: refused before cuIpcOpenMemHandle, which does not check handles.
    from arrow_gpu._ipc import handoff as _handoff
    from arrow_gpu._ipc.sealed import seal_sized, unseal_sized
    opened = []
    monkeypatch.setattr(_handoff.OPENED, "_open_allocation",
                        lambda *args: opened.append(args))
    with export_batch(to_device(table(0), ctx)) as shared:
        body = bytearray(unseal_sized(shared.payload, b"AGPU-BAT", 3, "", ""))
        handle = _handoff._HEADER.size
        body[handle:handle + 64] = bytes(range(64))
        for key in (bytes(32), b"guessed"):
            with pytest.raises(ValueError, match="sealed with another hand-off key"):
                import_batch(seal_sized(b"AGPU-BAT", 3, bytes(body), key))
    assert opened == []


def test_a_handle_serialized_under_another_key_is_refused(ctx):
    from arrow_gpu._ipc import wire
    serialized = ctx.new_buffer(64).export_for_ipc().serialize()
    handle, offset, size = wire.parse(serialized)
    forged = seal(wire.MAGIC, 2, struct.pack("<qq64s", offset, size, handle), key=b"k")
    with pytest.raises(ValueError, match="another hand-off key"):
        arrow_gpu.IpcMemHandle.from_buffer(forged)


KEYED_CHILD = textwrap.dedent("""
    import sys
    from arrow_gpu._ipc.keys import handoff_key
    print(handoff_key().hex())
""")


def _child_key(env):
    done = subprocess.run([sys.executable, "-c", KEYED_CHILD], env=env, capture_output=True,
                          text=True, timeout=120)
    return done.returncode, done.stdout.strip(), done.stderr


def test_processes_of_one_user_share_a_key_kept_in_a_private_file(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("ARROW_GPU_HANDOFF_KEY", None)
    first, second = _child_key(env), _child_key(env)
    assert first[0] == second[0] == 0, first[2] + second[2]
    assert first[1] == second[1] and len(bytes.fromhex(first[1])) == 32
    path = tmp_path / "arrow_gpu" / "handoff.key"
    assert path.read_bytes().hex() == first[1]
    assert path.stat().st_mode & 0o777 == 0o600
    env["ARROW_GPU_HANDOFF_KEY"] = "00ff"
    assert _child_key(env)[1] == "00ff"  # the environment's, for every process that sees it


@pytest.mark.parametrize("problem, match", [
    ("shared", "may be read or written by other users"),
    ("short", "holds 3 bytes"),
    ("not hex", "must be 2 to 64 hex digits"),
])
def test_a_key_that_is_not_private_or_whole_is_refused_clearly(tmp_path, problem, match):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}
    env.pop("ARROW_GPU_HANDOFF_KEY", None)
    path = tmp_path / "arrow_gpu" / "handoff.key"
    path.parent.mkdir()
    if problem == "not hex":
        env["ARROW_GPU_HANDOFF_KEY"] = "xyz"
    else:
        path.write_bytes(b"abc" if problem == "short" else bytes(32))
        path.chmod(0o600 if problem == "short" else 0o644)
    code, _, err = _child_key(env)
    assert code != 0 and match in err


def test_set_handoff_key_checks_what_it_is_given():
    from arrow_gpu.io import set_handoff_key
    with pytest.raises(TypeError, match="bytes, not str"):
        set_handoff_key("secret")
    with pytest.raises(ValueError, match="1 to 32 bytes"):
        set_handoff_key(bytes(33))


def test_only_the_key_a_payload_was_sealed_with_opens_it(ctx):
    from arrow_gpu.io import set_handoff_key
    data = table(0)
    set_handoff_key(b"chosen key")
    try:
        with export_batch(to_device(data, ctx)) as shared:
            assert to_host(import_batch(shared.payload)).equals(data)
            set_handoff_key(None)
            with pytest.raises(ValueError, match="another hand-off key"):
                import_batch(shared.payload)
    finally:
        set_handoff_key(None)


def test_an_empty_table_and_a_table_of_many_batches_travel(ctx, receiver):
    process = receiver()
    empty = pa.table({"i": pa.array([], pa.int64())})
    many = pa.Table.from_batches([table(n * 10, rows=10).to_batches()[0] for n in range(5)])
    for data in (empty, many):
        with export_batch(to_device(data, ctx)) as shared:
            assert process.receive(shared.payload)["data"] == data.to_pydict()


def test_a_zero_copy_import_in_another_process_keeps_the_mapping_while_used(ctx):
    # Arrays of a view import keep the opened allocation open after the cache drops it.
    code = textwrap.dedent(
        """
        import gc, sys
        import pyarrow as pa
        import arrow_gpu
        from arrow_gpu._ipc.handoff import OPENED
        from arrow_gpu.io import import_batch
        table = import_batch(bytes.fromhex(sys.stdin.read().strip()))
        OPENED.forget(*next(iter(OPENED._recent))[:2])
        gc.collect()
        print(arrow_gpu.to_host(table).column(0).to_pylist()[:3], OPENED.stats()["open"])
        del table
        gc.collect()
        print(OPENED.stats()["open"])
        """
    )
    with export_batch(to_device(table(0), ctx)) as shared:
        result = subprocess.run([sys.executable, "-c", code], input=shared.payload.hex(),
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("[0, 1, 2]") and int(lines[0].split()[-1]) >= 1
    assert lines[1] == "0"


def test_nullable_nested_and_dictionary_device_data_travels(ctx, receiver):
    data = pa.table({"i": pa.array([None if n % 3 == 0 else n for n in range(100)], pa.int64()),
                     "s": [None if n % 5 == 0 else f"v{n}" for n in range(100)],
                     "l": [[n, n + 1] if n % 7 else None for n in range(100)],
                     "d": pa.array([f"k{n % 4}" for n in range(100)]).dictionary_encode(),
                     "t": [{"a": n, "b": str(n)} for n in range(100)]})
    process = receiver()
    with export_batch(to_device(data, ctx)) as shared:
        assert process.receive(shared.payload)["data"] == data.to_pydict()


@pytest.mark.multi_gpu
def test_a_receiver_on_another_device_gets_a_peer_copy(ctx):
    code = textwrap.dedent(
        """
        import sys
        import arrow_gpu
        from arrow_gpu.io import import_batch
        table = import_batch(bytes.fromhex(sys.stdin.read().strip()), 1, copy=True)
        buffer = table.column(0).chunk(0).buffers()[1]
        print(buffer.device.device_id, arrow_gpu.to_host(table).column(0).to_pylist()[:3])
        """
    )
    with export_batch(to_device(table(0), ctx)) as shared:
        result = subprocess.run([sys.executable, "-c", code], input=shared.payload.hex(),
                                capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1 [0, 1, 2]"


def test_a_forged_payload_of_a_compressed_message_is_refused(ctx):
    # Arrow would decompress the body on the host, where it is not.
    from arrow_gpu._ipc import handoff as _handoff
    from arrow_gpu._ipc.sealed import seal_sized, unseal_sized
    data = pa.table({"x": list(range(1000))})
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="lz4")
    with pa.ipc.new_stream(sink, data.schema, options=options) as writer:
        writer.write_table(data)
    compressed = [message.metadata.to_pybytes()
                  for message in pa.MessageReader.open_stream(sink.getvalue())][1]
    with export_batch(to_device(data, ctx)) as shared:
        body = unseal_sized(shared.payload, _handoff.MAGIC, _handoff.VERSION, "", "")
        original = parse(shared.payload).messages[1].metadata
        assert body.count(original) == 1
        start = body.index(original)
        header = start - _handoff._MESSAGE.size  # metadata length, body length, #segments
        forged = (body[:header] + len(compressed).to_bytes(8, "little") + body[header + 8:start]
                  + compressed + body[start + len(original):])
        with pytest.raises(ValueError, match="compressed message"):
            import_batch(seal_sized(_handoff.MAGIC, _handoff.VERSION, forged))


def _with_metadata(payload, index, edit):
    """``payload`` with message ``index``'s metadata changed by ``edit`` (given a bytearray
    of it), sealed again."""
    from arrow_gpu._ipc import handoff as _handoff
    from arrow_gpu._ipc.sealed import seal_sized, unseal_sized
    body = unseal_sized(payload, _handoff.MAGIC, _handoff.VERSION, "", "")
    original = parse(payload).messages[index].metadata
    metadata = bytearray(original)
    edit(metadata)
    start = body.index(original)
    forged = body[:start] + bytes(metadata) + body[start + len(original):]
    return seal_sized(_handoff.MAGIC, _handoff.VERSION, forged)


def _refused_in_another_process(payload, message):
    # In another process: the exporter reads its own export.
    for copy in (False, True):
        answer = Receiver(copy)
        assert message in answer.receive(payload)["error"]
        answer.close()


def test_a_forged_payload_of_big_endian_data_is_refused(ctx):
    # Arrow would swap the bytes on the host, where they are not.
    import struct

    from test_device_io import say_big_endian, table_field

    def big_endian(metadata):
        say_big_endian(metadata, table_field(metadata, struct.unpack_from("<I", metadata)[0], 2))

    data = pa.table({"x": pa.array(range(10), pa.int64())})
    with export_batch(to_device(data, ctx)) as shared:
        payload = _with_metadata(shared.payload, 0, big_endian)  # the schema
        _refused_in_another_process(payload, "other endianness")


def test_a_forged_payload_of_a_longer_batch_is_refused(ctx):
    # A length past the buffers' would make later copies read past them.
    import struct

    import _flatbuffers

    def longer(metadata):
        batch = _flatbuffers.record_batch(metadata)
        nodes = _flatbuffers.follow(metadata, _flatbuffers.field(metadata, batch, 1))
        struct.pack_into("<q", metadata, _flatbuffers.field(metadata, batch, 0), 1 << 30)
        struct.pack_into("<q", metadata, nodes + 4, 1 << 30)  # the column's length

    data = pa.table({"x": pa.array(range(10), pa.int64())})
    with export_batch(to_device(data, ctx)) as shared:
        payload = _with_metadata(shared.payload, 1, longer)  # the batch
        _refused_in_another_process(payload, "too small")


def _dictionary_batch(metadata):
    """The DictionaryBatch table of a dictionary batch message."""
    import _flatbuffers
    return _flatbuffers.follow(metadata, _flatbuffers.field(metadata,
                                                            _flatbuffers.follow(metadata, 0), 2))


def _dictionary_values(metadata):
    """The RecordBatch table of a dictionary batch message's values."""
    import _flatbuffers
    return _flatbuffers.follow(metadata, _flatbuffers.field(metadata,
                                                            _dictionary_batch(metadata), 1))


def _unknown_id(metadata):
    import _flatbuffers
    struct.pack_into("<q", metadata, _flatbuffers.field(metadata, _dictionary_batch(metadata), 0),
                     7)


def _longer_dictionary(metadata):
    import _flatbuffers
    values = _dictionary_values(metadata)
    nodes = _flatbuffers.follow(metadata, _flatbuffers.field(metadata, values, 1))
    struct.pack_into("<q", metadata, _flatbuffers.field(metadata, values, 0), 1 << 30)
    struct.pack_into("<q", metadata, nodes + 4, 1 << 30)


def _dictionary_past_its_body(metadata):
    import _flatbuffers
    buffers = _flatbuffers.follow(metadata, _flatbuffers.field(metadata,
                                                               _dictionary_values(metadata), 2))
    struct.pack_into("<q", metadata, buffers + 4 + 16 * 2, 1 << 20)  # the values' offset


def _header_type(kind):
    def edit(metadata):
        import _flatbuffers
        metadata[_flatbuffers.field(metadata, _flatbuffers.follow(metadata, 0), 1)] = kind
    return edit


_REFUSED = "an arrow_gpu shared batch payload "  # how every refusal of a payload starts

# Streams of a table of dictionary columns (see _sharing_fuzz.dictionary_stream), with one
# message's metadata edited: (deltas, message index, edit, what the refusal says). Messages:
# the schema, the dictionaries of "d" (id 0) and "e" (id 1), a batch, their replacements or
# deltas, a batch.
_FORGED_DICTIONARIES = {
    "delta dictionary batches": (True, None, None, "delta dictionary batch"),
    "replacement dictionary batches": (False, None, None, None),
    "a dictionary of an unknown id": (False, 2, _unknown_id, "dictionary type with id 7"),
    "a dictionary longer than its buffers": (False, 1, _longer_dictionary, "too small"),
    "a dictionary past its message body": (False, 1, _dictionary_past_its_body, "out of bounds"),
    "a dictionary that says it is a tensor": (False, 1, _header_type(4), "cannot be read"),
    "a batch that says it is a schema": (False, 3, _header_type(1), "cannot be read"),
    # (read as a delta: the batch's buffers are where a dictionary batch says isDelta)
    "a batch that says it is a dictionary": (False, 3, _header_type(2), _REFUSED),
}


@pytest.mark.parametrize("case", _FORGED_DICTIONARIES)
def test_forged_dictionary_batches_import_as_pyarrow_reads_them_or_are_refused(ctx, case):
    # Issue 47: a delta dictionary batch crashed the receiver, which Arrow concatenates with
    # the dictionary before it on the host, where the bodies are not.
    import _sharing_fuzz
    deltas, index, edit, refusal = _FORGED_DICTIONARIES[case]
    stream = _sharing_fuzz.dictionary_stream(deltas)
    payload, allocation = _sharing_fuzz.payload_of_stream(ctx, stream)
    if edit is not None:
        payload = _with_metadata(payload, index, edit)
    if refusal is not None:
        _refused_in_another_process(payload, refusal)
    else:
        expected = pa.ipc.open_stream(stream).read_all().to_pydict()
        for copy in (False, True):
            answer = Receiver(copy)
            assert answer.receive(payload)["data"] == expected
            answer.close()
    del allocation


# A receiver that imports a payload naming an impossible exporter, then a genuine one.
_IMPOSSIBLE_EXPORTER = textwrap.dedent(
    """
    import sys
    import arrow_gpu
    from arrow_gpu.io import import_batch
    forged, genuine = sys.stdin.read().split()
    try:
        import_batch(bytes.fromhex(forged))
    except ValueError as error:
        print("refused:", error)
    print("then:", arrow_gpu.to_host(import_batch(bytes.fromhex(genuine))).num_rows)
    """
)


@pytest.mark.parametrize("pid", [2**40, 2**31, 0, -1, -2**63])
def test_a_payload_naming_an_impossible_exporter_is_refused_and_imports_go_on(ctx, pid):
    # Issue 47: pid 2**40 was recorded among the opened allocations' exporters before it was
    # checked, and every later import's sweep of exited exporters raised OverflowError.
    import _sharing_fuzz
    stream = _sharing_fuzz.dictionary_stream(False)
    forged, forged_allocation = _sharing_fuzz.payload_of_stream(ctx, stream, pid=pid)
    genuine, allocation = _sharing_fuzz.payload_of_stream(ctx, stream)
    result = subprocess.run([sys.executable, "-c", _IMPOSSIBLE_EXPORTER],
                            input=f"{forged.hex()} {genuine.hex()}", capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"refused: an arrow_gpu shared batch payload names exporting process {pid}" in (
        result.stdout)
    assert "then: 6" in result.stdout
    del forged_allocation, allocation


@pytest.mark.parametrize("pid", [2**40, 2**31, 0, -1])
def test_the_sweep_of_exited_exporters_takes_any_pid(pid):
    from arrow_gpu._ipc.handoff import _PID_NAMESPACE, OpenedAllocations, Payload
    cache = OpenedAllocations()
    payload = Payload(pid, _PID_NAMESPACE, "table", 0, b"t" * 16, ((b"a" * 64, 4096),), ())
    cache.view(payload, 0, _RefusingContext(refusals=0))
    cache.forget_exited()  # raised OverflowError for 2**40
    assert cache.stats()["recent"] == 0  # no process has it: dropped


class _Opened:
    def __init__(self, size, address):
        self.size, self.address = size, address


class _RefusingContext:
    """A context whose driver refuses the first ``refusals`` opens as already mapped (an
    exporter reused the addresses of an allocation still open here); it records the rest."""

    handle = 1

    def __init__(self, refusals):
        self.refusals = refusals
        self.opened = []

    def open_ipc_buffer(self, handle):
        if self.refusals:
            self.refusals -= 1
            raise pa.ArrowIOError("Cuda error 208 in function 'cuIpcOpenMemHandle': "
                                  "[CUDA_ERROR_ALREADY_MAPPED] resource already mapped")
        opened = _Opened(size=4096, address=0x1000 * (len(self.opened) + 1))
        self.opened.append(opened)
        return opened

    def foreign_buffer(self, address, size, base):
        return base


def _payload(pid, handles):
    from arrow_gpu._ipc.handoff import Payload
    return Payload(pid, 0, "table", 0, b"t" * 16, tuple((h, 4096) for h in handles), ())


def test_an_exporter_reusing_addresses_still_open_here_is_opened_after_its_old_ones_close():
    from arrow_gpu._ipc.handoff import OpenedAllocations
    cache = OpenedAllocations()
    context = _RefusingContext(refusals=0)
    old = _payload(7, [b"a" * 64])
    cache.view(old, 0, context)  # stays among the recent ones
    cache.view(_payload(8, [b"b" * 64]), 0, context)  # another exporter's
    context.refusals = 1  # the driver: the new handle's addresses are mapped already
    cache.view(_payload(7, [b"c" * 64]), 0, context)
    assert cache.stats()["opens"] == 3
    recent = list(cache._recent)
    assert [key[3] for key in recent] == [b"b" * 64, b"c" * 64]  # the old one of 7 closed


def test_an_exporter_reusing_addresses_still_viewed_here_is_a_clear_error():
    from arrow_gpu._ipc.handoff import OpenedAllocations
    cache = OpenedAllocations()
    context = _RefusingContext(refusals=2)
    with pytest.raises(ValueError, match="reused the addresses.*release them"):
        cache.view(_payload(7, [b"c" * 64]), 0, context)
