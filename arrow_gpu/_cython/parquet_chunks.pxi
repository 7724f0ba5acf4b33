# Column chunks of a Parquet file read onto the device a piece at a time, included into
# _cuda.pyx.
#
# libparquet (pyarrow's Parquet reader, which libarrow_python links) decodes a chunk
# ``batch_rows`` rows at a time and the copy engine copies each piece as soon as it is
# decoded, all on the calling thread with the GIL released: the pieces cost no interpreter
# work between them, and the host holds one at a time. arrow_gpu/loading.py drives it.

from libcpp.utility cimport move

from pyarrow.includes.libparquet cimport (ArrowReaderProperties, CFileMetaData,
                                          FileReaderBuilder, SchemaDescriptor,
                                          default_arrow_reader_properties,
                                          default_reader_properties)
from pyarrow.lib cimport MemoryPool, pyarrow_wrap_batch


cdef class _StopFlag:
    """A flag that stops column-chunk reads between two pieces once set (a
    ``threading.Event``'s ``set`` and ``is_set``, readable without the GIL)."""

    def __cinit__(self):
        self.flag.store(False)

    def set(self):
        self.flag.store(True)

    def is_set(self):
        return self.flag.load()


cdef class _ColumnChunkReader:
    """A Parquet file opened with libparquet's default reader options, those of
    ``pyarrow.dataset``'s default Parquet format (``pyarrow.parquet.ParquetFile`` enables
    Arrow extension types, the scan does not), decoding into ``pool``.

    Use it from one thread at a time.
    """

    def __init__(self, NativeFile source not None, MemoryPool pool not None):
        cdef FileReaderBuilder builder
        cdef shared_ptr[CRandomAccessFile] file = source.get_random_access_file()
        cdef ArrowReaderProperties properties = default_arrow_reader_properties()
        cdef shared_ptr[CFileMetaData] read_from_file
        with nogil:
            check_status(builder.Open(file, default_reader_properties(), read_from_file))
            check_status(builder.memory_pool(pool.pool).properties(properties)
                         .Build(&self.reader))
        self.source = source
        self.reader.get().set_use_threads(False)  # a column chunk decodes on one thread
        cdef const SchemaDescriptor* schema = \
            self.reader.get().parquet_reader().metadata().get().schema()
        # Each leaf column's path of names, from its top-level field down.
        self.column_paths = [[name.decode() for name in
                              schema.Column(index).path().get().ToDotVector()]
                             for index in range(schema.num_columns())]

    def to_device(self, int row_group, leaves, int64_t batch_rows, Context ctx not None,
                  _StopFlag stop not None):
        """The pieces of one column of ``row_group`` (the top-level field whose leaf
        columns are ``leaves``), ``batch_rows`` rows each as the dataset's scan cuts them,
        each copied to ``ctx``'s device as soon as it is decoded: a list of device arrays;
        those copied by then if ``stop`` is set meanwhile.
        """
        cdef vector[int] row_groups = [row_group]
        cdef vector[int] columns = leaves
        cdef unique_ptr[CRecordBatchReader] pieces
        cdef vector[shared_ptr[CRecordBatch]] copies
        self.reader.get().set_batch_size(batch_rows)
        with nogil:
            pieces = move(GetResultValue(self.reader.get().GetRecordBatchReader(row_groups,
                                                                                columns)))
            copies = GetResultValue(ReadToDevice(deref(pieces), ctx.manager, stop.flag))
        return [pyarrow_wrap_batch(batch).column(0) for batch in copies]
