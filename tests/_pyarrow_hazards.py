"""What everyday pyarrow operations do with device data: work, lie, raise, or crash.

pyarrow runs host code over an array's buffers without asking where they live, so on data
whose buffers are device memory some of its operations work, some return a wrong answer
without a word, some raise and some crash the process. An operation "works" when its result
equals (after a copy to the host) what the same operation gives on the host copy of the data.
The user guide states the outcome of each operation below in its table (docs/guide/hazards.md);
tests/test_pyarrow_hazards.py runs them and holds the table to what happens, on the
simulator and on a GPU alike (the simulator keeps its device memory unreadable to host code,
as a GPU's is).

Each operation runs in a child process; one that crashes ends its process and the next
process starts after it. Print the observed table (to refresh the guide's):

    ARROW_GPU_SIMULATOR=1 python tests/_pyarrow_hazards.py
"""

import subprocess
import sys

# The data every operation starts from, once on the device and once on the host (`place`
# and `place_bytes` copy to the device, or do nothing): a table of two columns with nulls,
# one chunk each; `col` is a column, `arr` its chunk, `flags` a boolean array with nulls and
# `bits` one without, `lists` a list array, `buf` a data buffer, `message` a buffer holding an IPC message; `mask` is a host
# boolean array.
SETUP = """
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
table = pa.table({"x": pa.array([1, None, 3, 4], pa.int64()),
                  "s": pa.array(["a", "b", None, "d"])})
t = place(table)
message = place_bytes(table.to_batches()[0].serialize())
col = t.column("x")
arr = col.chunk(0)
flags = place(pa.array([True, False, None]))
bits = place(pa.array([True, False, True]))
lists = place(pa.array([[1], [2, 3], None]))
buf = arr.buffers()[1]
mask = pa.array([True, False, True, True])
"""

# The operation as the guide's table names it -> the expression that performs it.
OPERATIONS = {
    "t.num_rows, len(arr)": "t.num_rows, len(arr)",
    "repr(t), str(arr)": "repr(t), str(arr)",
    "t.select(...), t.column(...)": "t.select(['x']), t.column('s')",
    "t.append_column(...), t.rename_columns(...)":
        "t.append_column('y', col).rename_columns(['a', 'b', 'c'])",
    "t.to_batches(), pa.concat_tables(...)": "t.to_batches(), pa.concat_tables([t, t])",
    "arr.slice(...)": "arr.slice(1, 2)",
    "arr.validate()": "arr.validate()",
    "t.slice(...)": "t.slice(1, 2)",
    "col.slice(...)": "col.slice(1, 2)",
    "pa.chunked_array([arr.slice(...)])": "pa.chunked_array([arr.slice(1, 2)]).null_count",
    "arr.slice(...).null_count": "arr.slice(1, 2).null_count",
    "pa.concat_arrays(...)": "pa.concat_arrays([arr, arr])",
    "pc.sum(arr)": "pc.sum(arr)",
    "flags.true_count": "flags.true_count",
    "bits.true_count": "bits.true_count",
    "lists.flatten()": "lists.flatten()",
    "t.filter(mask)": "t.filter(mask)",
    "t.take(...)": "t.take([0, 2])",
    "t.combine_chunks()": "t.combine_chunks()",
    "t.cast(...)": "t.cast(pa.schema([('x', pa.float64()), ('s', pa.large_string())]))",
    "t.sort_by(...)": "t.sort_by('x')",
    "t.drop_null()": "t.drop_null()",
    "t.group_by(...).aggregate(...)": "t.group_by('s').aggregate([('x', 'sum')])",
    "t.equals(t)": "t.equals(t)",
    "pc.is_null(arr)": "pc.is_null(arr)",
    "pc.fill_null(arr, 0)": "pc.fill_null(arr, 0)",
    "t.to_pandas()": "t.to_pandas()",
    "t.to_pylist(), arr.to_pylist()": "arr.to_pylist()",
    "arr.to_numpy()": "arr.to_numpy(zero_copy_only=False)",
    "arr.validate(full=True)": "arr.validate(full=True)",
    "arr.__arrow_c_array__()": "arr.__arrow_c_array__()",
    "buf.to_pybytes()": "buf.to_pybytes()",
    "IPC writer: write_table(t)":
        "pa.ipc.new_stream(pa.BufferOutputStream(), t.schema).write_table(t)",
    "pq.write_table(t, ...)": "pq.write_table(t, pa.BufferOutputStream())",
    "pa.BufferReader(buf).read()": "pa.BufferReader(buf).read()",
    "pa.compress(buf)": "pa.compress(buf, codec='zstd')",
    "pa.ipc.read_message(message)": "pa.ipc.read_message(message)",
}

WORKS = "works"
WRONG = "returns a wrong result"
CRASHES = "crashes"


def outcome_of(error: BaseException) -> str:
    """'raises X', X the builtin exception class pyarrow's error derives from."""
    builtin = next(cls for cls in type(error).__mro__ if cls.__module__ == "builtins")
    return f"raises {builtin.__name__}"


def _on_host(value):
    """`value` with every device object in it copied to the host, for comparison."""
    import pyarrow as pa

    import arrow_gpu

    if isinstance(value, (tuple, list)):
        return type(value)(_on_host(item) for item in value)
    if isinstance(value, (pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table)):
        return arrow_gpu.to_host(value)
    if isinstance(value, pa.Buffer) and not value.is_cpu:
        return pa.py_buffer(arrow_gpu.CudaBuffer.from_buffer(value).copy_to_host())
    return value


def _equal(left, right) -> bool:
    if isinstance(left, (tuple, list)):
        return len(left) == len(right) and all(map(_equal, left, right))
    if hasattr(left, "equals"):
        return left.equals(right)
    return left == right


def _child(first: int) -> None:
    """Runs the operations from index `first` on, one line per outcome."""
    import arrow_gpu

    device = {"place": arrow_gpu.to_device,
              "place_bytes": arrow_gpu.Context(0).buffer_from_data}
    host = {"place": lambda data: data, "place_bytes": lambda data: data}
    exec(SETUP, device)
    exec(SETUP, host)
    for name, code in list(OPERATIONS.items())[first:]:
        print(f"start\t{name}", flush=True)
        try:
            result = eval(code, device)
        except Exception as error:  # noqa: BLE001 - the outcome being recorded
            outcome = outcome_of(error)
        else:
            outcome = WORKS if _equal(_on_host(result), eval(code, host)) else WRONG
        print(f"done\t{name}\t{outcome}", flush=True)


def observe(timeout: float = 300) -> dict:
    """{operation: outcome} for every operation, on this interpreter's backend."""
    names = list(OPERATIONS)
    outcomes: dict = {}
    while len(outcomes) < len(names):
        first = len(outcomes)
        run = subprocess.run([sys.executable, __file__, "--child", str(first)],
                             capture_output=True, text=True, timeout=timeout)
        started = None
        for line in run.stdout.splitlines():
            fields = line.split("\t")
            if fields[0] == "start":
                started = fields[1]
            elif fields[0] == "done":
                outcomes[fields[1]] = fields[2]
                started = None
        if run.returncode != 0:
            if started is None:  # died outside an operation: the setup itself failed
                raise RuntimeError(f"the hazard probe failed:\n{run.stdout}\n{run.stderr}")
            outcomes[started] = CRASHES
    return outcomes


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(int(sys.argv[2]))
    else:
        for name, outcome in observe().items():
            print(f"| `{name}` | {outcome} |")
