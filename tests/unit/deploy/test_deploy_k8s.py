import copy
import shutil

import pytest
import yaml

from deploy import validate

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


# "overlays/gpu", not "gpu": the gpu keyword would skip the test where CUDA is absent.
@pytest.fixture(scope="module", params=validate.OVERLAYS, ids=lambda path: f"overlays/{path.name}")
def built(request):
    """The overlay's resources by kind, and by kind/name."""
    resources = validate.kustomize_build(request.param)
    by_kind = {resource["kind"]: resource for resource in resources}
    return by_kind | {f"{r['kind']}/{r['metadata']['name']}": r for r in resources}


def test_overlay_validates_against_kubernetes_and_crd_schemas(built):
    for name, resource in built.items():
        if "/" in name:
            validate.validate_resource(resource)


def test_schemas_reject_unknown_fields(built):
    for kind in ("Deployment", "ServiceMonitor", "PrometheusRule"):
        broken = copy.deepcopy(built[kind])
        broken["spec"]["unknownField"] = 1
        with pytest.raises(Exception):  # noqa: B017 - kubernetes_validate and jsonschema raise their own types
            validate.validate_resource(broken)


def test_pods_drain_probe_and_run_locked_down(built):
    pod = built["Deployment"]["spec"]["template"]["spec"]
    server = next(c for c in pod["containers"] if c["name"] == "tritonserver")
    assert server["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert server["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    assert server["command"] == ["python", "-m", "serving"]  # the launcher, as `make serve` runs it
    prestop = int(server["lifecycle"]["preStop"]["exec"]["command"][-1])
    exit_timeout = int(next(a for a in server["args"] if a.startswith("--exit-timeout-s=")).split("=")[1])
    assert pod["terminationGracePeriodSeconds"] > prestop + exit_timeout
    assert pod["securityContext"]["runAsNonRoot"] is True
    for container in pod["initContainers"] + pod["containers"]:
        assert container["image"] == server["image"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in server["volumeMounts"]}
    assert {"/tmp", "/dev/shm", "/models"} <= mounts
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")["emptyDir"]
    assert shm["medium"] == "Memory" and shm["sizeLimit"]


def test_the_pod_arguments_are_the_launchers_own(built):
    from serving.launcher.config import parse_args

    server = next(
        c for c in built["Deployment"]["spec"]["template"]["spec"]["containers"] if c["name"] == "tritonserver"
    )
    cfg = parse_args(server["args"])  # exits on an option the launcher does not know
    assert (cfg.http_port, cfg.grpc_port, cfg.metrics_port, cfg.gateway_port) == (8000, 8001, 8002, 8080)
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002, "openai": 8080}
    assert cfg.grpc_max_connection_age_s > 0


def test_gpu_overlay_requests_a_gpu_and_a_parallel_tokenizer(built):
    pod = built["Deployment"]["spec"]["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    export_args = pod["initContainers"][0]["args"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["GOMP_SPINCOUNT"] == "10000"  # the base's thread budget survives the overlay's env patch
    if "cuda" in export_args:
        assert limits["nvidia.com/gpu"] == "1"
        assert env["TOKENIZERS_PARALLELISM"] == "true"
    else:
        assert "nvidia.com/gpu" not in limits
        assert env["TOKENIZERS_PARALLELISM"] == "false"


def test_grpc_service_is_headless_for_client_side_balancing(built):
    assert built["Service/bertserve-grpc"]["spec"]["clusterIP"] == "None"


def test_hpa_scales_on_the_metric_prometheus_adapter_serves(built):
    adapter = yaml.safe_load(validate.ADAPTER_CONFIG.read_text())
    served = {rule["name"]["as"] for rule in adapter["rules"]}
    hpa = built["HorizontalPodAutoscaler"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert {metric["pods"]["metric"]["name"] for metric in hpa["spec"]["metrics"]} <= served


def test_adapter_queries_are_valid_promql_over_known_metrics():
    adapter = yaml.safe_load(validate.ADAPTER_CONFIG.read_text())
    known = validate.KNOWN_METRICS | validate.recording_rule_names()
    for rule in adapter["rules"]:
        query = (
            rule["metricsQuery"]
            .replace("<<.LabelMatchers>>", 'namespace="default",pod=~"bertserve-.*"')
            .replace("<<.GroupBy>>", "pod")
            .replace("<<.Series>>", rule["name"]["matches"].strip("^$"))
        )
        assert validate.metric_names(query) <= known
        assert validate.metric_names(rule["seriesQuery"]) <= known


def test_hpa_target_is_the_one_the_rule_tests_scale_with():
    """rules_test.yml computes the HPA's desired replicas, ceil(sum of the signal / target), at idle and under
    load: the target it divides by must be the HPA's."""
    hpa = yaml.safe_load((validate.K8S / "base" / "hpa.yaml").read_text())
    (metric,) = hpa["spec"]["metrics"]
    target = metric["pods"]["target"]["averageValue"]
    value = int(target[:-1]) / 1000 if target.endswith("m") else float(target)
    tests = validate.RULE_TESTS[0].read_text()
    assert f"pod:bertserve_encoder_busy:ratio_rate2m) / {value:g})" in tests
    assert tests.count(f"/ {value:g})") >= 2  # idle and under load


def test_servicemonitor_scrapes_the_service_named_like_the_rules_job(built):
    service = built["Service/bertserve"]  # the operator's job label is the Service's name
    monitor = built["ServiceMonitor"]
    assert (
        not monitor["spec"]["selector"]["matchLabels"].items()
        <= built["Service/bertserve-grpc"]["metadata"]["labels"].items()
    )
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert {p["name"] for p in service["spec"]["ports"]} >= {e["port"] for e in monitor["spec"]["endpoints"]}


def test_only_clients_and_prometheus_reach_the_pods_and_no_token_is_mounted(built):
    pod = built["Deployment"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    policy = built["NetworkPolicy/bertserve"]["spec"]
    labels = built["Deployment"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    ports = {p["port"] for rule in policy["ingress"] for p in rule["ports"]}
    assert ports == {"http", "grpc", "metrics"}
    assert all(rule.get("from") for rule in policy["ingress"])  # none open to every source
    assert {p["port"] for rule in policy["egress"] for p in rule["ports"]} == {53}
