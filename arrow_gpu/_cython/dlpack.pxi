# DLPack capsules (the unversioned DLManagedTensor, which every consumer accepts), made and
# consumed here so that no Python code handles raw structs. Included in _cuda.pyx.

from cpython.pycapsule cimport (PyCapsule_CheckExact, PyCapsule_GetPointer, PyCapsule_IsValid,
                                PyCapsule_New, PyCapsule_SetName)
from cpython.ref cimport Py_INCREF, Py_XDECREF, PyObject
from libc.stdlib cimport free


cdef struct _ExportedTensor:
    DLManagedTensor managed
    int64_t shape[1]
    PyObject* owner  # keeps the exported memory alive until the consumer deletes the tensor


cdef void _delete_exported_tensor(DLManagedTensor* managed) noexcept with gil:
    cdef _ExportedTensor* exported = <_ExportedTensor*>managed.manager_ctx
    Py_XDECREF(exported.owner)
    free(exported)


cdef void _release_dltensor_capsule(object capsule) noexcept:
    # A consumer renames the capsule to "used_dltensor" and then owns the tensor.
    cdef DLManagedTensor* managed
    if PyCapsule_IsValid(capsule, "dltensor"):
        managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
        managed.deleter(managed)


def _dlpack_capsule(owner, uintptr_t address, int64_t length, int code, int bits,
                    int device_id):
    """A ``dltensor`` capsule of a 1-D CUDA array; ``owner`` lives until it is deleted."""
    cdef _ExportedTensor* exported = <_ExportedTensor*>_zeroed(sizeof(_ExportedTensor))
    exported.shape[0] = length
    cdef DLTensor* tensor = &exported.managed.dl_tensor
    tensor.data = <void*>address
    tensor.device.device_type = kDLCUDA
    tensor.device.device_id = device_id
    tensor.ndim = 1
    tensor.dtype.code = code
    tensor.dtype.bits = bits
    tensor.dtype.lanes = 1
    tensor.shape = exported.shape
    exported.managed.manager_ctx = exported
    exported.managed.deleter = _delete_exported_tensor
    Py_INCREF(owner)
    exported.owner = <PyObject*>owner
    try:
        return PyCapsule_New(&exported.managed, "dltensor", _release_dltensor_capsule)
    except BaseException:
        _delete_exported_tensor(&exported.managed)
        raise


cdef class _DLPackTensor:
    """A consumed DLPack tensor; its producer's deleter runs when this object goes."""

    def __init__(self, capsule):
        if not PyCapsule_CheckExact(capsule) or not PyCapsule_IsValid(capsule, "dltensor"):
            raise ValueError("expected an unconsumed 'dltensor' capsule")
        self.managed = <DLManagedTensor*>PyCapsule_GetPointer(capsule, "dltensor")
        PyCapsule_SetName(capsule, "used_dltensor")  # from now on the tensor is ours

    def __dealloc__(self):
        if self.managed != NULL and self.managed.deleter != NULL:
            self.managed.deleter(self.managed)

    @property
    def address(self):
        """The address of the first element (byte_offset applied)."""
        return <uintptr_t>self.managed.dl_tensor.data + self.managed.dl_tensor.byte_offset

    @property
    def dtype(self):
        """(type code, bits, lanes)."""
        cdef DLDataType dtype = self.managed.dl_tensor.dtype
        return (dtype.code, dtype.bits, dtype.lanes)

    @property
    def shape(self):
        cdef DLTensor* tensor = &self.managed.dl_tensor
        return tuple(tensor.shape[i] for i in range(tensor.ndim))

    @property
    def strides(self):
        """Strides in elements, or None for a compact row-major tensor."""
        cdef DLTensor* tensor = &self.managed.dl_tensor
        if tensor.strides == NULL:
            return None
        return tuple(tensor.strides[i] for i in range(tensor.ndim))
