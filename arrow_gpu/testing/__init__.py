"""Testing helpers for Arrow data: Hypothesis strategies and settings profiles.

Pure pyarrow: importing :mod:`arrow_gpu.testing.strategies` or
:mod:`arrow_gpu.testing.profiles` needs no GPU.
"""
