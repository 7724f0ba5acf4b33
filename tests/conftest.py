"""Fixtures and markers shared by the whole suite.

The same tests run on a real GPU and, in CI, on the host simulator
(ARROW_GPU_SIMULATOR=1); tests marked ``gpu`` need what the simulator cannot give (Numba's
CUDA array interface and memory-manager plugin) and are skipped there.
"""

import pytest

import arrow_gpu
from arrow_gpu import _cuda
from arrow_gpu.testing import profiles
from _leaks import gives_back, released

profiles.load_profile()


def pytest_collection_modifyitems(config, items):
    simulated = arrow_gpu.using_simulator()
    devices = arrow_gpu.device_count()
    campaign = "campaign" in (config.getoption("-m") or "")
    for item in items:
        if "campaign" in item.keywords and not campaign:
            item.add_marker(pytest.mark.skip(reason="the long campaign: run with -m campaign"))
        if simulated and "gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason="needs a real GPU (simulator in use)"))
        if devices < 2 and "multi_gpu" in item.keywords:
            item.add_marker(pytest.mark.skip(reason=f"needs two devices, {devices} present"))


@pytest.fixture
def ctx():
    """The primary context of device 0; the test must give back every byte it allocated."""
    context = arrow_gpu.Context(0)
    with gives_back(lambda: context.bytes_allocated, "device memory leaked by the test"):
        yield context


@pytest.fixture
def nothing_left_exported():
    """Checks that every struct the C device interface exported was released."""
    yield
    assert released(_cuda._live_exports), "an exported struct was never released"


@pytest.fixture
def ctx1():
    """The primary context of device 1 (tests using it must be marked multi_gpu)."""
    return arrow_gpu.Context(1)
