"""What every xshard process shares, below the node, the router and the programs.

The cluster's records in etcd and their store (`records`, `store`, the in-memory `memstore`),
how a process reaches etcd (`etcdconn`), the lease session that keys live on (`lease`), the
local cluster's directory (`statedir`), the command path's histogram and task helpers. Nothing
here imports `node`, `router`, `control` or `pipeline` (tests/test_layout.py).
"""
