"""Mutated Arrow IPC messages, streams and files read from device memory: a clean
exception or what host pyarrow reads, never a crash. The cases run in child processes
(tests/_ipc_fuzz.py), so that a crash is a failed test, not a dead test run."""

import os
import sys

import pytest


def _run_campaign(cases, batch):
    sys.path.insert(0, os.path.dirname(__file__))
    try:
        import _ipc_fuzz
    finally:
        sys.path.pop(0)
    totals = _ipc_fuzz.run_campaign(cases, batch=batch)
    print(_ipc_fuzz.summary(totals))
    assert not totals[_ipc_fuzz.CRASH] and not totals[_ipc_fuzz.WRONG], totals
    assert sum(totals.values()) == cases
    return totals


def test_ipc_fuzz_fast_subset():
    totals = _run_campaign(cases=400, batch=100)
    assert totals["equal result"] > 0 and totals["clean error: ArrowNotImplementedError"] > 0


@pytest.mark.campaign
@pytest.mark.timeout(0)  # its child processes have their own limits
def test_ipc_fuzz_campaign():
    _run_campaign(cases=15_000, batch=250)
