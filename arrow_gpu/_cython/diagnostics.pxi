# Facts about the driver and the devices: whether the simulator stands in for the driver,
# the driver's CUDA version and each device's description (for `python -m arrow_gpu`).


def using_simulator():
    """Whether the host simulator (``ARROW_GPU_SIMULATOR=1``) stands in for the driver.

    Returns
    -------
    bool
        True when the simulator is on, False when the CUDA driver is used.

    Raises
    ------
    pyarrow.ArrowInvalid
        If ``ARROW_GPU_SIMULATOR`` is set to a value that is not a switch (1, true, yes,
        on, or 0, false, no, off).

    Examples
    --------
    >>> import os
    >>> using_simulator() == (os.environ.get("ARROW_GPU_SIMULATOR") == "1")
    True
    """
    return GetResultValue(UsingSimulator())


def _simulated_context_synchronizations():
    """How many times a whole context was synchronized under the simulator so far."""
    return SimulatorContextSynchronizations()


def _simulated_device_reads():
    """How many device-to-host copies the simulator made so far."""
    return SimulatorDeviceReads()


def _simulated_stream_synchronizations():
    """How many times the simulator synchronized a stream so far."""
    return SimulatorStreamSynchronizations()


def _simulated_stream_waits():
    """How many times the simulator made a stream wait for an event so far."""
    return SimulatorStreamWaits()


def _simulated_live_streams():
    """How many streams exist under the simulator now."""
    return SimulatorLiveStreams()


def _simulated_legacy_stream_uses():
    """How many calls under the simulator used the legacy default stream so far."""
    return SimulatorLegacyStreamUses()


def _simulate_busy_legacy_stream(busy):
    """Under the simulator, hold the legacy default stream busy (its events not passed), as
    another library's blocking stream would, or let it go."""
    SimulatorHoldLegacyStream(bool(busy))


def _simulated_launches(name):
    """How many times the simulator launched the kernel named ``name`` so far."""
    return SimulatorLaunches(name.encode())


def _driver_cuda_version():
    """The driver's CUDA version as (major, minor), or None when it cannot say (simulator)."""
    cdef int version = GetResultValue(DriverCudaVersion())
    return (version // 1000, version % 1000 // 10) if version else None


def _describe_device(int ordinal):
    """Name, total memory and peers (devices it can access directly) of one device."""
    cdef CDeviceDescription description = GetResultValue(DescribeDevice(ordinal))
    return {
        "name": description.name.decode(errors="replace"),
        "total_memory": description.total_memory,
        "peers": list(description.peers),
    }
