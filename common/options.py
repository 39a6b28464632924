"""Every entry point's options, derived from its one frozen, typed dataclass.

Each field is declared with `option`, which keeps its help beside its default. From the fields come one
``--field-name`` option each, parsed by the field's type, and one ``<PREFIX><FIELD_NAME>`` environment variable each
(a field may name its option otherwise; the variable follows the option). The command line wins over the environment,
the environment over the field's default. ``--help`` shows each option's help, default and variable.

An empty variable sets nothing. Types: int, float, str, Path; ``X | None`` (empty text: None); ``tuple[X, ...]`` and
``frozenset[X]`` (comma-separated); bool as ``--flag`` / ``--no-flag`` (in the environment 1/true/yes/on or
0/false/no/off). A ``tuple[X, ...]`` field declared with ``repeat=True`` takes one value per use of its option
(``--model a --model b``: values that hold commas themselves), and white-space-separated values in its variable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")
TRUE = ("1", "true", "yes", "on")
# Names the variables had before they joined one family: a setting under one is refused, never silently dropped
# (an API key file under the old name would leave the front door open).
RETIRED_PREFIXES = {"LOADTEST_": "BERTSERVE_LOADTEST_", "BERTSERVE_PROXY_": "BERTSERVE_SERVE_"}
FALSE = ("0", "false", "no", "off")
# Single variables renamed since: refused the same way, with the new name.
RETIRED_NAMES = {"BERTSERVE_EXPORT_MAX_QUEUE_SIZE": "BERTSERVE_EXPORT_MAX_QUEUED_REQUESTS"}


def option(
    default: Any,
    help: str,
    *,
    shown: str | None = None,
    flag: str | None = None,
    repr: bool = True,
    repeat: bool = False,
) -> Any:
    """A dataclass field with its help. `shown`: what --help says for a default derived at run time; `flag`: the
    option's name where it is not the field's (its environment variable follows the flag); `repeat`: a tuple field
    whose option is given once per value."""
    metadata = {"help": help, "shown": shown, "flag": flag, "repeat": repeat}
    return dataclasses.field(default=default, repr=repr, metadata=metadata)


def _repeated(f: dataclasses.Field[Any]) -> bool:
    return bool(f.metadata.get("repeat"))


def value(kind: Any, text: str) -> Any:
    """`text` as a value of the type `kind` (a resolved annotation); ValueError if it is not one."""
    args = typing.get_args(kind)
    if type(None) in args:
        (inner,) = (a for a in args if a is not type(None))
        return value(inner, text) if text.strip() else None
    if typing.get_origin(kind) in (tuple, frozenset):
        return typing.get_origin(kind)(value(args[0], item.strip()) for item in text.split(",") if item.strip())
    if kind is bool:
        word = text.strip().lower()
        if word not in TRUE + FALSE:
            raise ValueError(f"expected {'/'.join(TRUE)} or {'/'.join(FALSE)}")
        return word in TRUE
    if kind in (int, float, str, Path):
        return kind(text)
    raise TypeError(f"no option type for {kind}")


def _flag(f: dataclasses.Field[Any]) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _upper(f: dataclasses.Field[Any]) -> str:
    """The option's name as its metavar and its variable's suffix: MAX_BATCH."""
    return _flag(f)[2:].replace("-", "_").upper()


def _shown(f: dataclasses.Field[Any]) -> str:
    if f.metadata.get("shown"):
        return f.metadata["shown"]
    default = f.default
    if isinstance(default, bool):
        return "on" if default else "off"
    if isinstance(default, tuple | frozenset):
        default = ",".join(str(item) for item in default)
    return "none" if default is None or default == "" else str(default)


def _converter(kind: Any) -> Callable[[str], Any]:
    def convert(text: str) -> Any:
        return value(kind, text)

    convert.__name__ = kind.__name__ if type(kind) is type else str(kind)  # argparse: "invalid int value: 'x'"
    return convert


def parser(cls: type[Any], prefix: str, prog: str, description: str) -> argparse.ArgumentParser:
    """One option per field of `cls`; an option not given is absent from the parsed namespace."""
    p = argparse.ArgumentParser(
        prog=prog,
        description=f"{description} Every option can also be set as {prefix}<OPTION>; the command line wins.",
        argument_default=argparse.SUPPRESS,
    )
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        text = f"{f.metadata['help']} (default: {_shown(f)}; env {prefix + _upper(f)})".replace("%", "%%")
        if hints[f.name] in (bool, bool | None):
            p.add_argument(_flag(f), dest=f.name, action=argparse.BooleanOptionalAction, help=text)
        elif _repeated(f):
            item = typing.get_args(hints[f.name])[0]
            p.add_argument(_flag(f), dest=f.name, action="append", type=_converter(item), metavar=_upper(f), help=text)
        else:
            p.add_argument(_flag(f), dest=f.name, type=_converter(hints[f.name]), metavar=_upper(f), help=text)
    return p


def environment(cls: type[Any], prefix: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields that `env` (os.environ by default) sets, an empty variable setting none; ValueError naming the
    variable and value of a bad one, or of a variable under a retired name."""
    env = os.environ if env is None else env
    for name in env:
        if name in RETIRED_NAMES and env[name] != "":
            raise ValueError(f"{name} is no longer read: the variable is now {RETIRED_NAMES[name]}")
        for old, new in RETIRED_PREFIXES.items():
            if name.startswith(old) and not name.startswith(new):
                raise ValueError(f"{name} is no longer read: the variable is now {new}{name[len(old) :]}")
    hints = typing.get_type_hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        name = prefix + _upper(f)
        if env.get(name, "") != "":
            try:
                if _repeated(f):
                    values[f.name] = tuple(value(typing.get_args(hints[f.name])[0], v) for v in env[name].split())
                else:
                    values[f.name] = value(hints[f.name], env[name])
            except ValueError as e:
                raise ValueError(f"{name}={env[name]!r}: {e}") from e
    return values


def parse(
    cls: type[T],
    argv: Sequence[str] | None = None,
    *,
    prefix: str,
    prog: str,
    description: str,
    env: Mapping[str, str] | None = None,
    error: type[Exception] | None = None,
) -> T:
    """`cls` from the command line, then the environment, then its defaults. A bad value (a ValueError, from the
    environment or from `cls`'s own checks) raises `error`; without one, it exits as argparse does (status 2)."""
    p = parser(cls, prefix, prog, description)
    given = {k: tuple(v) if isinstance(v, list) else v for k, v in vars(p.parse_args(argv)).items()}
    try:
        return cls(**{**environment(cls, prefix, env), **given})
    except ValueError as e:
        if error is None:
            p.error(str(e))
        if isinstance(e, error):
            raise
        raise error(str(e)) from e
