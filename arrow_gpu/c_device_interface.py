"""Arrow's C Device Data Interface for CUDA data.

pyarrow's own exporter and importer already handle CUDA arrays once arrow_gpu has
registered its memory managers; this module adds what they lack.
"""
