"""The options of the `xshard` data source, checked once with one clear error each.

Reads: url, streams, startingOffsets, endingOffsets (batch), maxEntriesPerTrigger,
readFromReplicas, group, count, binary, splitEntries, retryTimeoutMs, partitionColumn.
Writes: url, binary, writeId (batch), idmpDuration, idmpMaxsize, retryTimeoutMs.
Both: etcd, cluster, etcdUser, etcdPassword (where the partitioned streams' records are).
Spark passes a few options of its own (path, checkpointLocation, ...); they are ignored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from base.etcdconn import ConfigError, EtcdConfig, default_cluster
from pipeline.cluster import XShardError, parse_id, parse_url

ETCD_OPTIONS = {"etcd", "cluster", "etcduser", "etcdpassword"}
READ_OPTIONS = {"url", "streams", "startingoffsets", "endingoffsets", "maxentriespertrigger",
                "readfromreplicas", "group", "count", "binary", "splitentries",
                "retrytimeoutms", "partitioncolumn"} | ETCD_OPTIONS
WRITE_OPTIONS = {"url", "binary", "writeid", "idmpduration", "idmpmaxsize",
                 "retrytimeoutms"} | ETCD_OPTIONS
SPARK_OPTIONS = {"path", "paths", "checkpointlocation", "queryname", "__partition_columns"}


@dataclass
class Options:
    url: str
    streams: list[str] = field(default_factory=list)  # names and globs, in the given order
    starting: str | dict[str, int] = "earliest"  # earliest | latest | {stream: exclusive id}
    ending: str | dict[str, int] = "latest"  # latest | {stream: inclusive id} (batch)
    max_entries: int | None = None
    from_replicas: bool = False
    group: str | None = None
    count: int = 1000
    binary: bool = False
    split_entries: int = 100_000
    retry_timeout: float = 60.0
    write_id: str | None = None
    idmp_duration: int = 86400
    idmp_maxsize: int = 10000
    partition_column: bool = False
    etcd: EtcdConfig | None = None  # None: every name is a plain stream key
    cluster: str = "xshard"


def _bool(name: str, v: str) -> bool:
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no"):
        return False
    raise XShardError(f"option {name}: expected true or false, got {v!r}")


def _int(name: str, v: str, lo: int, hi: int | None = None) -> int:
    try:
        n = int(v)
    except ValueError:
        raise XShardError(f"option {name}: expected an integer, got {v!r}") from None
    if n < lo or (hi is not None and n > hi):
        rng = f"between {lo} and {hi}" if hi is not None else f">= {lo}"
        raise XShardError(f"option {name}: must be {rng}, got {n}")
    return n


def _offsets(name: str, v: str, words: tuple[str, ...]) -> str | dict[str, int]:
    if v.lower() in words:
        return v.lower()
    try:
        d = json.loads(v)
    except ValueError as e:
        raise XShardError(f"option {name}: expected {' or '.join(words)} or JSON "
                          f'{{"stream": "ms-seq"}}, got {v!r} ({e})') from None
    if not isinstance(d, dict) or not all(isinstance(k, str) and isinstance(x, str)
                                          for k, x in d.items()):
        raise XShardError(f'option {name}: JSON must be an object {{"stream": "ms-seq"}}, '
                          f"got {v!r}")
    out = {}
    for k, x in d.items():
        try:
            out[k] = parse_id(x)
        except ValueError:
            raise XShardError(f"option {name}: {x!r} (stream {k!r}) is not a stream ID "
                              "ms-seq") from None
    return out


def _etcd(o: Options, given: dict[str, str]) -> None:
    """etcd (and cluster, etcdUser, etcdPassword): where the partitioned streams' records are
    read, as `xshard stream` reads them. Without etcd, every name is a plain stream key."""
    o.cluster = given.get("cluster") or default_cluster()
    if not given.get("etcd"):
        extra = sorted(k for k in ("etcduser", "etcdpassword") if k in given)
        if extra:
            raise XShardError(f"option(s) {', '.join(extra)} need option etcd")
        return
    try:
        o.etcd = EtcdConfig.parse(given["etcd"], given.get("etcduser", ""),
                                  given.get("etcdpassword", ""))
    except ConfigError as e:
        raise XShardError(f"option etcd: {e}") from None


def parse(opts: Mapping[str, str], write: bool) -> Options:
    """Check every option; unknown ones are an error that names them."""
    given = {k.lower(): v for k, v in opts.items()}
    allowed = WRITE_OPTIONS if write else READ_OPTIONS
    unknown = sorted(k for k in given if k not in allowed and k not in SPARK_OPTIONS)
    if unknown:
        kind = "writes" if write else "reads"
        raise XShardError(f"unknown option(s) {', '.join(unknown)} for xshard {kind}; known: "
                          f"{', '.join(sorted(allowed))}")
    if "url" not in given:
        raise XShardError("option url is required: redis://[:password@]host:port")
    parse_url(given["url"])
    o = Options(url=given["url"])
    if "binary" in given:
        o.binary = _bool("binary", given["binary"])
    if "retrytimeoutms" in given:
        o.retry_timeout = _int("retryTimeoutMs", given["retrytimeoutms"], 0) / 1000
    _etcd(o, given)
    if write:
        o.write_id = given.get("writeid") or None
        if "idmpduration" in given:
            o.idmp_duration = _int("idmpDuration", given["idmpduration"], 1, 86400)
        if "idmpmaxsize" in given:
            o.idmp_maxsize = _int("idmpMaxsize", given["idmpmaxsize"], 1, 10000)
        return o
    streams = [s.strip() for s in given.get("streams", "").split(",") if s.strip()]
    if not streams:
        raise XShardError("option streams is required: a comma list of stream names or globs "
                          "such as events:*")
    o.streams = streams
    o.starting = _offsets("startingOffsets", given.get("startingoffsets", "earliest"),
                          ("earliest", "latest"))
    o.ending = _offsets("endingOffsets", given.get("endingoffsets", "latest"), ("latest",))
    if "maxentriespertrigger" in given:
        o.max_entries = _int("maxEntriesPerTrigger", given["maxentriespertrigger"], 1)
    if "readfromreplicas" in given:
        o.from_replicas = _bool("readFromReplicas", given["readfromreplicas"])
    o.group = given.get("group") or None
    if "count" in given:
        o.count = _int("count", given["count"], 1, 1_000_000)
    if "partitioncolumn" in given:
        o.partition_column = _bool("partitionColumn", given["partitioncolumn"])
    if "splitentries" in given:
        o.split_entries = _int("splitEntries", given["splitentries"], 1)
    return o
