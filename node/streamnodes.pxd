# Cython declarations for node/streamnodes.py (pure-Python mode; node/native.py, setup.py).
# IDs are 128-bit Python ints (ms << 64 | seq), so they stay `object`; counters are C ints.

import cython

@cython.locals(n=Py_ssize_t, i=Py_ssize_t, out=bytes, p16="unsigned short *", p32="unsigned int *",
               p64="unsigned long long *")
cdef bytes _packed(str tc, list vals)

@cython.locals(m=Py_ssize_t, i=Py_ssize_t, n=Py_ssize_t, x=bytes, out=bytearray)
cdef bytes _byte_lens(list parts)

cdef class Block:
    cdef public object first, ms0
    cdef public Py_ssize_t n, live, ndel, lp_rest, elen
    cdef public tuple master
    cdef public bytes msd, seq, blob
    cdef public str mtc, stc, lentc
    cdef public object lens, flags, nfs

cdef class Tail:
    cdef public object first, ms0, seq0
    cdef public list sids, ents, master, msds, seqs, vals, nfs
    cdef public bytearray flags
    cdef public Py_ssize_t live, ndel, lp_rest, k
