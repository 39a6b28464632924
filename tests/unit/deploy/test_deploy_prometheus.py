import re
import shutil

import pytest
import yaml

from deploy import validate

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian `prometheus`; deploy/ci-tools.sh)"
)


@needs_promtool
def test_promtool_check_config_rules_and_rule_unit_tests():
    validate.check_prometheus()


@needs_promtool
def test_rule_unit_tests_cover_every_alert():
    tested = {
        case["alertname"]
        for path in validate.RULE_TESTS
        for test in yaml.safe_load(path.read_text())["tests"]
        for case in test.get("alert_rule_test", ())
    }
    alerts = {rule["alert"] for group in validate.load_rule_groups() for rule in group["rules"] if "alert" in rule}
    assert alerts == tested


def test_rules_name_only_known_metrics_and_recording_rules():
    known = validate.KNOWN_METRICS | validate.recording_rule_names()
    for name, expr in validate.rule_expressions():
        assert validate.metric_names(expr) <= known, name


def test_slo_uses_the_10ms_bucket_and_counts_refusals_over_every_window():
    exprs = dict(validate.rule_expressions())
    for window in ("5m", "30m", "1h", "2h", "6h", "1d", "3d"):
        expr = exprs[f"model:bertserve_slo_errors:ratio_rate{window}"]
        assert f'bertserve_request_duration_seconds_bucket{{job="bertserve",le="0.01"}}[{window}]' in expr
        assert f'reason=~"queue_full|queue_timeout|internal"}}[{window}]' in expr
        assert f'reason="REJECTED"}}[{window}]' in expr


def test_every_aggregation_keeps_namespace_and_job():
    for name, expr in validate.rule_expressions():
        for grouping in re.findall(r"\b(?:sum|max|min|avg|count) by \(([^)]*)\)", expr):
            labels = {label.strip() for label in grouping.split(",")}
            assert {"namespace", "job"} <= labels, f"{name}: by ({grouping})"


def test_every_alert_links_a_runbook_section_in_the_repository():
    root = validate.DEPLOY.parent
    for group in validate.load_rule_groups():
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
            doc = root / path
            assert doc.is_file(), rule["alert"]
            headings = {_slug(line[3:]) for line in doc.read_text().splitlines() if line.startswith("## ")}
            assert anchor in headings, f"{rule['alert']}: no section #{anchor} in {path}"
            assert rule["labels"]["severity"] in ("page", "ticket", "warning"), rule["alert"]


def _slug(heading: str) -> str:
    """The anchor GitHub and most Markdown renderers give a heading."""
    return re.sub(r"[^a-z0-9 -]", "", heading.strip().lower()).replace(" ", "-")


def test_prometheusrule_is_generated_from_the_rule_files():
    validate.check_prometheusrule_in_sync()
    shipped = yaml.safe_load(validate.PROMETHEUS_RULE.read_text())
    assert shipped["spec"]["groups"] == validate.load_rule_groups()


def test_metric_names_reads_selectors_through_functions_and_operators():
    expr = (
        "histogram_quantile(0.99, sum by (le) (rate(a_bucket[5m]))) / on (model) group_left b"
        " + max_over_time(c[1h:5m]) - -d offset 5m"
    )
    assert validate.metric_names(expr) == {"a_bucket", "b", "c", "d"}


def test_local_scrape_config_covers_make_serve_and_its_replicas():
    from serving.launcher.config import ServeConfig
    from serving.launcher.replicas import DEFAULT_BASE_PORT, replicas

    config = yaml.safe_load(validate.PROMETHEUS_CONFIG.read_text())
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "bertserve"]
    targets = {t for static in job["static_configs"] for t in static["targets"]}
    wanted = {f"127.0.0.1:{ServeConfig().metrics_port}"}
    wanted |= {f"127.0.0.1:{r.metrics_port}" for r in replicas(4, DEFAULT_BASE_PORT)}
    assert wanted <= targets
