# The C types Cython compiles shared_usage.py with (orchestrator/compiled.py): a class of typed fields.
cimport cython


cdef class SharedUsage:
    cdef public dict values, vectors, single, added, taken
    cdef public long long next
    cdef public Py_ssize_t limit
    cdef public list timelines

    cpdef dict transitions(self, object amount, bint adding)
    cpdef tuple step(self, long long code, object amount, bint adding)
    cpdef tuple add(self, object used)
