# Cython declarations for node/streamnodes.py (pure-Python mode; node/native.py, setup.py).
# IDs are 128-bit Python ints (ms << 64 | seq), so they stay `object`; counters are C ints.

import cython

cdef unsigned char _DEL

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

    # A read's decoding (compiled: the C loops at the end of streamnodes.py).
    cpdef list sids(self, Py_ssize_t i0=*, i1=*)
    cpdef Py_ssize_t _bound(self, sid, bint right) except -1
    cpdef object _strings(self, Py_ssize_t e0, Py_ssize_t e1)
    cpdef list entries(self, Py_ssize_t i0, Py_ssize_t i1)

cdef class Tail:
    cdef public object first, ms0, seq0
    cdef public list sids, ents, master, msds, seqs, vals, nfs
    cdef public bytearray flags
    cdef public Py_ssize_t live, ndel, lp_rest, k

@cython.locals(t=Tail, b=Block)
cdef tuple _span(blk, Py_ssize_t i0, Py_ssize_t i1)

cpdef tuple _live_slice(blk, Py_ssize_t i0, Py_ssize_t i1, bint rev, cap, encode=*,
                        bint ids=*)

@cython.locals(flags=bytearray, n=Py_ssize_t, i=Py_ssize_t)
cdef Py_ssize_t _live_count(blk, Py_ssize_t i0, Py_ssize_t i1) except -1

@cython.locals(flags=bytearray, left=Py_ssize_t, i=Py_ssize_t)
cdef (Py_ssize_t, Py_ssize_t) _live_bounds(blk, Py_ssize_t i0, Py_ssize_t i1, bint rev,
                                           Py_ssize_t cap)

@cython.locals(b=Block, t=Tail, ids=list, flags=bytearray)
cpdef list live_ids(blk, Py_ssize_t i0, Py_ssize_t i1, bint rev)

@cython.locals(ids=list, ents=list, flags=bytearray, keep=bytearray)
cpdef tuple live_rows(blk, Py_ssize_t i0, Py_ssize_t i1, bint rev)

cdef int _width(str tc) noexcept

cdef unsigned long long _uget(const char *p, int w, Py_ssize_t i) noexcept

@cython.locals(mid=Py_ssize_t, v="unsigned long long")
cdef Py_ssize_t _bisect(const char *p, int w, unsigned long long x, Py_ssize_t lo, Py_ssize_t hi,
                        bint right) noexcept

@cython.locals(n=Py_ssize_t, pm="const char *", mw=int, lo=Py_ssize_t, hi=Py_ssize_t)
cdef Py_ssize_t _bound_c(Block b, unsigned long long msd, unsigned long long sq, bint right)

@cython.locals(pm="const char *", ps="const char *", mw=int, sw=int, base="unsigned long long",
               i=Py_ssize_t, out=list, pf="const unsigned char *", step=Py_ssize_t, _j=Py_ssize_t)
cdef list _sids_c(Block b, Py_ssize_t i0, Py_ssize_t i1, bint rev=*, bint live=*)

cdef const unsigned char *_flags_ptr(Block b) noexcept

