"""`--help` of the launcher and of export documents every option: what it does, and the variable that sets it."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from export import config as export_config
from serving.launcher import config as serve_config


def _help(parse_args) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse_args(["--help"])
    return re.sub(r"\s+", " ", out.getvalue())


@pytest.mark.parametrize("module", [serve_config, export_config], ids=["serve", "export"])
def test_every_option_has_help_and_names_its_environment_variable(module):
    text = _help(module.parse_args)
    options = sorted(set(re.findall(r"(--[a-z0-9-]+)", text)) - {"--help"})
    assert len(options) > 10, options
    for option in options:
        if option.startswith("--no-"):
            continue  # the negation of a --flag documented beside it
        env = module.ENV_PREFIX + option[2:].replace("-", "_").upper()
        assert env in text, f"{option}: {env} not in the help"


def test_serve_help_says_each_default():
    text = _help(serve_config.parse_args)
    for name, default in [("http-port", "8000"), ("exit-timeout-s", "30"), ("admin-key", "random per start")]:
        assert re.search(rf"--{name} \S+ .*?\(default: {re.escape(default)}; env BERTSERVE_SERVE_", text), name
