"""A structure fuzzer for the C Device Data Interface importers.

Hypothesis draws a device sample, an entry point (import_array, import_record_batch,
import_stream, iter_stream) and mutations of the structs a hostile or careless producer
hands over, labelled CUDA, CPU or CUDA_HOST: counts (above the producer's too), lengths,
offsets, NULL formats and children, bad formats, wrong device types and ids, garbage device
pointers, released structs, swapped capsules, failing stream callbacks. Every release
callback is instrumented: each struct handed over must be released exactly once. A case
that succeeds is copied to the host (reads of garbage device memory must be refused, not
performed).

Cases run in batches in child processes, so that a crash is a counted failure:

    python tests/_interchange_fuzz.py --cases 10000          # the long campaign
"""

import argparse
import collections
import ctypes
import gc
import json
import sys

import _campaign
from _campaign import CRASH


ENTRIES = ("import_array", "import_record_batch", "import_stream", "iter_stream")


def _run_batch(seed, count, entry):
    """Runs ``count`` cases through ``entry`` in this process; returns {outcome: count}."""
    import hypothesis.strategies as st
    import pyarrow as pa
    from hypothesis import HealthCheck, given, settings
    from hypothesis import seed as hypothesis_seed

    import arrow_gpu
    from arrow_gpu import c_device_interface as cdi
    from arrow_gpu.testing.c_structs import (SCHEMA_RELEASE, STREAM_GET_NEXT,
                                             STREAM_GET_SCHEMA, STREAM_RELEASE,
                                             ArrowDeviceArray, ArrowDeviceArrayStream,
                                             ArrowSchema, in_new_capsule, moved_from_capsule,
                                             release_as_produced)

    ctx = arrow_gpu.Context(0)
    garbage = ctypes.create_string_buffer(4096)  # host memory posing as device memory
    samples = {
        "int64": pa.array([1, None, 3, 4], pa.int64()),
        "string": pa.array(["a", None, "ccc", ""]),
        "list": pa.array([[1], None, [2, 3], []]),
        "struct": pa.array([{"a": 1, "b": "x"}, None, {"a": 3, "b": None}, {"a": 4, "b": "z"}]),
        "dictionary": pa.array(["x", "y", None, "x"]).dictionary_encode(),
        "string_view": pa.array(["a" * 20, None, "ccc", ""], pa.string_view()),
    }
    # Where the producer says the data is: CUDA device memory, or host memory labelled CPU or
    # CUDA_HOST (an importer reads those on the host, so a walk past a struct faults there).
    labels = {"CUDA": (2, 0), "CPU": (1, -1), "CUDA_HOST": (3, 0)}
    sizes = st.sampled_from([-(2**63), -1, 0, 1, 3, 4, 5, 2**31, 2**40, 2**62])
    array_fields = st.tuples(st.sampled_from(["length", "null_count", "offset", "n_buffers",
                                              "n_children"]), sizes)
    pointers = st.tuples(st.just("buffer"), st.tuples(
        st.integers(0, 3), st.sampled_from(["null", "garbage", "one"])))
    schema_fields = st.one_of(
        st.tuples(st.just("format"), st.sampled_from(
            [None, b"", b"?", b"+s", b"+l", b"i", b"l", b"u", b"w:-1", b"d:99,2", b"+w:0",
             b"tDm", b"+ud:9"])),
        st.tuples(st.just("n_children"), sizes),
        st.tuples(st.just("flags"), st.sampled_from([0, 1, 2, 4, -1])))
    device_fields = st.tuples(st.sampled_from(["device_type", "device_id"]),
                              st.sampled_from([-1, 0, 1, 2, 3, 13, 99, 2**31 - 1]))
    mutation = st.one_of(
        st.tuples(st.just("array"), array_fields), st.tuples(st.just("array"), pointers),
        st.tuples(st.just("schema"), schema_fields), st.tuples(st.just("device"), device_fields),
        st.tuples(st.just("released"), st.sampled_from(["array", "schema"])),
        st.tuples(st.just("swap_capsules"), st.just(True)),
        st.tuples(st.just("stream"), st.sampled_from(["get_schema_fails", "get_next_fails",
                                                      "get_next_fails_later", "null_format"])))
    cases = st.fixed_dictionaries({
        "entry": st.just(entry),
        "sample": st.sampled_from(sorted(samples)),
        "label": st.sampled_from(sorted(labels)),
        "mutations": st.lists(mutation, max_size=3),
    })
    outcomes = collections.Counter()

    class Counted:
        """Instrumented release callbacks: each struct must be released exactly once."""

        def __init__(self):
            self.calls = collections.Counter()
            self.keep = []

        def array(self, device_array, name):
            """Wrap the release of ``device_array.array``, restoring the producer's fields
            (mutations may change what its release reads) before calling it."""
            self.calls[name] = 0

            def count():
                self.calls[name] += 1

            self.keep.append(release_as_produced(device_array.array, count))

        def schema(self, schema, name):
            pristine = ArrowSchema()
            ctypes.memmove(ctypes.addressof(pristine), ctypes.addressof(schema),
                           ctypes.sizeof(schema))
            original = pristine.release
            self.calls[name] = 0

            @SCHEMA_RELEASE
            def counted(pointer):
                self.calls[name] += 1
                ctypes.memmove(pointer, ctypes.addressof(pristine), ctypes.sizeof(pristine))
                original(pointer)

            schema.release = counted
            self.keep.append((counted, pristine))

    def set_count(struct, field, value, keep):
        """Sets a count. One above the producer's gets a pointer array that long (the
        producer's entries, then NULLs) where that fits in memory, so that reading the
        entries it claims is defined; a larger one is a lie the importer must refuse before
        walking the array it counts."""
        pointers = {"n_buffers": "buffers", "n_children": "children"}.get(field)
        current = getattr(struct, field)
        if pointers is not None and getattr(struct, pointers) and max(current, 0) < value <= 64:
            entries = getattr(struct, pointers)
            padded = (entries._type_ * value)(*[entries[i] for i in range(current)])
            keep.append(padded)
            setattr(struct, pointers, ctypes.cast(padded, type(entries)))
        setattr(struct, field, value)

    def mutate_array(device_array, field, value, n_buffers, keep, sample):
        """One change; ``n_buffers`` is the producer's count (the field may be changed)."""
        if field == "buffer":
            index, kind = value
            # Host memory is read on the host, where an unmapped pointer faults any consumer:
            # a lie no importer can check (pointers change last, after any relabelling). A
            # view array's last buffer, its variadic buffer sizes, is host memory whatever
            # the label (importers read it on the host).
            on_host = device_array.device_type in (1, 3) or (
                sample == "string_view" and index == n_buffers - 1)
            if kind == "one" and on_host:
                return
            # The buffers array is the producer's memory: once released, it is gone.
            if index < n_buffers and device_array.array.release:
                device_array.array.buffers[index] = {
                    "null": None, "garbage": ctypes.addressof(garbage), "one": 1}[kind]
        elif field in ("device_type", "device_id"):
            setattr(device_array, field, value)
        elif (field in ("length", "offset") and device_array.device_type in (1, 3)
              and getattr(device_array.array, field) < value <= 2**48):
            # Nor does a host buffer's size travel in the struct: every consumer reads past
            # one whose array claims more slots (a device's driver refuses such reads).
            return
        else:
            set_count(device_array.array, field, value, keep)

    def labelled(case, device_struct):
        """The sample as the case's producer holds it; with ``device_struct``, labels that."""
        device_type, device_id = labels[case["label"]]
        if device_struct is not None:
            device_struct.device_type = device_type
            if hasattr(device_struct, "device_id"):
                device_struct.device_id = device_id
        sample = samples[case["sample"]]
        return arrow_gpu.to_device(sample) if device_type == 2 else sample

    def pointers_last(mutations):
        """Relabelling first, then counts, then pointers (which depend on the label)."""
        def rank(mutation):
            target, change = mutation
            if target == "device":
                return 0
            return 2 if target == "array" and change[0] == "buffer" else 1
        return sorted(mutations, key=rank)

    def run_array_case(case, counted):
        data = labelled(case, None)
        if case["entry"] == "import_record_batch":
            data = pa.record_batch([data], names=["c"])
        schema_capsule, array_capsule = cdi.DeviceData(data).__arrow_c_device_array__()
        schema = moved_from_capsule(schema_capsule, ArrowSchema)
        device_array = moved_from_capsule(array_capsule, ArrowDeviceArray)
        labelled(case, device_array)
        counted.schema(schema, "schema")
        counted.array(device_array, "array")
        swap = False
        n_buffers = device_array.array.n_buffers
        for target, change in pointers_last(case["mutations"]):
            if target in ("array", "device"):
                mutate_array(device_array, *change, n_buffers, counted.keep, case["sample"])
            elif target == "schema":
                set_count(schema, *change, counted.keep)
            elif target == "released":
                # A released struct is handed over: the producer releases it itself.
                struct = device_array.array if change == "array" else schema
                if struct.release:
                    struct.release(ctypes.pointer(struct))
            elif target == "swap_capsules":
                swap = True
        capsules = (in_new_capsule(schema), in_new_capsule(device_array))
        if swap:
            capsules = capsules[::-1]
        importer = cdi.import_array if case["entry"] == "import_array" \
            else cdi.import_record_batch
        result = importer(capsules)
        del capsules
        arrow_gpu.to_host(result)

    def run_stream_case(case, counted):
        table = pa.table({"c": labelled(case, None)})
        table = pa.concat_tables([table, table])
        capsule = cdi.DeviceData(table).__arrow_c_device_stream__()
        stream = moved_from_capsule(capsule, ArrowDeviceArrayStream)
        labelled(case, stream)
        address = ctypes.cast(stream.get_next, ctypes.c_void_p).value
        get_next = STREAM_GET_NEXT(address)
        get_schema = STREAM_GET_SCHEMA(ctypes.cast(stream.get_schema, ctypes.c_void_p).value)
        stream_release = STREAM_RELEASE(ctypes.cast(stream.release, ctypes.c_void_p).value)
        changes = [change for target, change in case["mutations"] if target == "stream"]
        array_changes = [change for target, change in pointers_last(case["mutations"])
                         if target in ("array", "device")]
        schema_changes = [change for target, change in case["mutations"] if target == "schema"]
        batches = [0]
        counted.calls["stream"] = 0

        @STREAM_GET_SCHEMA
        def hostile_get_schema(pointer, out):
            if "get_schema_fails" in changes:
                return 5  # EIO
            rc = get_schema(pointer, out)
            if rc == 0:
                counted.schema(out.contents, "schema")
                for field, value in schema_changes:
                    set_count(out.contents, field, value, counted.keep)
                if "null_format" in changes:
                    out.contents.format = None
            return rc

        @STREAM_GET_NEXT
        def hostile_get_next(pointer, out):
            batches[0] += 1
            if "get_next_fails" in changes or ("get_next_fails_later" in changes
                                               and batches[0] > 1):
                return 22  # EINVAL
            rc = get_next(pointer, out)
            if rc == 0 and out.contents.array.release:
                labelled(case, out.contents)
                counted.array(out.contents, f"batch {batches[0]}")
                if batches[0] == 1:
                    n_buffers = out.contents.array.n_buffers
                    for change in array_changes:
                        mutate_array(out.contents, *change, n_buffers, counted.keep,
                                     case["sample"])
            return rc

        @STREAM_RELEASE
        def counted_release(pointer):
            counted.calls["stream"] += 1
            pointer.contents.get_schema = get_schema
            pointer.contents.get_next = get_next
            pointer.contents.release = stream_release
            stream_release(pointer)

        stream.get_schema, stream.get_next = hostile_get_schema, hostile_get_next
        stream.release = counted_release
        counted.keep.extend([hostile_get_schema, hostile_get_next, counted_release])
        capsule = in_new_capsule(stream)
        if case["entry"] == "import_stream":
            arrow_gpu.to_host(cdi.import_stream(capsule))
        else:
            _, reader = cdi.iter_stream(capsule)
            for batch in reader:
                arrow_gpu.to_host(batch)

    def run_case(case):
        print(case, file=sys.stderr, flush=True)  # the last line names a crashing case
        counted = Counted()
        try:
            if case["entry"] in ("import_stream", "iter_stream"):
                run_stream_case(case, counted)
            else:
                run_array_case(case, counted)
            outcome = "imported"
        except Exception as error:  # noqa: BLE001 - every clean refusal counts
            outcome = f"clean error: {type(error).__name__}"
            del error
        gc.collect()
        # Structs released before the hand-over were released once, by the producer.
        for name, calls in counted.calls.items():
            if calls != 1:
                return f"released {calls} times: {name} ({case['entry']}): {case}"
        return outcome

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(case=cases)
    def campaign(case):
        outcomes[run_case(case)] += 1

    campaign()
    return outcomes


