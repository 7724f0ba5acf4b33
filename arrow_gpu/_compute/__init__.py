"""Device compute beneath ``arrow_gpu.compute``: Arrow layouts as the kernels see them, plans
of many copies, take and concatenation by type, and the kernels (the ``*.cu`` units), compiled
at run time and launched."""
