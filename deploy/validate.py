"""Validate everything under deploy/: Prometheus config and rules, rule unit tests, the Grafana dashboard's
metric names, the Dockerfile, and each Kubernetes overlay against the Kubernetes and CRD schemas.

    python deploy/validate.py                        # every check; exit 1 on any failure
    python deploy/validate.py --write-prometheusrule  # regenerate k8s/base/prometheusrule.yaml from the rules

Needs promtool (Debian `prometheus`), kubectl (for `kubectl kustomize`), hadolint and the Python packages
kubernetes-validate, jsonschema and promql-parser: deploy/ci-tools.sh installs them.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

log = logging.getLogger(__name__)

DEPLOY = Path(__file__).resolve().parent
PROMETHEUS_CONFIG = DEPLOY / "prometheus" / "prometheus.yml"
RULE_FILES = (DEPLOY / "prometheus" / "rules" / "recording.yml", DEPLOY / "prometheus" / "rules" / "alerts.yml")
RULE_TESTS = (
    DEPLOY / "prometheus" / "tests" / "rules_test.yml",
    DEPLOY / "prometheus" / "tests" / "rules_ticket_test.yml",
)
DASHBOARD = DEPLOY / "grafana" / "bertserve-dashboard.json"
DOCKERFILE = DEPLOY / "Dockerfile"
K8S = DEPLOY / "k8s"
OVERLAYS = (K8S / "overlays" / "cpu", K8S / "overlays" / "gpu")
PROMETHEUS_RULE = K8S / "base" / "prometheusrule.yaml"
ADAPTER_CONFIG = K8S / "prometheus-adapter" / "config.yaml"
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): K8S / "schemas" / "servicemonitor-v1.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): K8S / "schemas" / "prometheusrule-v1.json",
}
KUBERNETES_VERSION = "1.32.0"

# Values that stand in for Grafana's template variables so that a dashboard query is plain PromQL.
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "${model}": ".*", "$model": ".*"}


def grafana_to_promql(expr: str) -> str:
    for variable, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def metric_names(expr: str) -> set[str]:
    """Every metric name a PromQL expression selects, from the real PromQL parser's syntax tree."""
    import promql_parser

    names: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            return
        for attr in ("expr", "lhs", "rhs", "param", "vector_selector"):
            child = getattr(node, attr, None)
            if child is not None:
                walk(child)
        for child in getattr(node, "args", None) or ():
            walk(child)

    walk(promql_parser.parse(expr))
    return names


def load_rule_groups() -> list[dict]:
    return [group for path in RULE_FILES for group in yaml.safe_load(path.read_text())["groups"]]


def recording_rule_names() -> set[str]:
    return {rule["record"] for group in load_rule_groups() for rule in group["rules"] if "record" in rule}


def rule_expressions() -> Iterator[tuple[str, str]]:
    """(rule name, expression) for every recording and alerting rule."""
    for group in load_rule_groups():
        for rule in group["rules"]:
            yield rule.get("record") or rule["alert"], rule["expr"]


def dashboard_queries(path: Path = DASHBOARD) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every panel target, Grafana variables substituted."""
    dashboard = json.loads(path.read_text())
    return [
        (panel["title"], grafana_to_promql(target["expr"]))
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
    ]


def dashboard_variable_selectors(path: Path = DASHBOARD) -> list[str]:
    """The series selectors inside the dashboard's label_values() variable queries."""
    dashboard = json.loads(path.read_text())
    selectors = []
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*\w+\)", variable["definition"])
            if match is None:
                raise ValueError(f"dashboard variable {variable['name']}: unexpected query {variable['definition']}")
            selectors.append(match.group(1))
    return selectors


def dashboard_metric_names(path: Path = DASHBOARD) -> set[str]:
    names: set[str] = set()
    for _, expr in dashboard_queries(path):
        names |= metric_names(expr)
    for selector in dashboard_variable_selectors(path):
        names |= metric_names(selector)
    return names


