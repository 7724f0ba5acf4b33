# C structs handed out and taken in through PyCapsules (the C Device Data Interface's and
# DLPack's): their zeroed allocation, and the checked pointer of a capsule of a given name.

from cpython.pycapsule cimport (PyCapsule_CheckExact, PyCapsule_GetName, PyCapsule_GetPointer,
                                PyCapsule_IsValid)
from libc.stdlib cimport calloc


cdef void* _zeroed(size_t size) except NULL:
    cdef void* memory = calloc(1, size)
    if memory == NULL:
        raise MemoryError(f"cannot allocate {size} bytes for the C struct of a capsule")
    return memory


cdef void* _capsule_pointer(object capsule, const char* name) except NULL:
    """The pointer of a capsule that must be named ``name``."""
    if not PyCapsule_CheckExact(capsule):
        raise TypeError(f"expected a PyCapsule named {name.decode()!r}, got "
                        f"'{type(capsule).__name__}'")
    if not PyCapsule_IsValid(capsule, name):
        found = PyCapsule_GetName(capsule)
        raise ValueError(f"expected a capsule named {name.decode()!r}, got "
                         f"{None if found == NULL else found.decode(errors='replace')!r}")
    return PyCapsule_GetPointer(capsule, name)
