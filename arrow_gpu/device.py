"""CUDA devices and contexts at the Python surface."""

from arrow_gpu._cuda import Context, using_simulator

__all__ = ["Context", "device_count", "is_available", "using_simulator"]


def device_count() -> int:
    """The number of CUDA devices visible to this process (simulated ones under the simulator).

    Raises OSError when there is no driver and the simulator is off; see ``is_available``.

    >>> device_count() >= 1
    True
    """
    count: int = Context.get_num_devices()
    return count


def is_available() -> bool:
    """Whether a CUDA device can be used: a driver with a device, or the simulator.

    Unlike ``device_count`` it does not raise when there is no driver. A malformed
    ``ARROW_GPU_*`` environment variable still raises ``pyarrow.ArrowInvalid``: that is a
    mistake to fix, not an absent GPU.

    >>> is_available()
    True
    """
    try:
        return device_count() > 0
    except OSError:
        return False