cdef extern from *:
    """
    /* The int ms << 64 | seq of a stream ID, and the ms half of one, by the public C API
       (PyLong_FromUnsignedLongLong, a shift and an or; PyNumber_Rshift), except on the one
       layout measured: CPython 3.11 with 30-bit digits, where the five digits of the 128-bit
       value go straight into a new int (one allocation and no int arithmetic: ~600
       instructions less per ID, measured by callgrind; every XADD makes one, a read one per
       entry). That layout is private and changed in 3.12, so the condition is evaluated when
       the module is compiled, against the Python.h of the Python it is built for (whose ABI
       tag the extension carries), and XSHARD_ID_DIGITS says which path was compiled in
       (tests/test_native.py checks it against the running Python). */
    #if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    #define XSHARD_ID_DIGITS 1
    #else
    #define XSHARD_ID_DIGITS 0
    #endif
    static PyObject *xshard_sixty_four = NULL;  /* the shift, made once */
    static CYTHON_INLINE int xshard_shift_init(void) {
        if (xshard_sixty_four == NULL) xshard_sixty_four = PyLong_FromLong(64);
        return xshard_sixty_four == NULL ? -1 : 0;
    }
    static CYTHON_INLINE PyObject *xshard_make_id(unsigned long long ms, unsigned long long seq) {
        if (ms == 0) return PyLong_FromUnsignedLongLong(seq);
    #if XSHARD_ID_DIGITS
        {
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
        }
    #else
        {
            PyObject *hi, *id, *lo, *r;
            if (xshard_shift_init() < 0) return NULL;
            hi = PyLong_FromUnsignedLongLong(ms);
            if (hi == NULL) return NULL;
            id = PyNumber_Lshift(hi, xshard_sixty_four);
            Py_DECREF(hi);
            if (id == NULL || seq == 0) return id;
            lo = PyLong_FromUnsignedLongLong(seq);
            if (lo == NULL) {
                Py_DECREF(id);
                return NULL;
            }
            r = PyNumber_Or(id, lo);
            Py_DECREF(id);
            Py_DECREF(lo);
            return r;
        }
    #endif
    }
    /* sid >> 64 as a C integer; OverflowError for a negative int or one of over 128 bits.
       On the measured layout its digits are read (a shift made an int per ID: ~1.5k
       instructions of an XREADGROUP of 10 entries and their XACK). */
    static CYTHON_INLINE unsigned long long xshard_sid_ms(PyObject *v) {
        PyObject *hi;
        unsigned long long r;
        if (!PyLong_Check(v)) {
            PyErr_SetString(PyExc_TypeError, "a stream ID is an int");
            return (unsigned long long)-1;
        }
    #if XSHARD_ID_DIGITS
        {
            Py_ssize_t n = Py_SIZE(v);
            const digit *d = ((PyLongObject *)v)->ob_digit;
            if (n >= 0 && n <= 2) return 0;
            if (n >= 3 && (n < 5 || (n == 5 && d[4] < 256))) {
                r = (unsigned long long)(d[2] >> 4);
                if (n >= 4) r |= (unsigned long long)d[3] << 26;
                if (n == 5) r |= (unsigned long long)d[4] << 56;
                return r;
            }
        }  /* negative or over 128 bits: the public path raises what it raises */
    #endif
        if (xshard_shift_init() < 0) return (unsigned long long)-1;
        hi = PyNumber_Rshift(v, xshard_sixty_four);
        if (hi == NULL) return (unsigned long long)-1;
        r = PyLong_AsUnsignedLongLong(hi);
        Py_DECREF(hi);
        return r;
    }
    """
    int XSHARD_ID_DIGITS
    object xshard_make_id(unsigned long long ms, unsigned long long seq)
    unsigned long long xshard_sid_ms(object v) except? <unsigned long long>-1

# Also XACK's ID parser (node/commands/groups.py).
cdef object _sid_of(unsigned long long ms, unsigned long long seq)

cdef unsigned long long _sid_ms(object sid) except? 0

cdef Py_ssize_t _string_count(Block b) except? -2

cdef const char *_lens_ptr(Block b) noexcept

@cython.locals(pl="const char *", lw=int, off=Py_ssize_t, j=Py_ssize_t)
cdef Py_ssize_t _string_off(Block b, Py_ssize_t e) except? -1

@cython.locals(cnt=Py_ssize_t, out=list, pb="const char *", off=Py_ssize_t, w=Py_ssize_t,
               pl="const char *", lw=int, e=Py_ssize_t)
cdef list _strings_c(Block b, Py_ssize_t e0, Py_ssize_t e1)

@cython.locals(master=tuple, k=Py_ssize_t, cnt=Py_ssize_t, out=list, pb="const char *",
               e=Py_ssize_t, off=Py_ssize_t, w=Py_ssize_t, pl="const char *", lw=int,
               _i=Py_ssize_t, j=Py_ssize_t, ent=list)
cdef list _same_entries_c(Block b, Py_ssize_t i0, Py_ssize_t i1)
