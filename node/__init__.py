"""The xshard storage node: a Redis-compatible stream engine behind a RESP server."""

from node import native

native.install()  # before any hot module: it decides compiled or interpreted (node/native.py)

__version__ = "0.1.0"
# The Redis release whose behaviour the node matches: INFO's redis_version and HELLO's version
# (clients such as redis-py decide what to send from it).
REDIS_VERSION = "7.4.0"
