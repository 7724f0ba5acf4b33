// The host simulator: one implementation of the driver table (driver.h), whose "device
// memory" is host memory. The loader chooses it; a device buffer that views host memory
// registers it here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "driver/driver.h"

namespace arrow_gpu {

// The simulator's table.
const DriverTable* SimulatorTable();

// Under the simulator, host memory that stands in for device memory in a view (copies may
// touch it, as they may any memory the simulator handed out), until forgotten.
void SimulatorAdopt(uintptr_t address, size_t nbytes);
void SimulatorForget(uintptr_t address, size_t nbytes);

// How many times a whole context was synchronized under the simulator, which waits for every
// stream of every library: tests hold the package to never doing it where it promises not to.
int64_t SimulatorContextSynchronizations();
// How many device-to-host copies the simulator made: each is a wait for the device, which
// tests count where a plan promises few.
int64_t SimulatorDeviceReads();
// How many times the simulator synchronized a stream: the other way a plan waits.
int64_t SimulatorStreamSynchronizations();
// How many times the simulator made a stream wait for an event (cuStreamWaitEvent): how work
// forked to another stream is ordered after the caller's, and joined back.
int64_t SimulatorStreamWaits();
// How many streams exist under the simulator (created, not yet destroyed).
int64_t SimulatorLiveStreams();
// How many calls under the simulator used the legacy default stream, which waits for every
// blocking stream of every library: synchronous copies, work queued there, and waits for
// it or for an event recorded there. Tests hold calls on a non-blocking stream to none.
int64_t SimulatorLegacyStreamUses();
// While held, events recorded on the legacy default stream have not passed (as while
// another library's blocking stream is busy): a caller that would wait for one is counted.
void SimulatorHoldLegacyStream(bool busy);
// How many times the simulator launched the kernel named `name`: tests count the launches
// of a plan that promises to batch its work.
int64_t SimulatorLaunches(const std::string& name);

}  // namespace arrow_gpu