def run_campaign(cases, batch=500, seed=0, timeout=600, workers=None):
    """Runs ``cases`` in child processes of ``batch`` cases, one entry point each, in turn,
    at most ``workers`` (default: the CPU count) at once; returns {outcome: count} (see
    _campaign: a child that dies counts its whole batch as a crash)."""
    return _campaign.run_batches(
        [([__file__, "--batch", str(min(batch, cases - index)), "--seed", str(seed + index),
           "--entry", ENTRIES[number % len(ENTRIES)]], min(batch, cases - index))
         for number, index in enumerate(range(0, cases, batch))],
        workers=workers, timeout=timeout)


def failures(totals):
    """{outcome: count} of the crashes and of the structs not released exactly once."""
    return {outcome: count for outcome, count in totals.items()
            if count and (outcome == CRASH or outcome.startswith("released"))}


def summary(totals):
    """One line of counts: cases, clean errors, imports, crashes, release failures."""
    clean = sum(count for outcome, count in totals.items() if outcome.startswith("clean"))
    return (f"interchange fuzz: {sum(totals.values())} cases, {clean} clean errors, "
            f"{totals['imported']} imported, {totals[CRASH]} crashes, "
            f"{sum(failures(totals).values()) - totals[CRASH]} structs not released exactly once")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--entry", choices=ENTRIES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch is not None:
        print(json.dumps(_run_batch(args.seed, args.batch, args.entry)))
        return 0
    totals = run_campaign(args.cases, seed=args.seed)
    return _campaign.report(sys.modules[__name__], totals)


if __name__ == "__main__":
    sys.exit(main())
