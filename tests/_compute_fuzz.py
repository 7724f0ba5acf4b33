"""A differential fuzzer of arrow_gpu.compute against pyarrow.compute on the host.

Each case draws data from arrow_gpu.testing.strategies (an Array, a ChunkedArray, a
RecordBatch or a Table, of any type family, nested up to depth 3), moves it to the device,
and runs one compute function (take, filter, is_valid, is_null, null_count, drop_null,
fill_null, slice, concat, combine_chunks) there, on the legacy default stream or on a
non-blocking stream of its own, and pyarrow's own on the host. Outcomes:
an equal result (valid after to_host, as ``validate(full=True)`` sees it); both refusing;
a documented gap of the kernels (NotImplementedError naming it); a result pyarrow cannot
compute itself (checked for validity and rows); a wrong result; a crash. On the simulator,
a call given its own stream is wrong too where it used the legacy default stream (held
busy meanwhile, as another library's blocking stream would hold it), which waits for every
blocking stream of every library.

On a GPU the kernels run; on the simulator their host twins run in their place.
Cases run in batches in child processes, so that a crash is a counted failure:

    python tests/_compute_fuzz.py --cases 20000          # the long campaign
"""

import collections
import os
import sys

import _campaign
from _campaign import CRASH

WRONG = "wrong result"
EQUAL = "equal result"
BOTH_REFUSE = "both refuse"
GAP = "documented gap"
DEVICE_ONLY = "device only"
PYARROW_CANNOT = "cannot be viewed as non-nullable"
FUNCTIONS = ("take", "filter", "is_valid", "is_null", "null_count", "drop_null",
             "fill_null", "slice", "concat", "combine_chunks")
OF_ONE_COLUMN = {"is_valid", "is_null", "null_count", "fill_null"}
# What the kernels do not do yet, and say so (pyarrow does them on the host): fill_null of
# types that hold run-end encoded data (pyarrow fills a struct of it, say).
GAPS = ("run-end encoded", "run_end_encoded")


