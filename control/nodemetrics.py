"""What `xshard status` reads from the primaries' /metrics: each replica's lag in seconds and
the consumer groups furthest behind (the node keeps both; RESP has no command for either)."""

from __future__ import annotations

from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

TIMEOUT = 2.0


@dataclass
class GroupLag:
    shard: str
    stream: str
    group: str
    lag: float
    pending: float = 0.0
    oldest_pending_s: float = 0.0


@dataclass
class PrimaryMetrics:
    lag_seconds: dict[str, float] = field(default_factory=dict)  # "host:port" of a replica
    groups: list[GroupLag] = field(default_factory=list)


def parse(text: str, shard: str) -> PrimaryMetrics:
    out = PrimaryMetrics()
    groups: dict[tuple[str, str], GroupLag] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "xshard_replica_lag_seconds":
                out.lag_seconds[s.labels["replica"]] = s.value
            elif s.name in ("xshard_stream_group_lag", "xshard_stream_group_pending",
                            "xshard_stream_group_oldest_pending_age_seconds"):
                key = (s.labels["stream"], s.labels["group"])
                g = groups.setdefault(key, GroupLag(shard, key[0], key[1], 0))
                if s.name == "xshard_stream_group_lag":
                    g.lag = s.value
                elif s.name == "xshard_stream_group_pending":
                    g.pending = s.value
                else:
                    g.oldest_pending_s = s.value
    out.groups = list(groups.values())
    return out


async def fetch(host: str, port: int, shard: str) -> PrimaryMetrics | None:
    """The primary's figures, or None when its metrics endpoint does not answer."""
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=TIMEOUT)) as s, \
                s.get(f"http://{host}:{port}/metrics") as r:
            if r.status != 200:
                return None
            text = await r.text()
    except (TimeoutError, aiohttp.ClientError, OSError):
        return None
    return parse(text, shard)


def top_groups(found: list[PrimaryMetrics], n: int = 5) -> list[GroupLag]:
    """The `n` groups with the largest lag (ties: the most pending first)."""
    groups = [g for m in found for g in m.groups]
    return sorted(groups, key=lambda g: (-g.lag, -g.pending, g.shard, g.stream, g.group))[:n]
