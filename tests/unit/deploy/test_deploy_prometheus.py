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
        for test in yaml.safe_load(validate.RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", ())
    }
    alerts = {rule["alert"] for group in validate.load_rule_groups() for rule in group["rules"] if "alert" in rule}
    assert alerts == tested


def test_rules_name_only_known_metrics_and_recording_rules():
    known = validate.KNOWN_METRICS | validate.recording_rule_names()
    for name, expr in validate.rule_expressions():
        assert validate.metric_names(expr) <= known, name


def test_latency_slo_uses_the_10ms_bucket():
    exprs = dict(validate.rule_expressions())
    for window in ("5m", "30m", "1h", "6h"):
        assert (
            'bertserve_request_duration_seconds_bucket{le="0.01"}'
            in exprs[f"model:bertserve_slow_requests:ratio_rate{window}"]
        )


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
