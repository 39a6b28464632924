"""The rule tests catch the defects the rules once had: each fix reverted in a copy of the rules makes promtool's
rule tests fail on the alert or rule it concerns."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from deploy import validate

pytestmark = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool not installed (Debian `prometheus`; deploy/ci-tools.sh)"
)

ALERTS, RECORDING = "alerts.yml", "recording.yml"
REJECTIONS = (
    '            or rate(bertserve_failures_total{{job="bertserve",reason=~"queue_full|queue_timeout|internal"}}[{w}])\n'
    '            or (rate(nv_inference_request_failure{{job="bertserve",reason="REJECTED"}}[{w}])\n'
    '                and on (namespace, job, instance, model) bertserve_request_duration_seconds_count{{job="bertserve"}})\n'
)
OLD_QUEUE_SIGNAL = (
    'sum by (namespace, job, pod, instance) (rate(nv_inference_queue_duration_us{job="bertserve",model="bert"}[2m]))'
    " / 1e6\n          / clamp_min(sum by (namespace, job, pod, instance) ("
    'rate(nv_inference_request_success{job="bertserve",model="bert"}[2m])), 1e-9)\n'
)

# (what the defect was, rule file, [(fixed text, the text before the fix)], the test file, what must fail)
REGRESSIONS = [
    (
        "a pod still exporting pages as down",
        ALERTS,
        [
            (
                'expr: sum by (namespace, job) (up{job="bertserve"}) == 0\n        for: 5m',
                'expr: up{job="bertserve"} == 0\n        for: 2m',
            ),
        ],
        0,
        "BertserveDown",
    ),
    (
        "no absent() alert for a lost scrape",
        ALERTS,
        [('expr: absent(up{job="bertserve"})', 'expr: up{job="bertserve"} == -1')],
        0,
        "BertserveMetricsAbsent",
    ),
    (
        "a queue held full cannot alert (it must also be growing)",
        ALERTS,
        [
            (
                validate.RULE_FILES[1]
                .read_text()
                .split("- alert: BertserveSaturated\n        expr: |\n")[1]
                .split("        for: 10m")[0],
                '          sum by (namespace, job, instance, model) (nv_inference_pending_request_count{job="bertserve"}) > 16\n'
                "          and sum by (namespace, job, instance, model) "
                '(deriv(nv_inference_pending_request_count{job="bertserve"}[10m])) > 0\n',
            )
        ],
        0,
        "BertserveSaturated",
    ),
    (
        "no ticket for a slow burn over a day",
        ALERTS,
        [("model:bertserve_slo_errors:ratio_rate1d > (3 * 0.01)", "model:bertserve_slo_errors:ratio_rate1d > 1")],
        1,
        "BertserveLatencySLOBudgetBurn1d",
    ),
    (
        "no ticket for a slow burn over three days",
        ALERTS,
        [("model:bertserve_slo_errors:ratio_rate3d > (1 * 0.01)", "model:bertserve_slo_errors:ratio_rate3d > 1")],
        1,
        "BertserveLatencySLOBudgetBurn3d",
    ),
    (
        "the error page fires on bad input",
        ALERTS,
        [
            (
                "expr: model:bertserve_server_errors:ratio_rate5m > 0.05",
                "expr: model:nv_inference_request_errors:ratio_rate5m > 0.05",
            )
        ],
        0,
        "BertserveHighErrorRatio",
    ),
    (
        "refused requests are not bad events of the SLO",
        RECORDING,
        [(REJECTIONS.format(w=w), "") for w in ("5m", "1h")],
        0,
        "BertserveLatencySLOFastBurn",
    ),
    (
        "the autoscaler's signal is mean queue time (2 ms target), which idle pods exceed",
        RECORDING,
        [
            (
                "sum by (namespace, job, pod, instance) (\n"
                '            rate(bertserve_stage_duration_seconds_sum{job="bertserve",model!="tokenizer",'
                'stage=~"tokenize|collate|infer|respond"}[2m])\n          )\n',
                OLD_QUEUE_SIGNAL,
            ),
        ],
        0,
        "pod:bertserve_encoder_busy:ratio_rate2m) / 0.002)",
    ),
]


@pytest.mark.parametrize(
    ("defect", "rule_file", "reverts", "test_file", "failing"), REGRESSIONS, ids=[r[0] for r in REGRESSIONS]
)
def test_rule_tests_fail_with_the_defect_back(tmp_path: Path, defect, rule_file, reverts, test_file, failing):
    prometheus = tmp_path / "prometheus"
    shutil.copytree(validate.DEPLOY / "prometheus", prometheus)
    path = prometheus / "rules" / rule_file
    text = path.read_text()
    for fixed, before in reverts:
        assert fixed in text, f"the fix is no longer in {rule_file}: {fixed!r}"
        text = text.replace(fixed, before)
    path.write_text(text)
    tests = prometheus / "tests" / validate.RULE_TESTS[test_file].name
    if failing.endswith("/ 0.002)"):  # the old signal came with its own target: 2 ms
        tests.write_text(tests.read_text().replace("/ 0.6)", "/ 0.002)"))
    subprocess.run(["promtool", "check", "rules", str(path)], check=True, capture_output=True)
    result = subprocess.run(["promtool", "test", "rules", str(tests)], capture_output=True, text=True, timeout=300)
    assert result.returncode != 0, f"the rule tests pass with the defect back: {defect}"
    assert failing in result.stdout + result.stderr, result.stdout[-3000:]
