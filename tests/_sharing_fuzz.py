"""A fuzzer for what processes hand each other to share device memory: serialized
``IpcMemHandle``s, ``export_batch`` payloads and ``arrow_gpu.dask`` headers and frames.

The exporting process (the one running the campaign) carves small buffers with distinct
contents side by side, so that a handle opened at a wrong offset would read a neighbour,
and exports one of them, a table and a Dask value. Child processes (CUDA IPC cannot open a
handle in the process that exported it) open mutated copies: bit flips, truncations,
extensions, byte substitutions; for Dask also forged header fields, missing, extra and
swapped frames. Every case must end in a clean Python exception or give exactly what was
exported: other bytes are a "wrong bytes" failure, a dead child a "crash".

Payloads are also forged: fields of their body overwritten and the record sealed again, as
someone who knows the format (not a faulty channel) would. Without the hand-off key the seal
refuses them. With it (the driver's handles kept: the driver does not check them) they may
open other bytes of the exporter's allocations ("forged open"); they must still never crash
or reach past the allocations the payload names. Forged payloads of
IPC streams that export_batch never writes (``payload_of_stream``: dictionary batches that
are deltas or replacements, their metadata overwritten too) must import exactly what pyarrow
reads from the stream on the host, or be refused.

    python tests/_sharing_fuzz.py --cases 8000          # the long campaign
"""

import argparse
import collections
import copy
import gc
import json
import os
import pickle
import random
import struct
import sys
import tempfile

import _campaign
from _campaign import CRASH

WRONG = "wrong bytes"
EXACT = "exact open"
FORGED = "forged open"
TARGETS = ("handle", "payload", "dask", "forged", "dictionary")


def _stream_messages(stream):
    """(metadata, where the body starts, body length) of each message of an IPC stream."""
    import pyarrow as pa
    position, messages = 0, []
    while True:
        (length,) = struct.unpack_from("<i", stream, position)
        framing = 4
        if length == -1:  # the continuation marker, then the length
            (length,) = struct.unpack_from("<i", stream, position + 4)
            framing = 8
        if length == 0:  # the end of the stream
            return messages
        message = pa.ipc.read_message(pa.py_buffer(stream[position:]))
        body_start = position + framing + length
        body_length = message.body.size if message.body is not None else 0
        messages.append((message.metadata.to_pybytes(), body_start, body_length))
        position = body_start + body_length


def payload_of_stream(ctx, stream, pid=None):
    """A table's payload, forged as someone who knows the format would, whose messages are
    those of the IPC ``stream`` (bytes), their bodies in a device allocation of its own, and
    whose exporter is this process (or ``pid``). Returns the payload and the allocation,
    which must live while the payload is read."""
    from arrow_gpu._ipc import handoff as _handoff, wire as _ipc_wire
    from arrow_gpu._cuda import _isolated_copy
    from arrow_gpu._ipc.sealed import seal_sized
    allocation = _isolated_copy(ctx.buffer_from_data(stream))
    handle, offset, size = _ipc_wire.parse(allocation.export_for_ipc().serialize())
    stream_messages = _stream_messages(stream)
    messages = []
    for metadata, body_start, body_length in stream_messages:
        segments = ([_handoff._SEGMENT.pack(0, offset + body_start, body_length, 0)]
                    if body_length else [])
        messages += [_handoff._MESSAGE.pack(len(metadata), body_length, len(segments)),
                     metadata, *segments]
    header = _handoff._HEADER.pack(os.getpid() if pid is None else pid,
                                   _handoff._PID_NAMESPACE, _handoff.KINDS.index("table"), 0,
                                   os.urandom(16), 1, len(stream_messages))
    body = b"".join([header, _handoff._ALLOCATION.pack(handle, offset + size), *messages])
    return seal_sized(_handoff.MAGIC, _handoff.VERSION, body), allocation


def dictionary_stream(deltas):
    """An IPC stream of a table of two batches of two dictionary columns, whose second
    batch's dictionaries extend the first's: sent as delta dictionary batches with
    ``deltas``, else as replacement dictionaries."""
    import pyarrow as pa
    first = pa.record_batch({
        "d": pa.DictionaryArray.from_arrays(pa.array([0, 1, None], pa.int32()), ["a", "b"]),
        "e": pa.DictionaryArray.from_arrays(pa.array([1, 0, 1], pa.int8()), [10, 20])})
    second = pa.record_batch({
        "d": pa.DictionaryArray.from_arrays(pa.array([2, 0, 1], pa.int32()), ["a", "b", "c"]),
        "e": pa.DictionaryArray.from_arrays(pa.array([2, None, 0], pa.int8()), [10, 20, 30])})
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(emit_dictionary_deltas=deltas)
    with pa.ipc.new_stream(sink, first.schema, options=options) as writer:
        writer.write_batch(first)
        writer.write_batch(second)
    return sink.getvalue().to_pybytes()


