"""Plain Python that imports nothing else of arrow_gpu: argument checks, driver handles, the
shapes of pyarrow data, an ordered thread map, and the build's record and its check."""
