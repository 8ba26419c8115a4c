# Cython declarations for router/forward.py (pure-Python mode; node/native.py, setup.py).
# A Forward is made for every relayed request and is its reply callback.

cimport cython

from router.client cimport ClientConn, RouterClient, RouterCore
from router.upstream cimport Pool, Upstream, Waiter

cdef double _clock() noexcept

cdef class Forward(Waiter):
    cdef public object data, slot, cell, done, addr, added
    cdef public RouterCore router
    cdef public RouterClient c
    cdef public bint write
    cdef public Py_ssize_t attempt
    cdef public double deadline, sent

    cdef _set(self, RouterCore router, RouterClient c, object data, object slot, bint write,
              object cell, object done)

    @cython.locals(router=RouterCore, c=RouterClient, pool=Pool, up=Upstream, replica=bint)
    cpdef send(self, object addr=*, Upstream up=*)

    @cython.locals(router=RouterCore)
    cpdef reply(self, bytes r)

    @cython.locals(conn=ClientConn)
    cpdef _finish(self, object r)

@cython.locals(f=Forward)
cpdef Forward to_cell(RouterCore router, RouterClient c, object data, object slot, bint write,
                      list cell)

cdef class BlockedRead(Waiter):
    cdef public RouterCore router
    cdef public RouterClient c
    cdef public object argv, cell, done, dollars, since, raw
    cdef public Py_ssize_t block_at, slot, attempt
    cdef public bint write, over, issued
    cdef public double deadline
    cdef public Upstream up
    cdef public Pool pool

    cdef _set(self, RouterCore router, RouterClient c, object argv, Py_ssize_t block_at,
              object block_ms, Py_ssize_t slot, bint write, object cell, object dollars,
              object done, object raw)

    cpdef start(self)

    @cython.locals(router=RouterCore, c=RouterClient, pool=Pool, up=Upstream, replica=bint)
    cpdef issue(self, object addr=*, bint asking=*)

    @cython.locals(up=Upstream, pool=Pool)
    cpdef reply(self, bytes r)

    @cython.locals(up=Upstream, c=RouterClient, conn=ClientConn)
    cpdef finish(self, object reply)

@cython.locals(b=BlockedRead)
cpdef BlockedRead blocked_read(RouterCore router, RouterClient c, list argv, Py_ssize_t block_at,
                               object block_ms, Py_ssize_t slot, bint write, list cell,
                               object raw)