def export_samples():
    """Exports one of each target from this process; returns (samples, keep_alive)."""
    import pyarrow as pa
    from distributed.protocol import serialize

    import arrow_gpu
    import arrow_gpu.dask  # noqa: F401 - registers the serializers
    from arrow_gpu.io import export_batch

    ctx = arrow_gpu.Context(0)
    # Neighbours in one driver allocation: a wrong offset or size reads one of them.
    neighbours = [ctx.buffer_from_data(bytes([i]) * 900 + f"block {i:03}".encode() * 10)
                  for i in range(24)]
    target = neighbours[12]
    handle = target.export_for_ipc()
    table = pa.table({"x": pa.array(range(50), pa.int64()), "s": [f"v{i}" for i in range(50)]})
    shared = export_batch(table, ctx)  # staged into one device buffer
    value = arrow_gpu.to_device(table, ctx)
    in_place = export_batch(value)  # exported where its buffers live
    same_host = {"sender": {"address": "tcp://127.0.0.1:1"},
                 "recipient": {"address": "tcp://127.0.0.1:2"}}
    dask_ipc = serialize(value, context=same_host)
    dask_host = serialize(value, context=None)
    other = serialize(arrow_gpu.to_device(table.column("x").chunk(0), ctx), context=same_host)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    dictionary_streams = [dictionary_stream(deltas) for deltas in (False, True)]
    dictionary_payloads = [payload_of_stream(ctx, stream) for stream in dictionary_streams]
    samples = {
        "dictionary_payloads": [payload for payload, _ in dictionary_payloads],
        "dictionary_table": dictionary_streams[0],  # both streams read as this table
        "handle": handle.serialize().to_pybytes(),
        "handle_bytes": target.to_pybytes(),
        "payloads": [shared.payload, in_place.payload],
        "table": sink.getvalue().to_pybytes(),
        "dask": [dask_ipc, dask_host],
        "dask_other": other,
    }
    return samples, (neighbours, handle, shared, value, in_place, dictionary_payloads)


def _mutated(rng, data):
    """``data`` (bytes) changed by one of the byte-level mutations."""
    data = bytearray(data)
    kind = rng.choice(("flip", "truncate", "extend", "substitute"))
    if kind == "flip":
        for _ in range(rng.randint(1, 3)):
            bit = rng.randrange(len(data) * 8)
            data[bit // 8] ^= 1 << (bit % 8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)):]
    elif kind == "extend":
        data += bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    else:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] = rng.randrange(256)
    return bytes(data)


def _forged_payload(rng, payload):
    """``payload`` with a few bytes of its body overwritten by boundary values, sealed again:
    half the time by someone without the hand-off key (it must be refused), else by a key
    holder, who forges lengths, offsets, pids and messages but keeps the driver's handles
    (the driver does not check a handle: a forged one can corrupt the opener's memory inside
    it, which only the key keeps out)."""
    from arrow_gpu._ipc import handoff as _handoff
    from arrow_gpu._ipc.sealed import seal_sized, unseal_sized
    body = bytearray(unseal_sized(payload, _handoff.MAGIC, _handoff.VERSION, "", ""))
    original = bytes(body)
    for _ in range(rng.randint(1, 2)):
        width = rng.choice((1, 4, 8))
        value = rng.choice((0, 1, -1, 7, 8, 64, 2**31 - 1, 2**31, 2**63 - 1, -2**63,
                            rng.randrange(-4096, 4096)))
        position = rng.randrange(len(body) - width + 1)
        body[position:position + width] = (value % (1 << (8 * width))).to_bytes(width, "little")
    if rng.random() < 0.5:  # no key: any bytes, handles too
        key = bytes(rng.randrange(256) for _ in range(32))
        return seal_sized(_handoff.MAGIC, _handoff.VERSION, bytes(body), key)
    allocation_count = _handoff._HEADER.unpack_from(original, 0)[5]
    for index in range(allocation_count):
        start = _handoff._HEADER.size + index * _handoff._ALLOCATION.size
        body[start:start + 64] = original[start:start + 64]
    return seal_sized(_handoff.MAGIC, _handoff.VERSION, bytes(body))


def _forged_dask(rng, samples):
    """A Dask header and frames of the exported value, forged."""
    header, frames = copy.deepcopy(rng.choice(samples["dask"]))
    frames = list(frames)
    sent = header["sub-header"]["arrow_gpu"]
    kind = rng.choice(("field", "field", "drop_key", "add_key", "frames", "payload", "swap"))
    if kind == "field":
        key = rng.choice(sorted(sent))
        sent[key] = rng.choice(["array", "batch", "table", "chunked", "buffer", "matrix",
                                "ipc", "host", 0, 1, 2, -1, None, {}, [], b"x"])
    elif kind == "drop_key":
        sent.pop(rng.choice(sorted(sent)))
    elif kind == "add_key":
        sent[rng.choice(["extra", "size", "kind2"])] = 1
    elif kind == "frames":
        if frames and rng.random() < 0.5:
            frames.pop(rng.randrange(len(frames)))
        else:
            frames.append(rng.choice(frames or [b""]))
    elif kind == "payload" and sent.get("via") == "ipc":
        frames[0] = _mutated(rng, bytes(frames[0]))
    else:  # the header of one value on the frames of another, or the reverse
        other_header, other_frames = copy.deepcopy(samples["dask_other"])
        if rng.random() < 0.5:
            header = other_header
        else:
            frames = list(other_frames)
    return header, frames


