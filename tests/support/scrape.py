"""Reading a process's /metrics in tests: fetch, parse, pick samples, run promtool on it."""

from __future__ import annotations

import shutil
import subprocess
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["fetch", "get", "samples", "value", "promtool_check"]


def get(port: int, path: str, accept: str = "") -> tuple[int, str, str]:
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}",
                                 headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def fetch(port: int) -> str:
    status, _, body = get(port, "/metrics")
    assert status == 200, body
    return body


def samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """The samples named `name` (exact sample name, e.g. `..._bucket`), keyed by sorted labels."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float | None:
    """One sample's value, or None when there is no such series."""
    want = tuple(sorted(labels.items()))
    for key, v in samples(text, name).items():
        if tuple(kv for kv in key if kv[0] in labels) == want:
            return v
    return None


def promtool_check(text: str) -> str:
    """`promtool check metrics` on the text: its complaints ('' when clean)."""
    binary = shutil.which("promtool")
    assert binary is not None
    p = subprocess.run([binary, "check", "metrics"], input=text, capture_output=True, text=True,
                       timeout=60)
    return (p.stdout + p.stderr).strip() if p.returncode or p.stdout or p.stderr else ""
