"""`xshard router`: options, the topology source (etcd, or a JSON file), and the event loop."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys

from base.records import PStreamRecord
from node.config import Config

log = logging.getLogger("xshard.router")
SHUTDOWN_TIMEOUT = 10.0  # seconds for the metrics server and etcd to let go at shutdown


def build_parser() -> argparse.ArgumentParser:
    from base import etcdconn

    p = argparse.ArgumentParser(prog="xshard router", description=(
        "A stateless RESP proxy: clients see one Redis; each command goes to the shard that "
        "owns its keys' slot. The topology comes from etcd (--etcd) or a JSON file "
        "(--topology)."))
    p.add_argument("--port", type=int, default=6379, help="TCP port to listen on (default: "
                   "6379; 0 picks a free one)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default: "
                   "127.0.0.1)")
    p.add_argument("--announce-host", default="", help="address other clients reach us at "
                   "(CLUSTER SLOTS); default: --bind")
    etcdconn.add_arguments(p, etcd_help="etcd endpoints, a comma list of URLs, e.g. "
                           "http://127.0.0.1:2379")
    p.add_argument("--cluster", default="xshard", help="cluster name, the etcd key prefix "
                   "/xshard/NAME/ (default: xshard)")
    p.add_argument("--topology", default="", help="a JSON file {nodes, shards, slots} in the "
                   "etcd value formats, instead of etcd (static set-ups and tests); an optional "
                   "'pstreams' {name: record} adds partitioned streams")
    p.add_argument("--router-id", default="", help="this router's id in etcd and CLUSTER "
                   "replies (default: a random one)")
    # The passwords also come from the environment, so that they need not be on argv.
    p.add_argument("--requirepass", default=os.environ.get("XSHARD_REQUIREPASS", ""),
                   help="password clients must send with AUTH (env XSHARD_REQUIREPASS; "
                   "default: none)")
    p.add_argument("--node-password", default=os.environ.get("XSHARD_NODE_PASSWORD", ""),
                   help="password the router sends to nodes (their requirepass; env "
                   "XSHARD_NODE_PASSWORD; default: none)")
    p.add_argument("--node-user", default=os.environ.get("XSHARD_NODE_USER", ""),
                   help="ACL user the router logs in as on the nodes, with --node-password "
                   "(env XSHARD_NODE_USER; default: the default user)")
    p.add_argument("--cluster-down-timeout-ms", type=int, default=5000, help="how long a "
                   "command waits for a shard without a primary before -CLUSTERDOWN "
                   "(default: 5000)")
    p.add_argument("--maxclients", type=int, default=10000, help="most clients connected at "
                   "once (default: 10000)")
    p.add_argument("--client-query-buffer-limit", default="1gb", help="largest unparsed "
                   "input kept for one client (default: 1gb)")
    p.add_argument("--metrics-port", type=int, default=0, help="serve /metrics, /healthz "
                   "and /readyz over HTTP on this port, at --bind (default: 0, off)")
    p.add_argument("--loglevel", default="notice", help="debug for more detail (default: "
                   "notice)")
    from node import tls

    tls.add_arguments(p, listener=True)
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if not a.topology:
        from base import etcdconn

        try:
            a.etcd_config = etcdconn.from_args(a, find_local=False) if (
                a.etcd or os.environ.get("XSHARD_ETCD")) else None
        except etcdconn.ConfigError as e:
            p.error(str(e))
        if a.etcd_config is None:
            p.error("one of --etcd or --topology is required")
    return a


def run(argv: list[str]) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    logging.basicConfig(level=logging.DEBUG if args.loglevel == "debug" else logging.INFO,
                        format=f"{os.getpid()}:R %(asctime)s %(levelname).1s %(message)s")
    import uvloop

    return uvloop.run(_serve(args))


def load_topology_file(path: str) -> dict:
    with open(path) as f:
        topo = json.load(f)
    for k in ("nodes", "shards", "slots"):
        if k not in topo:
            raise ValueError(f"{path}: missing '{k}'")
    # partitioned streams, in the etcd record's format (base/records.py)
    try:
        topo["pstreams"] = {str(name): PStreamRecord.decode(json.dumps(v).encode())
                            for name, v in dict(topo.get("pstreams", {})).items()}
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: bad 'pstreams': {e!r}") from None
    return topo


async def _serve(args: argparse.Namespace) -> int:
    from router import pstreams
    from router.proxy import Router

    config = Config()
    config.port = args.port
    config.requirepass = args.requirepass
    config.maxclients = args.maxclients
    config.apply("client-query-buffer-limit", args.client_query_buffer_limit.encode(),
                 startup=True)
    router = Router(config, args.router_id, args.announce_host or args.bind,
                    args.cluster_down_timeout_ms / 1000, args.node_password, args.node_user)
    from node import tls

    try:
        server_ctx, router.tls_client_context = tls.contexts_from_args(args)
    except tls.TlsError as e:
        print(f"xshard router: {e}\nxshard router: Failed to configure TLS.", file=sys.stderr)
        return 1
    source = None
    if args.topology:
        try:
            topo = load_topology_file(args.topology)
        except (OSError, ValueError) as e:
            print(f"xshard router: cannot read topology: {e}", file=sys.stderr)
            return 1
        router.set_topology(topo["nodes"], topo["shards"], topo["slots"], 1)
        router.pstreams = pstreams.load(router, topo.get("pstreams", {}))
    # Metrics first: once the client port answers, /metrics does too (a scraper or a test
    # that saw the router ready must not find the metrics port closed).
    metrics = None
    if args.metrics_port:
        from node import metricsserver
        from router.metrics import RouterCollector

        rc = RouterCollector(router, etcd=not args.topology)
        try:
            metrics = await metricsserver.start(metricsserver.new_registry(rc), rc.ready,
                                                args.bind, args.metrics_port)
        except OSError as e:
            print(f"xshard router: cannot listen for metrics on {args.bind}:"
                  f"{args.metrics_port}: {e.strerror}", file=sys.stderr)
            router.close()
            return 1
    try:
        port = await router.start(args.port, args.bind, args.tls_port, server_ctx)
    except OSError as e:
        print(f"xshard router: cannot listen on {args.bind}:{args.port}/{args.tls_port}: "
              f"{e.strerror}", file=sys.stderr)
        router.close()
        if metrics is not None:
            await metrics.stop()
        return 1
    config.port = port
    config.tls_port = args.tls_port
    if not args.topology:
        from router.topology import EtcdTopology

        source = EtcdTopology(router, args.etcd_config, args.cluster)
        try:
            await source.start()
        except Exception as e:  # noqa: BLE001 - one clear line, not a traceback
            print(f"xshard router: cannot use etcd at {args.etcd_config.url}: {e}",
                  file=sys.stderr)
            router.close()
            if metrics is not None:
                await metrics.stop()
            return 1
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if port:
        log.info("xshard router ready to accept connections tcp on %s:%d", args.bind, port)
    if args.tls_port:
        log.info("xshard router ready to accept connections tls on %s:%d", args.bind,
                 args.tls_port)
    await stop.wait()

    async def detach() -> None:
        if metrics is not None:
            await metrics.stop()
        if source is not None:
            await source.stop()

    # A kubelet kills what has not exited 30 s after SIGTERM: however etcd or a scraper
    # behaves (etcd may be stopping too), the router closes within a bounded time.
    try:
        await asyncio.wait_for(detach(), SHUTDOWN_TIMEOUT)
    except TimeoutError:
        log.warning("shutdown: metrics and etcd not detached within %.0f s; closing anyway",
                    SHUTDOWN_TIMEOUT)
    router.close()
    return 0
