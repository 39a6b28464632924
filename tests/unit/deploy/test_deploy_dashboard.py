import json

from deploy import validate


def test_every_dashboard_query_names_a_known_metric_or_recording_rule():
    unknown = validate.dashboard_metric_names() - validate.KNOWN_METRICS - validate.recording_rule_names()
    assert not unknown


def test_every_panel_has_a_query_and_unique_ids():
    dashboard = json.loads(validate.DASHBOARD.read_text())
    panels = [panel for panel in dashboard["panels"] if panel["type"] != "row"]
    assert all(panel["targets"] for panel in panels)
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_dashboard_covers_what_sres_watch():
    names = validate.dashboard_metric_names()
    for metric in (
        "model:bertserve_request_duration_seconds:p99_5m",
        "model:nv_inference_requests:rate5m",
        "bertserve_failures_total",
        "model:nv_inference_batch_size:avg_rate5m",
        "nv_inference_queue_duration_us",
        "bertserve_padding_ratio_sum",
        "model:bertserve_slo_errors:ratio_rate1h",
        "nv_cpu_utilization",
        "nv_gpu_utilization",
        "nv_gpu_memory_used_bytes",
    ):
        assert metric in names
