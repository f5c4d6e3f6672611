# The C types Cython compiles timeline.py with (orchestrator/compiled.py): the timeline's fields, and typed
# locals in the loops that run once per breakpoint or once per host. (Blocks are read as Python arrays: a
# typed view costs more to take than it saves on the few breakpoints a call reads.)
cimport cython

from orchestrator.planning.slottable.shared_usage cimport SharedUsage


cdef class HostTimeline:
    cdef public str name
    cdef public object capacity
    cdef public SharedUsage _shared
    cdef public dict _vectors, _single
    cdef public tuple _fit_limits
    cdef public object _mins
    cdef public list _blocks, _times, _usage, _count, _refs
    cdef public Py_ssize_t _len
    cdef public object _k0, _c0

    cpdef _blocks_changed(self)
    cpdef _clear(self)
    cpdef _hold_only(self, long long ks, long long ke, object used, long long code, object start, object end)
    @cython.locals(b=Py_ssize_t, i=Py_ssize_t, half=Py_ssize_t)
    cpdef tuple _split(self, long long k, object t)
    @cython.locals(held=object)
    cpdef _new_breakpoint(self, Py_ssize_t b, Py_ssize_t i, long long k, object t)
    @cython.locals(b=Py_ssize_t, i=Py_ssize_t, r="long long")
    cpdef _unsplit(self, long long k)
    cpdef add_keys(self, long long ks, long long ke, object amount, object start, object end)
    @cython.locals(n=Py_ssize_t, j=Py_ssize_t)
    cpdef _shift_until(self, Py_ssize_t b, Py_ssize_t i, long long ke, object amount, bint adding)
    @cython.locals(last=Py_ssize_t, m=Py_ssize_t, at=Py_ssize_t, one="long long", memo=dict, usage=list,
                   entry=tuple, shared=SharedUsage)
    cpdef _shift(self, Py_ssize_t b, Py_ssize_t i, Py_ssize_t j, object amount, bint adding)
    @cython.locals(n=Py_ssize_t, added=Py_ssize_t, j=Py_ssize_t, i=Py_ssize_t)
    cpdef _add_in_one_block(self, long long ks, long long ke, object amount, object start, object end)
    @cython.locals(i=Py_ssize_t, j=Py_ssize_t, m=Py_ssize_t, gone=Py_ssize_t, r="long long")
    cpdef _remove_in_one_block(self, long long ks, long long ke, object amount)
    @cython.locals(b=Py_ssize_t)
    cpdef remove_keys(self, long long ks, long long ke, object amount)
    @cython.locals(b=Py_ssize_t, i=Py_ssize_t)
    cpdef usage_key(self, long long k)
    @cython.locals(b=Py_ssize_t, i=Py_ssize_t)
    cpdef tuple state_key(self, long long k)
    @cython.locals(c0=double, c1=double, c2=double, c3=double, c4=double, r0=double, r1=double, r2=double,
                   r3=double, r4=double, nb=Py_ssize_t, b=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t,
                   k="long long", end="long long", usage=list)
    cpdef scan(self, long long k1, object k2, object request, object relevant=*)


@cython.locals(tl=HostTimeline)
cpdef add_on_hosts(object held, long long ks, long long ke, object start, object end)

@cython.locals(tl=HostTimeline)
cpdef remove_on_hosts(object held, long long ks, long long ke)

@cython.locals(tl=HostTimeline, r=Py_ssize_t, b=Py_ssize_t, i=Py_ssize_t, n=Py_ssize_t,
               after_block="long long", following="long long", strided_read_above=Py_ssize_t, out=list)
cpdef list windows_at(list timelines, list rows, long long k)

@cython.locals(u0=double, u1=double, u2=double, u3=double, u4=double)
cdef bint _fits(object used, double r0, double r1, double r2, double r3, double r4,
                       double c0, double c1, double c2, double c3, double c4)
