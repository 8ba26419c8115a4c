"""The Prometheus set-up `xshard up` writes under `<dir>/prometheus/`: `targets.json` (file_sd:
one target per process with the labels the chart's rules and dashboard group by) and a ready
`prometheus.yml` that scrapes them and loads the chart's rules."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

# The one copy of the rules, in the chart (the Helm chart templates the same file).
RULES = Path(__file__).resolve().parent.parent / "helm/xshard/files/rules/xshard-rules.yml"


@dataclass
class Target:
    kind: str  # node | router | controller
    name: str  # node id, router id or "controller"
    port: int  # its --metrics-port
    shard: str = ""  # nodes only: router and controller metrics carry a shard label of their own


def targets_json(cluster: str, targets: list[Target], host: str = "127.0.0.1") -> list[dict]:
    out = []
    for t in targets:
        labels = {"cluster": cluster, "kind": t.kind, "node": t.name}
        if t.shard:
            labels["shard"] = t.shard
        out.append({"targets": [f"{host}:{t.port}"], "labels": labels})
    return out


def prometheus_yml(targets_path: Path, scrape_interval: float, rules: Path | None) -> str:
    iv = f"{scrape_interval:g}s"
    lines = [
        "# Written by `xshard up`; rewritten at every start (the metrics ports change).",
        "global:",
        f"  scrape_interval: {iv}",
        f"  evaluation_interval: {iv}",
    ]
    if rules is not None:
        lines += ["rule_files:", f"  - {json.dumps(str(rules))}"]
    lines += [
        "scrape_configs:",
        "  - job_name: xshard",
        "    file_sd_configs:",
        f"      - files: [{json.dumps(str(targets_path))}]",
        f"        refresh_interval: {iv}",
    ]
    return "\n".join(lines) + "\n"


def write(directory: Path, cluster: str, targets: list[Target],
          scrape_interval: float = 5.0) -> tuple[Path, Path | None]:
    """Write targets.json and prometheus.yml (each atomically); returns the config's path and
    the rules file it loads (None when the chart is not next to this package)."""
    directory.mkdir(parents=True, exist_ok=True)
    tpath = directory / "targets.json"
    rules = RULES if RULES.exists() else None
    _put(tpath, json.dumps(targets_json(cluster, targets), indent=2) + "\n")
    cpath = directory / "prometheus.yml"
    _put(cpath, prometheus_yml(tpath, scrape_interval, rules))
    return cpath, rules


def _put(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
