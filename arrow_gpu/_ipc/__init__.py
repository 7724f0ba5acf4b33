"""Device memory and batches shared with other processes of this host: sealed records, the
bytes of an IPC memory handle, what an IPC message's metadata says, and the batch hand-off."""
