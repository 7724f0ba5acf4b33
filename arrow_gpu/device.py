"""CUDA devices and contexts at the Python surface."""

from arrow_gpu._cuda import Context, using_simulator

__all__ = ["Context", "device_count", "using_simulator"]


def device_count() -> int:
    """The number of CUDA devices visible to this process (simulated ones under the simulator).

    >>> device_count() >= 1
    True
    """
    return Context.get_num_devices()