def _run_batch(samples_path, seed, count, target):
    """Runs ``count`` cases against ``target`` in this process; returns {outcome: count}."""
    import pyarrow as pa

    import arrow_gpu
    from arrow_gpu import IpcMemHandle

    with open(samples_path, "rb") as file:
        samples = pickle.load(file)
    ctx = arrow_gpu.Context(0)
    expected_table = pa.ipc.open_stream(samples["table"]).read_all()
    dictionary_table = pa.ipc.open_stream(samples["dictionary_table"]).read_all()
    rng = random.Random(seed)
    outcomes = collections.Counter()

    def open_handle(data):
        opened = ctx.open_ipc_buffer(IpcMemHandle.from_buffer(data))
        return opened.copy_to_host().to_pybytes() == samples["handle_bytes"]

    def open_payload(data, expected=expected_table):
        from arrow_gpu.io import import_batch
        return arrow_gpu.to_host(import_batch(data)).equals(expected)

    def open_dictionary_payload(data):
        return open_payload(data, dictionary_table)

    def open_dask(header_frames):
        from distributed.protocol import deserialize
        value = deserialize(*header_frames)
        return isinstance(value, pa.Table) and arrow_gpu.to_host(value).equals(expected_table)

    if target == "dask":
        import arrow_gpu.dask  # noqa: F401 - as on a worker
    for _ in range(count):
        if target == "handle":
            case, run = _mutated(rng, samples["handle"]), open_handle
        elif target == "payload":
            case, run = _mutated(rng, rng.choice(samples["payloads"])), open_payload
        elif target == "forged":
            case, run = _forged_payload(rng, rng.choice(samples["payloads"])), open_payload
        elif target == "dictionary":
            case = rng.choice(samples["dictionary_payloads"])
            if rng.random() < 0.9:
                case = _forged_payload(rng, case)
            run = open_dictionary_payload
        else:
            case, run = _forged_dask(rng, samples), open_dask
        print(repr(case)[:2000], file=sys.stderr, flush=True)  # the last names a crash
        try:
            outcome = (EXACT if run(case) else FORGED if target in ("forged", "dictionary")
                       else WRONG)
        except Exception as error:  # noqa: BLE001 - every clean refusal counts
            outcome = f"clean error: {type(error).__name__}"
            del error
        outcomes[outcome] += 1
        gc.collect()
    return outcomes


def run_campaign(cases, batch=500, seed=0, timeout=600, workers=None):
    """Exports the samples from this process and runs ``cases`` in child processes of
    ``batch`` cases, the targets in turn, at most ``workers`` (default: the CPU count) at
    once; returns {outcome: count}, a dead child counting its whole batch as a crash."""
    samples, keep_alive = export_samples()
    with tempfile.TemporaryDirectory() as folder:
        samples_path = os.path.join(folder, "samples.pickle")
        with open(samples_path, "wb") as file:
            pickle.dump(samples, file)
        total = _campaign.run_batches(
            [([__file__, "--samples", samples_path, "--batch", str(min(batch, cases - index)),
               "--seed", str(seed + index), "--target", TARGETS[number % len(TARGETS)]],
              min(batch, cases - index))
             for number, index in enumerate(range(0, cases, batch))],
            workers=workers, timeout=timeout)
    del keep_alive
    return total


def failures(totals):
    """{outcome: count} of the crashes and wrong bytes."""
    return {outcome: count for outcome, count in totals.items()
            if count and outcome in (CRASH, WRONG)}


def summary(totals):
    """One line of counts: cases, clean errors, exact opens, crashes, wrong bytes."""
    clean = sum(count for outcome, count in totals.items() if outcome.startswith("clean"))
    cases = clean + totals[EXACT] + totals[FORGED] + totals[CRASH] + totals[WRONG]
    return (f"sharing fuzz: {cases} cases, {clean} clean errors, {totals[EXACT]} exact opens, "
            f"{totals[FORGED]} forged opens, {totals[CRASH]} crashes, "
            f"{totals[WRONG]} wrong bytes")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=8_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--target", choices=TARGETS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch is not None:
        print(json.dumps(_run_batch(args.samples, args.seed, args.batch, args.target)))
        return 0
    totals = run_campaign(args.cases, seed=args.seed, workers=args.workers)
    return _campaign.report(sys.modules[__name__], totals)


if __name__ == "__main__":
    sys.exit(main())
