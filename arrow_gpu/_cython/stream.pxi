# Stream and Event: ordering work on the device; and the one conversion of every stream
# spelling (arrow_gpu._util.handles.stream_handle) into a CUstream.

cdef CUstream _raw_stream(stream) except? NULL:
    """The driver handle of a stream in any spelling ``stream_handle`` accepts (None: 0)."""
    return <CUstream><uintptr_t>stream_handle(stream)


cdef class Stream:
    """A CUDA stream: work on it runs in order, asynchronously to the host.

    ``Stream(context)`` creates one (owned, destroyed with this object);
    ``Stream.wrap(obj)`` borrows another library's stream without taking ownership.

    Parameters
    ----------
    context : Context, optional
        The context the stream belongs to; ``Context(0)`` if omitted.
    non_blocking : bool, default False
        Whether the stream runs without waiting for the legacy default stream
        (``CU_STREAM_NON_BLOCKING``).

    Raises
    ------
    OSError
        If the driver cannot create the stream.

    Examples
    --------
    >>> from arrow_gpu import Context, Stream
    >>> stream = Stream(Context(0))
    >>> stream.synchronize()
    """

    def __init__(self, Context context=None, *, bint non_blocking=False):
        self.context = context if context is not None else Context(0)
        self.c_context = self.context.c_context
        self.handle_ = GetResultValue(self.c_context.CreateStream(1 if non_blocking else 0))
        self.owned = True

    @staticmethod
    def wrap(stream, Context context=None):
        """Borrow a stream that another object owns.

        The stream is not destroyed with the returned object, which keeps a reference to
        ``stream``.

        Parameters
        ----------
        stream : int, Stream or stream object
            The stream, in any spelling ``stream_handle`` accepts.
        context : Context, optional
            The context the stream belongs to. If omitted: a Stream's own context, else
            ``Context(0)``.

        Returns
        -------
        Stream
            A Stream over the same handle, which it does not own.

        Raises
        ------
        TypeError
            If ``stream`` is not a spelling of a stream.
        ValueError
            If the handle is negative or does not fit a pointer.

        Examples
        --------
        >>> from arrow_gpu import Stream
        >>> Stream.wrap(0).handle
        0
        """
        cdef Stream self = Stream.__new__(Stream)
        if context is None:
            context = (<Stream>stream).context if isinstance(stream, Stream) else Context(0)
        self.context = context
        self.c_context = context.c_context
        self.handle_ = _raw_stream(stream)
        self.owned = False
        self.source = stream
        return self

    def __dealloc__(self):
        if self.owned:
            self.c_context.DestroyStream(self.handle_)

    @property
    def handle(self):
        """The ``CUstream`` handle, as an integer (0 for the legacy default stream)."""
        return <uintptr_t>self.handle_

    def __cuda_stream__(self):
        """The ``(version, handle)`` pair of the ``__cuda_stream__`` protocol.

        Examples
        --------
        >>> from arrow_gpu import Stream
        >>> Stream.wrap(0).__cuda_stream__()
        (0, 0)
        """
        return (0, <uintptr_t>self.handle_)

    def synchronize(self):
        """Block until all work queued on this stream has finished.

        Raises
        ------
        OSError
            If the driver reports an error, such as a kernel that failed.

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> Stream(Context(0)).synchronize()
        """
        with nogil:
            check_status(self.c_context.SynchronizeStream(self.handle_))

    def record(self, Event event=None):
        """Mark this point of the stream's work with an event that others can wait for.

        Parameters
        ----------
        event : Event, optional
            The event to record; a new one of the stream's context if omitted.

        Returns
        -------
        Event
            The recorded event: it completes when the work queued so far has finished.

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> producer, consumer = Stream(Context(0)), Stream(Context(0))
        >>> consumer.wait(producer.record())
        >>> consumer.synchronize()
        """
        if event is None:
            event = Event(self.context)
        check_status(self.c_context.RecordEvent(event.handle_, self.handle_))
        return event

    def wait(self, Event event not None):
        """Make later work on this stream wait for ``event``, without blocking the host.

        Parameters
        ----------
        event : Event
            A recorded event, of this stream's device.

        Raises
        ------
        OSError
            If the driver refuses the wait (an event of a destroyed context, say).

        Examples
        --------
        >>> from arrow_gpu import Context, Stream
        >>> stream = Stream(Context(0))
        >>> stream.wait(Stream.wrap(0).record())
        """
        check_status(self.c_context.WaitEvent(self.handle_, event.handle_))

    def __repr__(self):
        return f"<arrow_gpu.Stream handle={self.handle:#x} owned={bool(self.owned)}>"


