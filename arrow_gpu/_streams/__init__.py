"""Streams of batches moved between host and device: what moves them, and the decoders of the
IPC and Parquet files read onto the device."""
