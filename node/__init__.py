"""The xshard storage node: a Redis-compatible stream engine behind a RESP server."""

__version__ = "0.1.0"
