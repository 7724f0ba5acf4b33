"""Mutated Arrow IPC messages, streams and files read from device memory: a clean
exception or what host pyarrow reads, never a crash. The cases run in child processes
(tests/_ipc_fuzz.py), so that a crash is a failed test, not a dead test run."""

import pytest

import _campaign
import _ipc_fuzz


def test_ipc_fuzz_fast_subset():
    totals = _campaign.checked_run(_ipc_fuzz, cases=400, batch=100)
    assert totals["equal result"] > 0 and totals["clean error: ArrowNotImplementedError"] > 0


@pytest.mark.campaign
@pytest.mark.timeout(0)  # its child processes have their own limits
def test_ipc_fuzz_campaign():
    _campaign.checked_run(_ipc_fuzz, cases=15_000, batch=250)
