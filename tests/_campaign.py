"""Runs a fuzzer's batches in child processes, several at once, and adds up their outcomes.

A batch is a fuzzer script run with its arguments; it prints, as the last line of its
output, a JSON object {outcome: count}. A child that dies (a crash, an abort, a timeout's
kill) counts its whole batch as a crash, with the end of its error output, where fuzzers
name the case they are running, so the crashing case can be replayed.
"""

import collections
import concurrent.futures
import json
import os
import subprocess
import sys

CRASH = "crash"


def _run(argv, count, timeout):
    # With faulthandler, a child that dies of a signal (glibc's abort on a corrupt heap
    # included) prints where: the call it died in, not just the case it was running, which
    # tells a case that corrupts the heap from a later one that finds it corrupt.
    child = subprocess.run([sys.executable, "-X", "faulthandler", *argv], capture_output=True,
                           text=True, timeout=timeout, env=dict(os.environ))
    if child.returncode != 0 or not child.stdout.strip():
        return {CRASH: count, f"{CRASH} output: rc {child.returncode} {child.stderr[-4000:]}": 0}
    return json.loads(child.stdout.strip().splitlines()[-1])


def run_batches(batches, workers=None, timeout=600):
    """{outcome: count} of ``batches``, (argv, case count) pairs, at most ``workers`` (default:
    the CPU count) running at once."""
    total = collections.Counter()
    with concurrent.futures.ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool:
        for outcome in pool.map(lambda batch: _run(*batch, timeout), batches):
            total.update(outcome)
    return total


def run_seeded_batches(script, cases, batch, seed=0, workers=None, timeout=600):
    """{outcome: count} of ``cases`` run by ``script`` (a fuzzer taking ``--batch`` and
    ``--seed``) in child processes of ``batch`` cases, each seeded by its first case's number
    (see ``run_batches``)."""
    return run_batches(
        [([script, "--batch", str(min(batch, cases - start)), "--seed", str(seed + start)],
          min(batch, cases - start)) for start in range(0, cases, batch)],
        workers=workers, timeout=timeout)


def counted(totals, *outcomes):
    """{outcome: count} of ``totals`` for ``outcomes`` that happened."""
    return {outcome: count for outcome, count in totals.items()
            if count and outcome in outcomes}


def main(fuzzer, cases):
    """The command line of a fuzzer whose batches take a seed and a count: ``--cases``
    (default ``cases``), ``--seed``, ``--workers``; returns its exit status."""
    import argparse

    parser = argparse.ArgumentParser(description=fuzzer.__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=cases)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.batch is not None:
        print(json.dumps(fuzzer._run_batch(args.seed, args.batch)))
        return 0
    totals = fuzzer.run_campaign(args.cases, seed=args.seed, workers=args.workers)
    return report(fuzzer, totals)


def report(fuzzer, totals):
    """Prints the count of every outcome and ``fuzzer``'s summary line; returns the exit
    status of a campaign run from the command line (1 if anything failed)."""
    for outcome, count in sorted(totals.items()):
        print(f"{count:8d}  {outcome}")
    print(fuzzer.summary(totals))
    return 1 if fuzzer.failures(totals) else 0


def checked_run(fuzzer, cases, batch, at_least=None):
    """Runs ``fuzzer``'s campaign (a module with ``run_campaign``, ``summary`` and
    ``failures``) for a test: prints its summary line, and fails on any failure (a crash, a
    wrong result, a struct not released exactly once) or on fewer cases than ``at_least``
    (default: all of them) having run. Returns {outcome: count}."""
    totals = fuzzer.run_campaign(cases, batch=batch)
    print(fuzzer.summary(totals))
    assert not fuzzer.failures(totals), totals
    assert sum(totals.values()) >= (cases if at_least is None else at_least), totals
    return totals
