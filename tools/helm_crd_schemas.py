#!/usr/bin/env python3
"""Write the JSON schemas of the Prometheus Operator resources the chart renders
(ServiceMonitor, PodMonitor, PrometheusRule: monitoring.coreos.com/v1) to tests/helm/crds/,
for validating the rendered objects strictly as kubernetes-validate does the built-in kinds.

The source is the `cloudcoil-models-prometheus-operator` package (PyPI): pydantic models
generated from the operator's CRDs. Run once, with the package installed outside the
project's environment:

    pip install --target /tmp/cc cloudcoil-models-prometheus-operator
    PYTHONPATH=/tmp/cc python tools/helm_crd_schemas.py

The models' JSON schema is turned back into the CRDs' shape: camelCase names (the few fields
the generator left without an alias), no null alternatives, no unknown fields
(additionalProperties: false, as kubeconform's strict mode).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent.parent / "tests" / "helm" / "crds"
KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def camel(name: str) -> str:
    return re.sub(r"_([a-z])", lambda m: m[1].upper(), name)


def clean(s: Any) -> Any:
    if isinstance(s, list):
        return [clean(x) for x in s]
    if not isinstance(s, dict):
        return s
    if "anyOf" in s:  # Optional[X]: X (a CRD field is absent, never null)
        alts = [a for a in s["anyOf"] if a != {"type": "null"}]
        if len(alts) == 1:
            rest = {k: v for k, v in s.items() if k != "anyOf"}
            return clean({**rest, **alts[0]})
    out = {}
    for k, v in s.items():
        if k in ("title", "default"):
            continue
        if k == "properties":
            out[k] = {camel(n): clean(p) for n, p in v.items()}
        elif k == "required":
            out[k] = [camel(n) for n in v]
        else:
            out[k] = clean(v)
    if out.get("type") == "object" and "properties" in out:
        out.setdefault("additionalProperties", False)
    return out


def main() -> None:
    from cloudcoil.models.prometheus_operator import v1  # type: ignore[import-not-found]

    OUT.mkdir(parents=True, exist_ok=True)
    for kind in KINDS:
        schema = clean(getattr(v1, kind).model_json_schema(by_alias=True))
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        (OUT / f"{kind.lower()}-monitoring-v1.json").write_text(
            json.dumps(schema, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
