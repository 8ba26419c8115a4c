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
