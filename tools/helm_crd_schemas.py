#!/usr/bin/env python3
"""Write the JSON schemas of the custom resources the chart renders (the Prometheus
Operator's ServiceMonitor, PodMonitor, PrometheusRule: monitoring.coreos.com/v1; cert-manager's
Certificate: cert-manager.io/v1) to tests/helm/crds/, for validating the rendered objects
strictly as kubernetes-validate does the built-in kinds.

The sources are the `cloudcoil-models-prometheus-operator` and `cloudcoil-models-cert-manager`
packages (PyPI): pydantic models generated from the CRDs. Run once, with the packages
installed outside the project's environment:

    pip install --target /tmp/cc cloudcoil-models-prometheus-operator \
        cloudcoil-models-cert-manager
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
# (module, kinds, file suffix)
SOURCES = (("cloudcoil.models.prometheus_operator.v1",
            ("ServiceMonitor", "PodMonitor", "PrometheusRule"), "monitoring-v1"),
           ("cloudcoil.models.cert_manager.v1", ("Certificate",), "cert-manager-v1"))


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
    import importlib

    OUT.mkdir(parents=True, exist_ok=True)
    for module, kinds, suffix in SOURCES:
        models = importlib.import_module(module)
        for kind in kinds:
            schema = clean(getattr(models, kind).model_json_schema(by_alias=True))
            schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
            (OUT / f"{kind.lower()}-{suffix}.json").write_text(
                json.dumps(schema, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
