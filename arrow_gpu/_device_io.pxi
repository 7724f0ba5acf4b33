# Device IO (BufferReader, BufferWriter, IPC messages on the device), included into _cuda.pyx.
