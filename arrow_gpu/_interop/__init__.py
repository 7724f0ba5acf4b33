"""Foreign arrays and libraries met on their terms: the CUDA array interface's and DLPack's
protocols as data, the one importer of foreign arrays, and the ``pyarrow.cuda`` shim."""
