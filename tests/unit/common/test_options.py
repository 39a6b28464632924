"""common.options on a small dataclass: types, environment precedence, errors, bool flags and --help."""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from common import options
from common.options import option

PREFIX = "DEMO_"


class DemoError(ValueError):
    pass


@dataclass(frozen=True)
class Demo:
    count: int = option(3, "how many")
    ratio: float = option(0.5, "a share of 100% of them")
    name: str = option("x", "a name")
    out: Path = option(Path("out"), "where to write")
    limit: int | None = option(None, "at most this many", shown="no limit")
    sizes: tuple[int, ...] = option((1, 2), "comma-separated sizes")
    words: frozenset[str] = option(frozenset(), "comma-separated words")
    fast: bool = option(False, "go fast")
    tuned: bool | None = option(None, "tune", shown="by target")
    level: str = option("low", "a level", flag="--lvl")
    specs: tuple[str, ...] = option(("a=1",), "one per use", flag="--spec", repeat=True)

    def __post_init__(self) -> None:
        if self.count < 0:
            raise DemoError("count must be >= 0")


def parse(argv: list[str], env: dict[str, str] | None = None, error: type[Exception] | None = DemoError) -> Demo:
    return options.parse(Demo, argv, prefix=PREFIX, prog="demo", description="A demo.", env=env or {}, error=error)


def test_defaults_come_from_the_dataclass():
    assert parse([]) == Demo()


def test_each_type_parses_from_the_command_line():
    cfg = parse(
        ["--count", "7", "--ratio", "0.25", "--name", "y", "--out", "/tmp/o", "--limit", "9", "--sizes", "4, 8,",
         "--words", "a,b", "--fast", "--no-tuned", "--lvl", "high"]
    )  # fmt: skip
    assert (cfg.count, cfg.ratio, cfg.name, cfg.out, cfg.limit) == (7, 0.25, "y", Path("/tmp/o"), 9)
    assert (cfg.sizes, cfg.words, cfg.fast, cfg.tuned, cfg.level) == (
        (4, 8),
        frozenset({"a", "b"}),
        True,
        False,
        "high",
    )


def test_the_command_line_wins_over_the_environment_which_wins_over_the_default():
    env = {"DEMO_COUNT": "5", "DEMO_NAME": "from-env", "DEMO_SIZES": "16,32", "DEMO_LVL": "mid"}
    cfg = parse(["--count", "6"], env)
    assert (cfg.count, cfg.name, cfg.sizes, cfg.level, cfg.ratio) == (6, "from-env", (16, 32), "mid", 0.5)


def test_a_repeated_option_keeps_each_value_whole_commas_included():
    assert parse([]).specs == ("a=1",)
    assert parse(["--spec", "x=1,y=2", "--spec", "z"]).specs == ("x=1,y=2", "z")
    assert parse([], {"DEMO_SPEC": "x=1,y=2  z"}).specs == ("x=1,y=2", "z")
    assert parse(["--spec", "w"], {"DEMO_SPEC": "x z"}).specs == ("w",)


def test_bool_flags_both_ways_and_from_the_environment():
    assert parse(["--fast"]).fast and not parse(["--no-fast"], {"DEMO_FAST": "yes"}).fast
    assert parse(["--tuned"]).tuned is True and parse([]).tuned is None
    for word, expected in [("1", True), ("TRUE", True), ("on", True), ("0", False), ("no", False), ("Off", False)]:
        assert parse([], {"DEMO_FAST": word}).fast is expected, word
    assert parse([], {"DEMO_TUNED": ""}).tuned is None


def test_empty_text_is_none_for_an_optional_field():
    assert parse(["--limit", ""], {"DEMO_LIMIT": "4"}).limit is None
    assert parse([], {"DEMO_LIMIT": ""}).limit is None


@pytest.mark.parametrize(("name", "text"), [("DEMO_COUNT", "many"), ("DEMO_FAST", "maybe"), ("DEMO_SIZES", "1,x")])
def test_a_bad_environment_value_names_the_variable_and_the_value(name, text):
    with pytest.raises(DemoError, match=rf"^{name}='{re.escape(text)}': "):
        parse([], {name: text})


def test_without_an_error_class_bad_values_exit_as_argparse_does(capsys):
    for argv, env, message in [
        (["--count", "x"], {}, "argument --count: invalid int value: 'x'"),
        ([], {"DEMO_RATIO": "half"}, "DEMO_RATIO='half'"),
        (["--count", "-1"], {}, "count must be >= 0"),
    ]:
        with pytest.raises(SystemExit) as exc:
            parse(argv, env, error=None)
        assert exc.value.code == 2 and message in capsys.readouterr().err


def test_the_dataclass_own_error_passes_through():
    with pytest.raises(DemoError, match="count must be >= 0"):
        parse(["--count", "-1"])


def test_help_shows_every_option_with_its_default_and_variable():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse(["--help"])
    text = re.sub(r"\s+", " ", out.getvalue())
    for expected in [
        "--count COUNT how many (default: 3; env DEMO_COUNT)",
        "--ratio RATIO a share of 100% of them (default: 0.5; env DEMO_RATIO)",
        "--out OUT where to write (default: out; env DEMO_OUT)",
        "--limit LIMIT at most this many (default: no limit; env DEMO_LIMIT)",
        "--sizes SIZES comma-separated sizes (default: 1,2; env DEMO_SIZES)",
        "--words WORDS comma-separated words (default: none; env DEMO_WORDS)",
        "--fast, --no-fast go fast (default: off; env DEMO_FAST)",
        "--tuned, --no-tuned tune (default: by target; env DEMO_TUNED)",
        "--lvl LVL a level (default: low; env DEMO_LVL)",
    ]:
        assert expected in text, expected


def test_an_empty_variable_sets_nothing():
    cfg = parse([], {"DEMO_COUNT": "", "DEMO_FAST": "", "DEMO_NAME": "", "DEMO_OUT": ""})
    assert (cfg.count, cfg.fast, cfg.name, cfg.out) == (3, False, "x", Path("out"))


@pytest.mark.parametrize(
    ("old", "new"),
    [("BERTSERVE_PROXY_API_KEYS", "BERTSERVE_SERVE_API_KEYS"), ("LOADTEST_BUDGET_MS", "BERTSERVE_LOADTEST_BUDGET_MS")],
)
def test_a_variable_under_a_retired_name_is_refused_with_its_new_name(old, new):
    with pytest.raises(DemoError, match=rf"^{old} is no longer read: the variable is now {new}$"):
        parse([], {old: "keys.txt"})
