import pytest

from bench.served import CASES, markdown, parse_case, split_spec


def test_parse_case_takes_a_sequences_per_request_suffix():
    assert parse_case("bert-128") == (CASES["bert-128"], 1)
    assert parse_case("bert-128-b8") == (CASES["bert-128"], 8)
    assert parse_case("embed-corpus-b16") == (CASES["embed-corpus"], 16)


def test_a_case_may_carry_its_own_concurrency_list():
    assert split_spec("embed-corpus-b32@1/4/8", (1, 16)) == ("embed-corpus-b32", (1, 4, 8))
    assert split_spec("bert-128", (1, 16)) == ("bert-128", (1, 16))
    with pytest.raises(ValueError):
        split_spec("bert-128@many", (1,))


@pytest.mark.parametrize("name", ["bert-64", "bert-128-b0", "bert-128-b", "x-b2"])
def test_parse_case_rejects_unknown_names(name):
    with pytest.raises(KeyError):
        parse_case(name)


def test_markdown_counts_sequences_and_omits_the_latency_run_of_batched_cases():
    step = {"concurrency": 4, "throughput": 8000.0, "p50_ms": 3.0, "p99_ms": 4.0}
    result = {
        "label": "t",
        "ready_s": 1.0,
        "budget_ms": 10.0,
        "cases": {
            "bert-128-b8": {
                "model": "bert",
                "sequences_per_request": 8,
                "c1_loadtest": None,
                "sweep": [step, {"concurrency": 64, "error": "exited 99"}],
                "best_inside_budget": step,
            }
        },
    }
    text = markdown(result)
    assert "8 sequence(s) per request" in text
    assert "loadtest, concurrency 1" not in text
    assert "| 4 | 8000 | 3.000 | 4.000 |" in text
    assert "failed: exited 99" in text
    assert "Best inside budget: 8000/s at concurrency 4" in text
