"""A mutation fuzzer for reading Arrow IPC from device memory.

Each case takes a valid IPC message, stream or file (a sample of every type family,
compressed with lz4 or zstd or not), mutates it (single-bit flips mostly; a few bytes set,
int32 lengths replaced, truncations), copies it to the device and reads it through one
path: arrow_gpu.io.read_record_batch, read_message then pyarrow's read_record_batch,
pa.ipc.open_stream or open_file over a device BufferReader. The same bytes are read on the
host by pyarrow. Every outcome must be a clean Python exception, or a result equal to what
host pyarrow reads; where host pyarrow raises, the device must raise too.

Cases run in batches in child processes, so that a crash is a counted failure:

    python tests/_ipc_fuzz.py --cases 15000          # the long campaign
"""

import collections
import os
import random
import sys

import _campaign
from _campaign import CRASH

WRONG = "wrong result"
EQUAL = "equal result"
CLEAN = "clean error"
PATHS = ("read_record_batch", "read_message", "open_stream", "open_file")
CODECS = (None, "lz4", "zstd")


def _written(batch, fmt, codec):
    import pyarrow as pa
    options = pa.ipc.IpcWriteOptions(compression=codec)
    if fmt == "message":
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
            writer.write_batch(batch)
        reader = pa.ipc.MessageReader.open_stream(sink.getvalue())
        reader.read_next_message()  # the schema
        return reader.read_next_message().serialize().to_pybytes()
    sink = pa.BufferOutputStream()
    new = pa.ipc.new_file if fmt == "file" else pa.ipc.new_stream
    with new(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
        writer.write_batch(batch.slice(1))
    return sink.getvalue().to_pybytes()


def _mutated(data, rng):
    data = bytearray(data)
    kind = rng.random()
    if kind < 0.8:
        bit = rng.randrange(8 * len(data))
        data[bit // 8] ^= 1 << (bit % 8)
    elif kind < 0.88:
        data[rng.randrange(len(data))] = rng.choice([0, 0xFF, 0x80, 0x7F, rng.randrange(256)])
    elif kind < 0.96:
        at = rng.randrange(0, len(data) - 3) & ~3
        value = rng.choice([0, -1, 1, 8, 2**31 - 1, -2**31, rng.randrange(-2**31, 2**31)])
        data[at:at + 4] = value.to_bytes(4, "little", signed=True)
    else:
        del data[rng.randrange(len(data)):]
    return bytes(data)


def _same(a, b):
    """Whether two host tables hold the same thing (invalid ones too: same buffers).

    Columns are taken by index: a mutated field name need not be UTF-8.
    """
    import pyarrow as pa
    if not a.schema.equals(b.schema) or a.num_rows != b.num_rows:
        return False

    def arrays(table):
        table = table.rename_columns([str(i) for i in range(table.num_columns)])
        return [chunk for column in table.columns for chunk in column.chunks]

    def buffers(array):
        out = [bytes(x) if x is not None else None for x in array.buffers()]
        if isinstance(array, pa.DictionaryArray):
            out += buffers(array.dictionary)
        return out

    try:
        for array in arrays(a) + arrays(b):
            array.validate(full=True)
    except pa.ArrowException:
        return [buffers(x) for x in arrays(a)] == [buffers(x) for x in arrays(b)]
    return all(x.equals(y) or _ipc(x) == _ipc(y) for x, y in zip(arrays(a), arrays(b)))


def _ipc(array):
    """An array's IPC stream bytes (equals() says NaN != NaN)."""
    import pyarrow as pa
    batch = pa.record_batch([array], names=["a"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return sink.getvalue().to_pybytes()


def _run_batch(seed, count):
    """Runs ``count`` cases in this process; returns {outcome: count}."""
    import pyarrow as pa

    import arrow_gpu
    from arrow_gpu.io import BufferReader, read_message, read_record_batch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _arrow_samples import samples

    cpu = pa.default_cpu_memory_manager()
    ctx = arrow_gpu.Context(0)
    rng = random.Random(seed)
    batches = {name: pa.record_batch([array], names=["a"])
               for name, array in samples(sliced=False)}
    outcomes = collections.Counter()

    def table(batches_read, schema):
        return pa.Table.from_batches(list(batches_read), schema=schema)

    def host_read(path, data, schema):
        if path == "read_record_batch" or path == "read_message":
            return table([pa.ipc.read_record_batch(pa.ipc.read_message(data), schema)], schema)
        opened = (pa.ipc.open_file if path == "open_file" else pa.ipc.open_stream)(data)
        return opened.read_all()

    def device_read(path, buffer, schema):
        if path == "read_record_batch":
            return table([read_record_batch(buffer, schema).copy_to(cpu)], schema)
        if path == "read_message":
            batch = pa.ipc.read_record_batch(read_message(buffer), schema)
            return table([arrow_gpu.to_host(batch)], schema)
        if path == "open_file":
            opened = pa.ipc.open_file(BufferReader(buffer))
            read = [opened.get_batch(i) for i in range(opened.num_record_batches)]
        else:
            opened = pa.ipc.open_stream(BufferReader(buffer))
            read = list(opened)
        return pa.Table.from_batches([b.copy_to(cpu) for b in read], opened.schema)

    for _ in range(count):
        path = rng.choice(PATHS)
        # A lone record batch message of dictionaries needs them read before: streams only.
        name = rng.choice(sorted(n for n in batches if n != "dictionary" or "open" in path))
        codec = rng.choice(CODECS)
        fmt = {"open_file": "file", "open_stream": "stream"}.get(path, "message")
        batch = batches[name]
        data = _mutated(_written(batch, fmt, codec), rng)
        case = (name, path, codec, data.hex())
        print(case, file=sys.stderr, flush=True)  # the last line names a crashing case
        try:
            expected = host_read(path, data, batch.schema)
        except Exception:  # noqa: BLE001 - host pyarrow refusing is a fact, not a failure
            expected = None
        try:
            got = device_read(path, ctx.buffer_from_data(data), batch.schema)
        except Exception as error:  # noqa: BLE001 - every clean refusal counts
            outcomes[f"{CLEAN}: {type(error).__name__}"] += 1
            continue
        if expected is not None and _same(got, expected):
            outcomes[EQUAL] += 1
        else:
            outcomes[WRONG] += 1
            outcomes.setdefault(f"{WRONG} example: {str(case)[:1500]}", 0)
    return outcomes


def run_campaign(cases, batch=250, seed=0, workers=None, timeout=600):
    """Runs ``cases`` in child processes of ``batch`` cases, ``workers`` at a time (the CPU
    count by default); returns {outcome: count} (see _campaign)."""
    return _campaign.run_seeded_batches(os.path.abspath(__file__), cases, batch, seed,
                                        workers, timeout)


def failures(totals):
    """{outcome: count} of the crashes and wrong results."""
    return _campaign.counted(totals, CRASH, WRONG)


def summary(totals):
    """One line: cases, clean errors, equal results, crashes, wrong results."""
    clean = sum(count for outcome, count in totals.items() if outcome.startswith(CLEAN))
    return (f"ipc fuzz: {sum(totals.values())} cases, {clean} clean errors, {totals[EQUAL]} "
            f"equal results, {totals[CRASH]} crashes, {totals[WRONG]} wrong results")


if __name__ == "__main__":
    sys.exit(_campaign.main(sys.modules[__name__], 15_000))