cdef class Event:
    """A CUDA event: a point in a stream's work that others can wait for.

    ``Event(context)`` creates one (owned, destroyed with this object); ``Event.wrap``
    borrows an existing one.

    Parameters
    ----------
    context : Context, optional
        The context the event belongs to; ``Context(0)`` if omitted.

    Raises
    ------
    OSError
        If the driver cannot create the event.

    Examples
    --------
    >>> from arrow_gpu import Context, Event
    >>> event = Event(Context(0))
    >>> event.record()
    >>> event.synchronize(); event.done
    True
    """

    def __init__(self, Context context=None):
        self.context = context if context is not None else Context(0)
        self.c_context = self.context.c_context
        self.handle_ = GetResultValue(self.c_context.CreateEvent())
        self.owned = True

    @staticmethod
    def wrap(uintptr_t handle, Context context=None):
        """Borrow an existing ``CUevent`` handle.

        Parameters
        ----------
        handle : int
            The ``CUevent``, as an integer. It must stay alive as long as the returned
            object, which does not destroy it.
        context : Context, optional
            The context the event belongs to; ``Context(0)`` if omitted.

        Returns
        -------
        Event
            An Event over the same handle, which it does not own.

        Raises
        ------
        TypeError
            If ``handle`` is not an int.
        OverflowError
            If ``handle`` is negative.

        Examples
        --------
        >>> from arrow_gpu import Context, Event
        >>> owner = Event(Context(0))
        >>> Event.wrap(owner.handle).handle == owner.handle
        True
        """
        cdef Event self = Event.__new__(Event)
        self.context = context if context is not None else Context(0)
        self.c_context = self.context.c_context
        self.handle_ = <CUevent>handle
        self.owned = False
        return self

    def __dealloc__(self):
        if self.owned:
            self.c_context.DestroyEvent(self.handle_)

    @property
    def handle(self):
        """The ``CUevent`` handle, as an integer."""
        return <uintptr_t>self.handle_

    def record(self, stream=None):
        """Record this event on a stream: it completes when the work queued so far finishes.

        Parameters
        ----------
        stream : stream-like, optional
            The stream, in any spelling ``stream_handle`` accepts; the legacy default
            stream if omitted.

        Raises
        ------
        TypeError
            If ``stream`` is not a spelling of a stream.
        ValueError
            If the stream handle is negative or does not fit a pointer.
        OSError
            If the driver refuses to record the event.

        Examples
        --------
        >>> from arrow_gpu import Context, Event, Stream
        >>> ctx = Context(0)
        >>> Event(ctx).record(Stream(ctx))
        """
        Stream.wrap(stream, self.context).record(self)

    def synchronize(self):
        """Block the host until the recorded work has finished.

        Raises
        ------
        OSError
            If the driver reports an error, such as a kernel that failed.

        Examples
        --------
        >>> from arrow_gpu import Context, Event
        >>> event = Event(Context(0))
        >>> event.record()
        >>> event.synchronize()
        """
        with nogil:
            check_status(self.c_context.SynchronizeEvent(self.handle_))

    @property
    def done(self):
        """Whether the recorded work has finished (never blocks).

        An event that was never recorded counts as done.

        Examples
        --------
        >>> from arrow_gpu import Context, Event
        >>> Event(Context(0)).done
        True
        """
        return GetResultValue(self.c_context.EventDone(self.handle_))
