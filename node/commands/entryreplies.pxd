# Cython declarations for node/commands/entryreplies.py (pure-Python mode; node/native.py,
# setup.py). The replies of stream entries are written into one C buffer (_encode_rows_c,
# _encode_span_c); the decimal writers are cimported by node.commands.groups, id_bulk by XADD.

import cython

from node.stream cimport Stream
from node.streamnodes cimport Block, Tail

cpdef bytes encode_entries(list sids, list ents)

cdef unsigned char _DEL, _SAME

@cython.locals(m=Py_ssize_t)
cdef bytes _encode_entries_c(list sids, list ents)

@cython.locals(cap=Py_ssize_t, i=Py_ssize_t, j=Py_ssize_t, w=Py_ssize_t, p=Py_ssize_t,
               step=Py_ssize_t, _n=Py_ssize_t, buf="char *", f=list, x=bytes, fo=object,
               xo=object, seq="unsigned long long", ms="unsigned long long", k=Py_ssize_t,
               master=list, hl="Py_ssize_t *", hb="char *", hp="char *",
               base="unsigned long long")
cdef bytes _encode_rows_c(list sids, list ents, const unsigned char *pf, Py_ssize_t i0,
                          Py_ssize_t i1, bint rev, Tail t)

@cython.locals(total=Py_ssize_t, j=Py_ssize_t, x=bytes, hl="Py_ssize_t *", hb="char *",
               h=Py_ssize_t, q=Py_ssize_t)
cdef Py_ssize_t *_before_values(names, Py_ssize_t k, Py_ssize_t vlen)

@cython.locals(idx=list, i=Py_ssize_t)
cdef bytes _encode_rows_py(list sids, list ents, const unsigned char *pf, Py_ssize_t i0,
                           Py_ssize_t i1, bint rev)

@cython.locals(q=Py_ssize_t, n=Py_ssize_t)
cdef Py_ssize_t _put_entry_head(char *buf, Py_ssize_t p, unsigned long long ms,
                                unsigned long long seq, Py_ssize_t w) noexcept

cdef Py_ssize_t _put_bulk(char *buf, Py_ssize_t p, const char *src, Py_ssize_t n) noexcept

@cython.locals(b=Block, t=Tail)
cpdef bytes encode_span(blk, Py_ssize_t i0, Py_ssize_t i1, bint rev=*)

@cython.locals(master=tuple, k=Py_ssize_t, e0=Py_ssize_t, e1=Py_ssize_t, cnt=Py_ssize_t,
               names=Py_ssize_t, j=Py_ssize_t, xo=object, x=bytes, off=Py_ssize_t,
               end=Py_ssize_t, cap=Py_ssize_t, buf="char *", pm="const char *", mw=int,
               ps="const char *", sw=int, pf="const unsigned char *", base="unsigned long long",
               pb="const char *", src="const char *", vlen=Py_ssize_t, pl="const char *",
               lw=int, e=Py_ssize_t, p=Py_ssize_t, i=Py_ssize_t, w=Py_ssize_t,
               step=Py_ssize_t, _n=Py_ssize_t, hl="Py_ssize_t *", hb="char *", hp="char *",
               h=Py_ssize_t, q=Py_ssize_t)
cdef bytes _encode_span_c(Block b, Py_ssize_t i0, Py_ssize_t i1, bint rev)

# cpdef: XRANGE, XREVRANGE and XREAD call it as C (cimported).
@cython.locals(n=Py_ssize_t, m=Py_ssize_t, parts=list)
cpdef tuple stream_range_reply(Stream s, start, end, count, bint rev)

@cython.locals(n=int)
cdef int _ndigits(unsigned long long v) noexcept

@cython.locals(end=Py_ssize_t)
cdef Py_ssize_t _put_dec(char *buf, Py_ssize_t p, unsigned long long v) noexcept

cdef inline Py_ssize_t _put_dec_back(char *buf, Py_ssize_t end, unsigned long long v) noexcept

@cython.locals(p=Py_ssize_t, n=Py_ssize_t, q=Py_ssize_t)
cdef bytes id_bulk(unsigned long long ms, unsigned long long seq)