def render_prometheusrule() -> str:
    """The PrometheusRule resource carrying exactly the groups of the shipped rule files."""
    resource = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "bertserve", "labels": {"app.kubernetes.io/name": "bertserve"}},
        "spec": {"groups": load_rule_groups()},
    }
    header = "# Generated from deploy/prometheus/rules/*.yml by `python deploy/validate.py --write-prometheusrule`.\n"
    return header + yaml.dump(resource, Dumper=_BlockDumper, sort_keys=False, width=120)


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (rule expressions) as literal blocks, the way the rule files have them."""


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_BlockDumper.add_representer(str, _represent_str)


def kustomize_build(overlay: Path) -> list[dict]:
    result = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=False, timeout=120
    )
    if result.returncode != 0:
        raise RuntimeError(f"kubectl kustomize {overlay} failed:\n{result.stderr}")
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def validate_resource(resource: dict) -> None:
    """Raise if the resource does not match its schema: the shipped CRD schemas for the Prometheus Operator's
    kinds, kubernetes-validate's strict Kubernetes schemas for the rest."""
    import jsonschema
    import kubernetes_validate

    crd_schema = CRD_SCHEMAS.get((resource["apiVersion"], resource["kind"]))
    if crd_schema is not None:
        jsonschema.validate(resource, json.loads(crd_schema.read_text()))
    else:
        kubernetes_validate.validate(resource, KUBERNETES_VERSION, strict=True)


def run_tool(*command: str) -> str:
    if shutil.which(command[0]) is None:
        raise RuntimeError(f"{command[0]} not found: run deploy/ci-tools.sh")
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    output = (result.stdout + result.stderr).strip()
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{output}")
    return output


def hadolint_command() -> str:
    local = Path(sys.executable).parent / "hadolint"
    return str(local) if local.exists() else "hadolint"


def check_prometheus() -> None:
    run_tool("promtool", "check", "config", str(PROMETHEUS_CONFIG))
    run_tool("promtool", "check", "rules", *map(str, RULE_FILES))
    run_tool("promtool", "test", "rules", *map(str, RULE_TESTS))


def check_prometheusrule_in_sync() -> None:
    if PROMETHEUS_RULE.read_text() != render_prometheusrule():
        raise RuntimeError(f"{PROMETHEUS_RULE} is stale: run python deploy/validate.py --write-prometheusrule")


def check_dashboard_names() -> None:
    unknown = dashboard_metric_names() - recording_rule_names() - KNOWN_METRICS
    if unknown:
        raise RuntimeError(f"dashboard queries unknown metrics: {sorted(unknown)}")


def check_dockerfile() -> None:
    run_tool(hadolint_command(), "--failure-threshold", "warning", str(DOCKERFILE))


def check_overlays() -> None:
    for overlay in OVERLAYS:
        for resource in kustomize_build(overlay):
            try:
                validate_resource(resource)
            except Exception as error:
                raise RuntimeError(
                    f"{overlay.name}: {resource['kind']}/{resource['metadata']['name']}: {error}"
                ) from error


def _histogram(name: str) -> set[str]:
    return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}


def _summary(name: str) -> set[str]:
    return {name, f"{name}_sum", f"{name}_count"}


# Every metric the server exposes (Triton 2.51 with summary_latencies=true, and the project's models), and
# `up`, which Prometheus adds per target. nv_gpu_* appear only where the server sees a GPU.
KNOWN_METRICS = (
    {
        "up",
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_count",
        "nv_inference_exec_count",
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
        "nv_inference_pending_request_count",
        "nv_cpu_utilization",
        "nv_cpu_memory_total_bytes",
        "nv_cpu_memory_used_bytes",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
        "nv_gpu_memory_total_bytes",
        "bertserve_tokens_total",
        "bertserve_truncated_total",
        "bertserve_failures_total",
        "bertserve_queue_backlog_seconds",
        "bertserve_deadline_seconds",
        "loadtest_requests_total",
    }
    | _summary("nv_inference_request_summary_us")
    | _summary("nv_inference_queue_summary_us")
    | _histogram("bertserve_request_duration_seconds")
    | _histogram("bertserve_stage_duration_seconds")
    | _histogram("bertserve_batch_size")
    | _histogram("bertserve_padding_ratio")
    | _histogram("loadtest_request_duration_seconds")
)
GPU_METRICS = frozenset({"nv_gpu_utilization", "nv_gpu_memory_used_bytes", "nv_gpu_memory_total_bytes"})

CHECKS: dict[str, Callable[[], None]] = {
    "prometheus config, rules and rule tests": check_prometheus,
    "PrometheusRule matches the rule files": check_prometheusrule_in_sync,
    "dashboard metric names": check_dashboard_names,
    "Dockerfile (hadolint)": check_dockerfile,
    "kustomize overlays against the schemas": check_overlays,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write-prometheusrule", action="store_true", help=f"regenerate {PROMETHEUS_RULE.name}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.write_prometheusrule:
        PROMETHEUS_RULE.write_text(render_prometheusrule())
        log.info("wrote %s", PROMETHEUS_RULE)
        return 0
    failed = 0
    for name, check in CHECKS.items():
        try:
            check()
        except Exception as error:  # report every check, not only the first failure
            failed += 1
            log.error("FAIL %s: %s", name, error)
        else:
            log.info("ok   %s", name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
