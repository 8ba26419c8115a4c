# Cython declarations for node/commands/groups.py (pure-Python mode; node/native.py, setup.py).
# XACK's ID parsing and the offset of the XCLAIMs nobody listens to are C loops.

import cython

cdef Py_ssize_t _arg_len(Py_ssize_t n) noexcept

cdef Py_ssize_t _id_len(object sid) except -1

@cython.locals(fixed=Py_ssize_t, total=Py_ssize_t, n=Py_ssize_t)
cpdef Py_ssize_t xclaim_run_len(key, groupname, consumer, now_ms, list sids) except -1

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, p="unsigned char *",
               ms="unsigned long long", seq="unsigned long long", d="unsigned long long",
               lim="unsigned long long")
cdef list _plain_ids_c(args)
