"""`--help` of every entry point documents every option: what it does, its default and the variable that sets it."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from export import config as export_config
from loadtest import config as loadtest_config
from loadtest import perf_analyzer_compare
from serving.launcher import config as serve_config
from serving.launcher import replicas

ENTRY_POINTS = {
    "serve": (serve_config.parse_args, serve_config.ENV_PREFIX),
    "export": (export_config.parse_args, export_config.ENV_PREFIX),
    "loadtest": (loadtest_config.load_config, loadtest_config.ENV_PREFIX),
    "replicas": (replicas.parse_args, serve_config.ENV_PREFIX),
    "perf_analyzer_compare": (perf_analyzer_compare.parse_args, perf_analyzer_compare.ENV_PREFIX),
}


def _help(parse_args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse_args(["--help"])
    return out.getvalue()


def _options(text: str) -> dict[str, str]:
    """Each option's help, by its first flag: argparse starts an option's entry on a line of its own, indented 2."""
    entries = re.split(r"\n  (?=--)", text.split("\noptions:\n", 1)[1])[1:]
    return {entry.split()[0].rstrip(","): re.sub(r"\s+", " ", entry).strip() for entry in entries}


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_every_option_says_its_help_default_and_environment_variable(name):
    parse_args, prefix = ENTRY_POINTS[name]
    options = _options(_help(parse_args))
    assert len(options) >= 9, options  # a parser that lost its options would pass the loop below
    for option, entry in options.items():
        env = prefix + option[2:].replace("-", "_").upper()
        match = re.fullmatch(rf"{option}(?: [A-Z0-9_]+|, --no-{option[2:]}) (.+) \(default: (.+); env {env}\)", entry)
        assert match, f"{name} {option}: no help, default or {env} in {entry!r}"
        assert match.group(1) != option[2:].replace("-", " "), f"{name} {option}: its help is just its name"


def test_serve_help_says_each_default():
    text = re.sub(r"\s+", " ", _help(serve_config.parse_args))
    for name, default in [("http-port", "8000"), ("exit-timeout-s", "30"), ("admin-key", "random per start")]:
        assert re.search(rf"--{name} \S+ .*?\(default: {re.escape(default)}; env BERTSERVE_SERVE_", text), name


def test_replicas_share_the_serve_family():
    text = re.sub(r"\s+", " ", _help(replicas.parse_args))
    for name, default in [("replicas", "2"), ("base-port", "8100"), ("rate", "1000.0"), ("max-body", "4m")]:
        env = "BERTSERVE_SERVE_" + name.replace("-", "_").upper()
        assert re.search(rf"--{name} \S+ .*?\(default: {re.escape(default)}; env {env}\)", text), name
    assert "BERTSERVE_PROXY_" not in text
