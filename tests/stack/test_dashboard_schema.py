"""The generated dashboards type-check against Grafana's published schema (`@grafana/schema`).

TypeScript checks the dashboard JSON as an object literal of type `Dashboard`
(excess properties are errors), and each time-series panel's options and field
config against that panel's own published types. node and npm install the pinned
packages once per machine into a cache outside the repository.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from otel_grpo.generate._checks import all_panels
from tests._support.npm_cache import npm_packages
from otel_grpo.generate.dashboards import dashboards

SCHEMA, TYPESCRIPT = "13.2.3", "5.9.3"
TIMESERIES = "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen"


@pytest.fixture(scope="module")
def tsc() -> Path:
    modules = npm_packages(f"grafana-schema-{SCHEMA}", f"@grafana/schema@{SCHEMA}", f"typescript@{TYPESCRIPT}",
                           needs="node npm")
    return modules / ".bin/tsc"


def _program(dashboard: dict) -> str:
    lines = [
        "import type { AnnotationQuery, Dashboard } from '@grafana/schema';",
        f"import type {{ Options, FieldConfig }} from '{TIMESERIES}';",
        # JSON holds an enum's value ("table"), TypeScript's enums are nominal
        # (LegendDisplayMode.Table): compare values, keep every other check.
        "type Json<T> = T extends string ? `${T}` : T extends object ? { [K in keyof T]: Json<T[K]> } : T;",
        # The published AnnotationQuery has no datasource-specific fields; the Prometheus
        # annotation's own (what its query editor saves) are declared here, nothing else.
        "type PromAnnotation = Json<AnnotationQuery> & { expr: string; titleFormat?: string; textFormat?: string; step?: string };",
        "type Checked = Omit<Json<Dashboard>, 'annotations'> & { annotations: { list: PromAnnotation[] } };",
        f"export const dashboard: Checked = {json.dumps(dashboard, indent=1)};",
    ]
    for p in all_panels(dashboard):
        if p["type"] == "timeseries":
            lines.append(f"export const options_{p['id']}: Json<Options> = {json.dumps(p['options'])};")
            custom = json.dumps(p["fieldConfig"]["defaults"]["custom"])
            lines.append(f"export const custom_{p['id']}: Json<FieldConfig> = {custom};")
    return "\n".join(lines) + "\n"


def _check(tsc: Path, source: str, where: Path) -> subprocess.CompletedProcess:
    (where / "dashboard.ts").write_text(source)
    (where / "tsconfig.json").write_text(json.dumps({"compilerOptions": {
        "strict": True, "noEmit": True, "module": "esnext", "moduleResolution": "bundler",
        "target": "es2022", "skipLibCheck": True, "typeRoots": [], "baseUrl": str(tsc.parents[2]),
        "paths": {"@grafana/schema": ["node_modules/@grafana/schema"],
                  "@grafana/schema/*": ["node_modules/@grafana/schema/*"]},
    }, "files": ["dashboard.ts"]}))
    env = {**os.environ, "NODE_PATH": str(tsc.parents[2] / "node_modules")}
    return subprocess.run([str(tsc), "-p", str(where / "tsconfig.json")], capture_output=True, text=True,
                          timeout=300, cwd=where, env=env)


def test_dashboards_type_check_against_grafana_schema(tsc, tmp_path):
    for name, d in dashboards().items():
        out = _check(tsc, _program(d), tmp_path)
        assert out.returncode == 0, f"{name}:\n{out.stdout[-4000:]}{out.stderr[-2000:]}"


def test_the_check_rejects_a_misspelt_field(tsc, tmp_path):
    d = dashboards()["grpo-overview.json"]
    broken = {**d, "panels": [{**d["panels"][1], "gridPoss": {"h": 1}}] + d["panels"][2:]}
    out = _check(tsc, _program(broken), tmp_path)
    assert out.returncode != 0 and "gridPoss" in out.stdout
