"""values.yaml, values.schema.json and the values table of the chart's README
(helm/xshard/README.md) agree."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.conftest import REPO
from tests.helm.chart import CHART


def _leaves(values: object, schema: dict, prefix: str = "") -> list[tuple[str, dict]]:
    out = []
    for key, v in (values or {}).items():  # type: ignore[union-attr]
        s = schema.get("properties", {}).get(key)
        assert s is not None, f"{prefix}{key} is in values.yaml but not in the schema"
        assert s.get("description"), f"{prefix}{key} has no description in the schema"
        if isinstance(v, dict) and "properties" in s:
            out += _leaves(v, s, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", s))
    return out


def test_every_value_has_a_described_schema_entry_and_every_entry_a_default() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    documented = {k for k, _s in _leaves(values, schema)}

    def schema_leaves(s: dict, prefix: str = "") -> set[str]:
        out = set()
        for key, sub in s.get("properties", {}).items():
            if key == "global":
                continue
            if sub.get("type") == "object" and "properties" in sub:
                out |= schema_leaves(sub, f"{prefix}{key}.")
            else:
                out.add(f"{prefix}{key}")
        return out

    assert schema_leaves(schema) == documented


def test_readme_values_table_is_current() -> None:
    r = subprocess.run([sys.executable, "tools/helm_values_table.py", "--check"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    readme = (CHART / "README.md").read_text()
    assert "| `node.appendfsync` |" in readme and "| `etcd.external.endpoints` |" in readme
