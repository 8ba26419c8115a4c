"""Partitioned streams in the data source: which stream keys a logical name stands for.

A partitioned stream (docs/partitioned-streams.md) is a record in etcd, `pstreams/<name>` under
`/xshard/<cluster>/`: its partition count, its ID stride, its key field and the stream key of
each partition. The nodes know nothing of logical names, and the key field lives only in the
record, so the data source reads the records from etcd (options `etcd`, `cluster`), as
`xshard stream` and the routers do. Only the driver reads them: each time it plans (a batch
read, every micro-batch, every write), so partitions that `xshard stream alter` adds are read
from the next micro-batch on, from their first entry. Executors get the stream keys in their
input partitions, or the records inside the writer.

A `Source` is one stream key to read and the name its rows carry in the `stream` column: a
plain stream is its own name, a partition carries its logical stream's name and its index.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase

from base.records import PStreamRecord
from base.store import read_view
from node.stream import partition_of_key
from pipeline.cluster import Topology, XShardError
from pipeline.options import Options

Records = dict[bytes, PStreamRecord]


@dataclass(frozen=True)
class Source:
    key: bytes  # the stream key that is read
    name: bytes  # the `stream` column's value
    partition: int | None = None  # the partition's index, for a partition of a logical stream


def load(opts: Options) -> Records:
    """The partitioned streams' records (logical name -> record); none without `etcd`."""
    if opts.etcd is None:
        return {}
    try:
        view = read_view(opts.etcd, opts.cluster)
    except Exception as e:  # noqa: BLE001 - any etcd failure is the user's to see
        raise XShardError(f"option etcd: cannot read the partitioned streams of cluster "
                          f"{opts.cluster!r} from {opts.etcd.url}: {type(e).__name__}: {e}"
                          ) from None
    return {name.encode("utf-8", "surrogateescape"): e.value for name, e in view.pstreams.items()}


def expand(keys: list[bytes], patterns: list[str], records: Records) -> list[Source]:
    """Sources for stream keys found by name or SCAN, and for globs matched against the
    logical names. A logical name becomes its partitions; a partition key found by itself (a
    glob such as `*` matches those too) is read as a partition of its logical stream."""
    owner = {k.encode(): (name, p) for name, rec in records.items()
             for p, k in enumerate(rec.keys)}
    names = set(k for k in keys if k in records)
    for pat in patterns:
        if set("*?[") & set(pat):
            names.update(n for n in records
                         if fnmatchcase(n.decode("utf-8", "surrogateescape"), pat))
    out: dict[bytes, Source] = {}
    for k in keys:
        if k in owner:
            out[k] = Source(k, *owner[k])
        elif k not in records:
            out[k] = Source(k, k)
    for n in names:
        for p, pk in enumerate(records[n].keys):
            out[pk.encode()] = Source(pk.encode(), n, p)
    return [out[k] for k in sorted(out)]


def named(records: Records, key: bytes) -> Source:
    """The source of a stream key (from an offset): a partition if a record lists it."""
    for name, rec in records.items():
        for p, k in enumerate(rec.keys):
            if k.encode() == key:
                return Source(key, name, p)
    return Source(key, key)


def _glob_escape(name: bytes) -> bytes:
    return b"".join(b"\\" + bytes([ch]) if ch in b"*?[]\\" else bytes([ch]) for ch in name)


def refuse_unseen_logical(topo: Topology, names: list[bytes]) -> None:
    """Without `etcd`, a logical name would read as an empty plain stream: a name that is no
    key but has partition keys `{TAG}name#p/S` on the shards is refused with the option to
    give. Only missing names are looked for (one SCAN each), so existing streams cost one
    EXISTS."""
    for name in names:
        shard = topo.shard_of(name)
        if topo.call(lambda name=name, shard=shard: topo.conn(topo.node(shard)).exists(name),
                     "EXISTS"):
            continue
        found = [k for k in topo.scan(b"{*}" + _glob_escape(name) + b"#*")
                 if partition_of_key(k) is not None and k[k.index(b"}") + 1:k.rindex(b"#")] == name]
        if found:
            raise XShardError(
                f"stream {name.decode('utf-8', 'surrogateescape')!r} is a partitioned stream "
                f"(partition keys such as {found[0].decode('utf-8', 'surrogateescape')!r} "
                "exist): give the option etcd (and cluster) so that its partitions are read")
