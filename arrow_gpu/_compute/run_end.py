"""Run-end encoded arrays on the device: the run of each row, their nulls, and their
concatenation.

A row's run is found by a binary search of the run ends (``ag_run_of_rows``), for all rows
at once; which rows are null follows from the runs' values. Concatenation keeps the parts'
runs as they are (as pyarrow does, without merging equal neighbours): each part's runs, cut
to its rows, with their ends moved to where the part lands.

pyarrow.compute has no take, filter nor fill_null of run-end encoded data; those stay
refused here too (``no_run_end_encoded``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Optional

import numpy as np
import pyarrow as pa

from arrow_gpu._compute import kernels
from arrow_gpu._compute.copy_plan import CopyPlan, starts
from arrow_gpu._compute.layouts import Build, address, empty, own_buffer


def run_of_rows(k: kernels.DeviceKernels, array: pa.Array) -> pa.Buffer:
    """The run (int64 position in ``array.values``) of each of ``array``'s rows."""
    n = len(array)
    run_ends = array.run_ends
    width = run_ends.type.bit_width // 8
    out = k.alloc(8 * n)
    k.run_of_rows(out.address, address(own_buffer(run_ends, 1)) + run_ends.offset * width,
                  width, len(run_ends), 0, array.offset, n)
    return out


def validity(k: kernels.DeviceKernels, array: pa.Array) -> Optional[pa.Buffer]:
    """The bits of ``array``'s rows whose value is valid by the values' own bitmap, as
    pyarrow's is_valid reads run-end encoded data; None for all valid."""
    values = array.values
    n = len(array)
    bits = own_buffer(values, 0)  # none for values of the null type: pyarrow reads them valid
    if bits is None:
        return None
    runs = run_of_rows(k, array)
    out = k.alloc((n + 7) // 8)
    k.gather_bits(out.address, bits.address, values.offset, runs.address, n)
    return out


def concat(plan: CopyPlan, parts: Sequence[pa.Array],
           concat_values: Callable[[CopyPlan, Sequence[pa.Array]], Build]) -> Build:
    """Run-end encoded ``parts`` end to end, planned in ``plan``; ``concat_values`` plans
    the concatenation of the values of their runs."""
    k = plan.k
    type = parts[0].type
    run_end_type = type.run_end_type
    width = run_end_type.bit_width // 8
    lengths = np.array([len(part) for part in parts], np.int64)
    total = int(lengths.sum())
    largest = 2 ** (8 * width - 1) - 1
    if total > largest:
        raise OverflowError(f"the concatenated {type} data has {total} rows, more than its "
                            f"{run_end_type} run ends reach ({largest}): cast the parts to "
                            "run_end_encoded with int32 or int64 run ends first")
    valued = [i for i, length in enumerate(lengths.tolist()) if length]
    # The runs of each valued part's first and last row, read before the copies are planned.
    found = k.alloc(16 * len(valued))
    rows = k.alloc(16 * len(valued))
    k.write(rows.address, np.array([[0, lengths[i] - 1] for i in valued],
                                   np.int64).tobytes())
    for slot, i in enumerate(valued):
        run_ends = parts[i].run_ends
        k.run_of_rows(found.address + 16 * slot,
                      address(own_buffer(run_ends, 1)) + run_ends.offset * width, width,
                      len(run_ends), rows.address + 16 * slot, parts[i].offset, 2)
    if not valued:
        return lambda: empty(k.context, type, k.stream)
    held = [rows, found]  # until the plan read them
    built: list[tuple[pa.Array, Build]] = []

    def plan_copies(data: bytes) -> None:
        held.clear()
        bounds = np.frombuffer(data, np.int64).reshape(-1, 2)
        first, counts = bounds[:, 0], bounds[:, 1] - bounds[:, 0] + 1
        out_runs = starts(counts)
        runs_total = int(counts.sum())
        ends = k.alloc(width * runs_total)
        positions = starts(lengths)[valued]
        for slot, i in enumerate(valued):
            part = parts[i]
            run_ends = part.run_ends
            at = ends.address + width * int(out_runs[slot])
            count = int(counts[slot])
            # Every run but the last ends where it did, moved with the part; the last at
            # the part's end (it may run past it).
            plan.rebase(at, address(own_buffer(run_ends, 1))
                        + (run_ends.offset + int(first[slot])) * width, count - 1, width,
                        int(positions[slot]) - part.offset)
            plan.rebase(at + width * (count - 1), plan.constant(bytes(width)), 1, width,
                        int(positions[slot] + lengths[i]))
        values = concat_values(plan, [parts[i].values.slice(int(first[slot]), int(counts[slot]))
                                      for slot, i in enumerate(valued)])
        built.append((pa.Array.from_buffers(run_end_type, runs_total, [None, ends], 0),
                      values))

    plan.read_first(np.array([found.address], np.int64), np.array([16 * len(valued)], np.int64),
                    plan_copies)

    def build() -> pa.Array:
        ends, values = built[0]
        return pa.Array.from_buffers(type, total, [None], 0, children=[ends, values()])

    return build
