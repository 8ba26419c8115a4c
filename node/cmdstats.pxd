cimport cython

# Cython declarations for node/cmdstats.py (pure-Python mode; node/native.py, setup.py).
# The totals and a command's counters are C fields: Server.call counts every command without
# an attribute lookup or a new int for them; Python code (INFO, metrics, RESETSTAT, the router)
# sees plain ints.

cdef class CallStats:
    cdef public Py_ssize_t calls, usec, rejected, failed
    cdef public list hist

cdef class CommandStats:
    cdef public dict calls, errors
    cdef public Py_ssize_t total_commands, total_error_replies, total_connections
    cdef public Py_ssize_t rejected_connections, net_input_bytes, net_output_bytes
    cdef public Py_ssize_t net_repl_input_bytes, net_repl_output_bytes
    cdef public Py_ssize_t qbuf_disconnections, obuf_disconnections
    cdef public object _samples

    # One call counted by a replica's directly applied effect (node/effects.py): a C call.
    @cython.locals(st=CallStats)
    cpdef timed_ns(self, bytes name, ns)
