# Cython declarations for node/stream.py (pure-Python mode; node/native.py, setup.py).
# An ID is a 128-bit Python int (ms << 64 | seq) where other code needs one; the stream's last
# ID is two C uint64 fields, so XADD computes and checks IDs without Python-int arithmetic.

import cython

from libc.stdint cimport uint64_t

from node.listpack cimport _isz, _sum_esz
from node.streamnodes cimport Tail

cdef extern from *:
    """
    /* The int ms << 64 | seq of a stream ID. CPython 3.11 keeps an int as 30-bit digits: the
       five digits of the 128-bit value go straight into a new int (one allocation, no
       arithmetic on ints). Other layouts build it from its 16 bytes. */
    static CYTHON_INLINE PyObject *xshard_make_id(unsigned long long ms, unsigned long long seq) {
        if (ms == 0) return PyLong_FromUnsignedLongLong(seq);
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
        digit d[5];
        Py_ssize_t n = 5;
        PyLongObject *r;
        d[0] = (digit)(seq & 0x3FFFFFFFULL);
        d[1] = (digit)((seq >> 30) & 0x3FFFFFFFULL);
        d[2] = (digit)((seq >> 60) | ((ms & 0x3FFFFFFULL) << 4));
        d[3] = (digit)((ms >> 26) & 0x3FFFFFFFULL);
        d[4] = (digit)(ms >> 56);
        while (d[n - 1] == 0) n--;  /* ms != 0: bit 64 or above is set, so n >= 3 */
        r = _PyLong_New(n);
        if (r == NULL) return NULL;
        memcpy(r->ob_digit, d, n * sizeof(digit));
        return (PyObject *)r;
    #else
        unsigned char b[16];
        int i;
        for (i = 0; i < 8; i++) {
            b[i] = (unsigned char)(seq >> (8 * i));
            b[8 + i] = (unsigned char)(ms >> (8 * i));
        }
        return _PyLong_FromByteArray(b, 16, 1, 0);
    #endif
    }
    """
    object xshard_make_id(unsigned long long ms, unsigned long long seq)

cdef Py_ssize_t _LP_MAX
cdef unsigned long long _U64_MAX

cdef object _make_id(unsigned long long ms, unsigned long long seq)

cdef class Stream:
    cdef public Py_ssize_t length
    cdef public uint64_t last_ms, last_seq
    cdef public object first_id, max_deleted_entry_id, entries_added
    cdef public dict groups
    cdef public object idmp
    cdef public list _firsts, _nodes
    cdef public Tail _tail
    cdef object __weakref__

    cpdef next_auto_id(self, now_ms)

    cpdef append(self, sid, list fields, Py_ssize_t max_entries, Py_ssize_t max_bytes)
    cpdef append_id(self, unsigned long long ms, unsigned long long seq, list fields,
                    Py_ssize_t max_entries, Py_ssize_t max_bytes)

    # XADD's hot path: the ID parts, the open tail's counters and lists as C values.
    @cython.locals(t=Tail, tot=Py_ssize_t, live=Py_ssize_t, ndel=Py_ssize_t, size=Py_ssize_t,
                   k=Py_ssize_t, nf=Py_ssize_t, n=Py_ssize_t, vals=list, nf2=Py_ssize_t,
                   j=Py_ssize_t, x=bytes, same=bint, master=list, ms0="unsigned long long",
                   seq0="unsigned long long", msd="unsigned long long")
    cdef _append(self, unsigned long long ms, unsigned long long seq, sid, list fields,
                 Py_ssize_t max_entries, Py_ssize_t max_bytes)
