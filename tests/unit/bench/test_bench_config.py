import pytest

from bench.config import parse_args


def test_int8_recipes_are_parsed_and_checked_against_the_known_ones(capsys):
    cfg = parse_args(["--device", "cpu", "--int8-recipes", "torchao_int8_smoothquant"])
    assert cfg.int8_recipes == ("torchao_int8_smoothquant",)
    assert parse_args(["--device", "cpu"]).int8_recipes == ()
    with pytest.raises(SystemExit):
        parse_args(["--device", "cpu", "--int8-recipes", "no_such_recipe"])
    assert "unknown int8 recipe 'no_such_recipe'" in capsys.readouterr().err
