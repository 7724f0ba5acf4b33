"""Device compute beneath ``arrow_gpu.compute``: Arrow layouts as the kernels see them, plans
of many copies, take and concatenation by type, and the kernels (``kernels.cu``), compiled
at run time and launched."""
