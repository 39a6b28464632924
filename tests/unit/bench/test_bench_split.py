import pytest

from bench import split


def _text(bert_requests: int, bert_infer_us: float, execute_s: float, infer_stage_s: float) -> str:
    return f"""# TYPE nv_inference_compute_infer_summary_us summary
nv_inference_compute_infer_summary_us_count{{model="bert",version="1"}} {bert_requests}
nv_inference_compute_infer_summary_us_sum{{model="bert",version="1"}} {bert_infer_us}
nv_inference_compute_infer_summary_us{{model="bert",version="1",quantile="0.5"}} Nan
# TYPE nv_inference_request_summary_us summary
nv_inference_request_summary_us_count{{model="bert",version="1"}} {bert_requests}
nv_inference_request_summary_us_sum{{model="bert",version="1"}} {bert_infer_us * 1.5}
nv_inference_request_summary_us_count{{model="idle",version="1"}} 7
nv_inference_request_summary_us_sum{{model="idle",version="1"}} 700
# TYPE bertserve_request_duration_seconds histogram
bertserve_request_duration_seconds_count{{model="bert"}} {bert_requests}
bertserve_request_duration_seconds_sum{{model="bert"}} {execute_s}
bertserve_request_duration_seconds_bucket{{model="bert",le="+Inf"}} {bert_requests}
# TYPE bertserve_stage_duration_seconds histogram
bertserve_stage_duration_seconds_count{{model="bert",stage="infer"}} {bert_requests}
bertserve_stage_duration_seconds_sum{{model="bert",stage="infer"}} {infer_stage_s}
bertserve_stage_duration_seconds_bucket{{model="bert",stage="infer",le="+Inf"}} {bert_requests}
"""


def test_model_split_gives_per_request_means_of_what_happened_between_the_scrapes():
    before = split.parse(_text(10, 10_000.0, 0.005, 0.004))  # warm-up before the step: must not count
    after = split.parse(_text(110, 110_000.0, 0.085, 0.064))
    models = split.model_split(before, after)
    assert set(models) == {"bert"}  # "idle" served nothing in between
    bert = models["bert"]
    assert bert["requests"] == 100
    assert bert["triton_us"] == pytest.approx({"request": 1500.0, "compute_infer": 1000.0})
    assert bert["execute_us"] == pytest.approx(800.0)
    assert bert["stage_us_per_batch"] == pytest.approx({"infer": 600.0})
    text = "\n".join(split.describe({"concurrency": 1, "split_us": {"network_and_frontend": 400.0}, "models": models}))
    assert "network_and_frontend 400" in text
    assert "execute() 800 (infer 600 per batch); compute infer outside execute() 200" in text


def _triton_only(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "bertserve" not in line) + "\n"


def test_a_model_without_our_histograms_has_only_tritons_figures():
    before = split.parse(_triton_only(_text(0, 0.0, 0.0, 0.0)))
    after = split.parse(_triton_only(_text(4, 4000.0, 0.0, 0.0)))
    bert = split.model_split(before, after)["bert"]
    assert bert == {"requests": 4.0, "triton_us": {"request": 1500.0, "compute_infer": 1000.0}}
    assert "execute()" not in "\n".join(split.describe({"concurrency": 1, "models": {"bert": bert}}))