def _case_runner():
    """The function that runs one drawn case, and its outcomes; imports what a batch needs."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import pyarrow as pa
    import pyarrow.compute as pc
    from hypothesis import strategies as st

    import arrow_gpu
    from arrow_gpu import _cuda, compute
    from arrow_gpu.testing import strategies as ags
    from arrow_gpu.transfer import to_device, to_host
    from _arrow_samples import same_rows
    from _compute_helpers import rows_only, with_a_chunk

    ags.register_extension_types()
    types = ags.data_types(exclude=ags.OPAQUE_FAMILIES, max_depth=3)
    outcomes = collections.Counter()
    own_stream = arrow_gpu.Stream(arrow_gpu.Context(0), non_blocking=True)

    def draw_data(draw, kind):
        options = dict(special_floats=False)
        if kind == "array":
            return draw(ags.arrays(types, max_size=12, **options))
        if kind == "chunked":
            return draw(ags.chunked_arrays(types, max_size=12, **options))
        schema = ags.schemas(types, max_columns=3)
        if kind == "batch":
            return draw(ags.record_batches(schema, max_size=8, **options))
        table = draw(ags.tables(schema, max_size=8, **options))
        if table.num_columns == 0:  # tables() gives those no rows; batches do
            table = pa.Table.from_batches([rows_only(draw(st.integers(0, 4)), table.schema)])
        return table

    def rows(data):
        return len(data) if isinstance(data, (pa.Array, pa.ChunkedArray)) else data.num_rows

    def on_host(function, host, *args):
        """pyarrow's result; a table without columns goes as a batch (pyarrow's Table.take,
        slice and concat_tables miscount its rows), a ChunkedArray without chunks as one
        of an empty chunk (pyarrow 25's filter of one that holds maps aborts)."""
        if isinstance(host, pa.Table) and host.num_columns == 0:
            batch = function(rows_only(host.num_rows, host.schema), *args)
            return pa.Table.from_batches([batch])
        return function(with_a_chunk(host), *args)

    def plan(draw, host):
        """(device function of device data and a stream, host function of host data),
        drawn."""
        one_column = isinstance(host, (pa.Array, pa.ChunkedArray))
        name = draw(st.sampled_from([f for f in FUNCTIONS
                                     if one_column or f not in OF_ONE_COLUMN]))
        n = rows(host)
        if name == "take":
            positions = st.integers(0, n - 1) if n else st.nothing()
            indices = pa.array(draw(st.lists(st.none() | positions, max_size=12)), pa.int64())
            return (name, lambda d, s: compute.take(d, to_device(indices, stream=s), stream=s),
                    lambda h: on_host(lambda x: pc.take(x, indices), h))
        if name == "filter":
            mask = draw(ags.arrays(pa.bool_(), size=n))
            behavior = draw(st.sampled_from(["drop", "emit_null"]))
            return (name, lambda d, s: compute.filter(d, to_device(mask, stream=s),
                                                      null_selection_behavior=behavior,
                                                      stream=s),
                    lambda h: on_host(lambda x: pc.filter(x, mask,
                                                          null_selection_behavior=behavior), h))
        if name == "slice":
            offset, length = draw(st.integers(0, n + 1)), draw(st.none() | st.integers(0, n + 1))
            return (name, lambda d, s: compute.slice(d, offset, length, stream=s),
                    lambda h: on_host(lambda x: x.slice(offset, length), h))
        if name == "concat":
            cut = draw(st.integers(0, n))
            return (name, lambda d, s: compute.concat([d, compute.slice(d, cut, stream=s), d],
                                                      stream=s),
                    lambda h: _concat_on_host([h, on_host(lambda x: x.slice(cut), h), h]))
        if name == "combine_chunks":
            return (name, lambda d, s: compute.combine_chunks(d, stream=s),
                    lambda h: h.combine_chunks() if hasattr(h, "combine_chunks") else h)
        if name == "fill_null":
            parts = host.chunks if isinstance(host, pa.ChunkedArray) else [host]
            values = [value for part in parts for value in part if value.is_valid]
            fill = draw(st.sampled_from(values)) if values else pa.nulls(1, host.type)[0]
            # pyarrow widens decimal32/64 to decimal128 here; arrow_gpu keeps the type.
            return (name, lambda d, s: compute.fill_null(d, fill, stream=s),
                    lambda h: pc.fill_null(h, fill).cast(h.type))
        if name == "drop_null":
            return (name, lambda d, s: compute.drop_null(d, stream=s),
                    lambda h: _typed_like(pc.drop_null(h), h))
        return (name, lambda d, s: getattr(compute, name)(d, stream=s),
                lambda h: h.null_count if name == "null_count" else getattr(pc, name)(h))

    def _typed_like(result, host):
        """``result`` in ``host``'s types: pyarrow 25's drop_null makes a dictionary's
        unsigned indices signed where every row drops (pyarrow 26 keeps them)."""
        shape = "schema" if isinstance(host, (pa.RecordBatch, pa.Table)) else "type"
        if getattr(result, shape) == getattr(host, shape):
            return result
        return result.cast(getattr(host, shape))

    def _concat_on_host(parts):
        if isinstance(parts[0], pa.Table):
            if parts[0].num_columns == 0:
                return pa.Table.from_batches([rows_only(sum(p.num_rows for p in parts),
                                                        parts[0].schema)])
            return pa.concat_tables(parts).combine_chunks()
        if isinstance(parts[0], pa.RecordBatch):
            return pa.concat_batches(parts)
        chunks = [chunk for part in parts
                  for chunk in (part.chunks if isinstance(part, pa.ChunkedArray) else [part])]
        return pa.chunked_array(chunks, type=parts[0].type).combine_chunks()

    def same(got, expected):
        if isinstance(expected, int):
            return got == expected
        back = to_host(got)
        back.validate(full=True)
        if type(back) is not type(expected) and not (
                isinstance(back, pa.Array) and isinstance(expected, pa.Array)):
            return False
        if rows(back) != rows(expected):
            return False
        if isinstance(back, (pa.RecordBatch, pa.Table)) and back.num_columns == 0:
            return back.schema.equals(expected.schema)
        return same_rows(back, expected)

    def call_on(stream, on_device, data):
        """``on_device(data, stream)``'s result or exception, and how many times it used the
        legacy default stream (held busy while a call has a stream of its own)."""
        before = _cuda._simulated_legacy_stream_uses()
        _cuda._simulate_busy_legacy_stream(stream is not None)
        try:
            got, error = on_device(data, stream), None
        except Exception as raised:  # noqa: BLE001 - classified by the caller
            got, error = None, raised
        finally:
            _cuda._simulate_busy_legacy_stream(False)
        return got, error, _cuda._simulated_legacy_stream_uses() - before

    def run_case(draw, case):
        kind = draw(st.sampled_from(["array", "chunked", "batch", "table"]))
        host = draw_data(draw, kind)
        name, on_device, on_the_host = plan(draw, host)
        stream = own_stream if draw(st.booleans()) else None
        # The last line printed names a crashing case, to replay it.
        print(f"case {case}: {name} of {type(host).__name__} on stream {stream} "
              f"{getattr(host, 'type', getattr(host, 'schema', None))}", file=sys.stderr,
              flush=True)
        try:
            expected = on_the_host(host)
        except NotImplementedError:
            expected = None
        except pa.ArrowException as error:  # pyarrow refuses the input itself
            # ... or cannot compute it: pyarrow's fill_null views its result through
            # non-nullable fields and refuses where a valid input has nulls beneath them.
            expected = None if PYARROW_CANNOT in str(error) else error
        if isinstance(expected, (pa.Array, pa.ChunkedArray, pa.RecordBatch, pa.Table)):
            try:
                expected.validate(full=True)
            except pa.ArrowInvalid:  # pyarrow's own result (lists of extensions of views)
                expected = None  # the device's result must be valid at least
        got, error, legacy_uses = call_on(stream, on_device, to_device(host))
        if stream is not None and legacy_uses:
            outcomes[WRONG] += 1
            outcomes[f"{WRONG} example: {name} on its own stream used the legacy default "
                     f"stream {legacy_uses} times, of {host!r}"[:1500]] += 0
            return
        if isinstance(error, NotImplementedError):
            known = expected is None or any(gap in str(error) for gap in GAPS)
            outcomes[BOTH_REFUSE if expected is None else GAP if known else WRONG] += 1
            if not known:
                outcomes[f"{WRONG} example: {name} refused: {error}"[:1500]] += 0
            return
        if error is not None:  # a refusal where pyarrow refuses
            if isinstance(expected, Exception):
                outcomes[BOTH_REFUSE] += 1
                return
            outcomes[WRONG] += 1
            outcomes[f"{WRONG} example: {name}: {type(error).__name__}: {error}"[:1500]] += 0
            return
        if isinstance(expected, Exception):
            outcomes[WRONG] += 1
            outcomes[f"{WRONG} example: {name} gave a result where pyarrow raised "
                     f"{expected}"[:1500]] += 0
            return
        try:
            if expected is None:  # pyarrow cannot: the result must be valid at least
                to_host(got).validate(full=True)
                outcome, why = DEVICE_ONLY, ""
            else:
                outcome, why = (EQUAL, "") if same(got, expected) else (WRONG, "other values")
        except pa.ArrowInvalid as error:
            outcome, why = WRONG, f"invalid: {error}"
        outcomes[outcome] += 1
        if outcome == WRONG:
            outcomes[f"{WRONG} example: {name} ({why}) of {host!r}"[:1500]] += 0

    return run_case, outcomes


def _run_batch(seed, count):
    """Runs ``count`` cases in this process; returns {outcome: count}."""
    from hypothesis import HealthCheck, Phase, given, settings, strategies as st
    from hypothesis import seed as hypothesis_seed

    run_case, outcomes = _case_runner()

    @hypothesis_seed(seed)
    @settings(max_examples=count, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def campaign(data):
        run_case(data.draw, sum(outcomes.values()))

    campaign()
    return outcomes


def run_campaign(cases, batch=200, seed=0, timeout=600, workers=None):
    """Runs ``cases`` in child processes of ``batch`` cases, ``workers`` at a time (the CPU
    count by default); returns {outcome: count} (see _campaign)."""
    return _campaign.run_seeded_batches(os.path.abspath(__file__), cases, batch, seed,
                                        workers, timeout)


def failures(totals):
    """{outcome: count} of the crashes and wrong results."""
    return _campaign.counted(totals, CRASH, WRONG)


def summary(totals):
    """One line: cases by outcome."""
    return (f"compute fuzz: {sum(totals.values())} cases, {totals[EQUAL]} equal results, "
            f"{totals[BOTH_REFUSE]} refused by both, {totals[GAP]} documented gaps, "
            f"{totals[DEVICE_ONLY]} device only, {totals[CRASH]} crashes, "
            f"{totals[WRONG]} wrong results")


if __name__ == "__main__":
    sys.exit(_campaign.main(sys.modules[__name__], 20_000))
