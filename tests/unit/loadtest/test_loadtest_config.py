"""Configuration: defaults, BERTSERVE_LOADTEST_* environment overrides, CLI precedence, validation."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadtest.config import ConfigError, LoadTestConfig, load_config

ROOT = Path(__file__).resolve().parents[3]


def test_defaults_follow_the_contract() -> None:
    config = load_config([], env={})
    assert config.url == "127.0.0.1:8001" and config.model == "embed" and config.protocol == "grpc"
    assert config.budget_ms == 10.0 and config.slo_percentiles == (50.0, 99.0)
    assert config.loads == (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


def test_environment_overrides_defaults_and_cli_overrides_environment() -> None:
    env = {
        "BERTSERVE_LOADTEST_BUDGET_MS": "5",
        "BERTSERVE_LOADTEST_CONCURRENCY": "1,8",
        "BERTSERVE_LOADTEST_PLOT": "false",
        "BERTSERVE_LOADTEST_URL": "h:1",
    }
    config = load_config(["--url", "h:2", "--output-dir", "/tmp/x"], env=env)
    assert config.budget_ms == 5.0 and config.concurrency == (1, 8) and config.plot is False
    assert config.url == "h:2" and config.output_dir == Path("/tmp/x")


def test_open_loop_sweeps_rates() -> None:
    config = load_config(["--mode", "open", "--rates", "10,20.5", "--arrival", "constant"], env={})
    assert config.loads == (10.0, 20.5)


def test_bad_environment_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="BERTSERVE_LOADTEST_DURATION_S='ten'"):
        load_config([], env={"BERTSERVE_LOADTEST_DURATION_S": "ten"})
    with pytest.raises(ConfigError, match="BERTSERVE_LOADTEST_FIND_MAX='maybe'"):
        load_config([], env={"BERTSERVE_LOADTEST_FIND_MAX": "maybe"})


def test_make_loadtests_default_arguments_parse() -> None:
    """`make loadtest` runs `python -m loadtest --find-max` unless ARGS says otherwise."""
    default = re.search(r"-m loadtest \$\(or \$\(ARGS\),([^)]*)\)", (ROOT / "Makefile").read_text())
    assert default is not None
    assert load_config(default.group(1).split(), env={}).find_max


def test_boolean_options_are_flags_both_ways() -> None:
    config = load_config(["--find-max", "--no-plot", "--no-progress"], env={"BERTSERVE_LOADTEST_FIND_MAX": "0"})
    assert config.find_max and not config.plot and not config.progress
    assert not load_config(["--no-find-max"], env={"BERTSERVE_LOADTEST_FIND_MAX": "on"}).find_max


@pytest.mark.parametrize(
    "overrides",
    [
        {"mode": "sideways"},
        {"protocol": "smtp"},
        {"concurrency": (0,)},
        {"budget_ms": 0.0},
        {"slo_percentiles": (101.0,)},
        {"duration_s": 0.0, "requests": 0},
        {"token_length": 0},
    ],
)
def test_invalid_settings_are_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        LoadTestConfig(**overrides)  # type: ignore[arg-type]


def test_unparsable_flag_exits_2() -> None:
    with pytest.raises(SystemExit) as exc:
        load_config(["--concurrency", "x"], env={})
    assert exc.value.code == 2


def test_config_is_frozen_and_serialisable() -> None:
    config = LoadTestConfig()
    with pytest.raises(AttributeError):
        config.budget_ms = 1.0  # type: ignore[misc]
    assert config.as_dict()["output_dir"] == "reports/loadtest"
