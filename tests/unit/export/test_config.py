from __future__ import annotations

import pytest

from export.config import ExportConfig, parse_args
from export.errors import ConfigError


def test_defaults_are_the_cpu_main_job():
    cfg = parse_args([])
    assert (cfg.checkpoint, cfg.target, cfg.precisions, cfg.max_seq) == ("minilm", "cpu", ("fp32", "int8"), None)


def test_cuda_default_precisions_and_env_override(monkeypatch):
    assert parse_args(["--target", "cuda"]).precisions == ("fp16", "fp32")
    monkeypatch.setenv("BERTSERVE_EXPORT_MAX_BATCH", "8")
    assert parse_args([]).max_batch == 8


def test_empty_precisions_mean_the_targets_and_the_variable_follows_the_flag(monkeypatch):
    assert ExportConfig(target="cuda", precisions=()).precisions == ("fp16", "fp32")
    assert parse_args(["--precision", ""]).precisions == ("fp32", "int8")
    monkeypatch.setenv("BERTSERVE_EXPORT_PRECISION", "fp32")
    assert parse_args([]).precisions == ("fp32",)
    assert parse_args(["--precision", "int8,fp32"]).precisions == ("int8", "fp32")


def test_lists_and_optional_values(monkeypatch):
    cfg = parse_args(["--skip", "onnx, torchscript", "--max-seq", "64", "--serve", "int8"])
    assert (cfg.skip, cfg.max_seq, cfg.serve) == (frozenset({"onnx", "torchscript"}), 64, "int8")
    monkeypatch.setenv("BERTSERVE_EXPORT_MAX_QUEUED_REQUESTS", "")
    assert parse_args(["--max-seq", ""]).max_seq is None and parse_args([]).max_queued_requests is None


def test_the_queue_bound_of_old_is_refused_with_its_new_name(monkeypatch):
    """--max-queue-size counted requests here and sequences in the native backend; one name, one meaning now."""
    assert parse_args(["--max-queued-requests", "64"]).max_queued_requests == 64
    monkeypatch.setenv("BERTSERVE_EXPORT_MAX_QUEUE_SIZE", "64")
    with pytest.raises(ConfigError, match="BERTSERVE_EXPORT_MAX_QUEUED_REQUESTS"):
        parse_args([])


def test_a_bad_variable_is_a_config_error_naming_it(monkeypatch):
    monkeypatch.setenv("BERTSERVE_EXPORT_INSTANCES", "two")
    with pytest.raises(ConfigError, match="BERTSERVE_EXPORT_INSTANCES='two'"):
        parse_args([])


def test_autotune_is_on_for_avx512_cpus_off_elsewhere_unless_asked(monkeypatch):
    from export import autotune

    monkeypatch.setattr(autotune, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    assert parse_args([]).tuned and not parse_args(["--target", "cuda"]).tuned
    assert not parse_args(["--no-autotune"]).tuned and parse_args(["--target", "cuda", "--autotune"]).tuned
    monkeypatch.setenv("BERTSERVE_EXPORT_AUTOTUNE", "0")
    assert not parse_args([]).tuned
    monkeypatch.delenv("BERTSERVE_EXPORT_AUTOTUNE")
    monkeypatch.setattr(autotune, "cpu_flags", lambda: frozenset({"avx2"}))
    assert not parse_args([]).tuned and parse_args(["--autotune"]).tuned


def test_queue_delay_from_the_command_line_and_env(monkeypatch):
    assert parse_args([]).max_queue_delay_us == 500
    assert parse_args(["--max-queue-delay-us", "0"]).max_queue_delay_us == 0
    monkeypatch.setenv("BERTSERVE_EXPORT_MAX_QUEUE_DELAY_US", "100")
    assert parse_args([]).max_queue_delay_us == 100


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"precisions": ("fp4",)}, "unknown precision 'fp4'"),
        ({"precisions": ("fp16",)}, "fp16 needs --target cuda"),
        ({"target": "tpu"}, "unknown target"),
        ({"precisions": ("fp32", "fp32")}, "listed twice"),
        ({"max_batch": 0}, "--max-batch"),
        ({"max_seq": 2}, "--max-seq"),
        ({"max_queue_delay_us": -1}, "--max-queue-delay-us"),
    ],
)
def test_invalid_options_are_config_errors(kwargs, message):
    with pytest.raises(ConfigError, match=message):
        ExportConfig(**kwargs)


def test_execution_env_must_be_a_python_environment(tmp_path):
    with pytest.raises(ConfigError, match="not a Python environment"):
        ExportConfig(execution_env=tmp_path)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").touch()
    assert ExportConfig(execution_env=tmp_path).execution_env == tmp_path


def test_gelu_epilogue_is_on_unless_turned_off(monkeypatch):
    assert parse_args(["--target", "cuda"]).gelu_epilogue
    assert not parse_args(["--target", "cuda", "--no-gelu-epilogue"]).gelu_epilogue
    monkeypatch.setenv("BERTSERVE_EXPORT_GELU_EPILOGUE", "0")
    assert not parse_args(["--target", "cuda"]).gelu_epilogue
    monkeypatch.setenv("BERTSERVE_EXPORT_GELU_EPILOGUE", "on")
    assert parse_args(["--target", "cuda"]).gelu_epilogue


def test_shedding_reads_its_environment_variable(monkeypatch):
    monkeypatch.setenv("BERTSERVE_EXPORT_SHEDDING", "false")
    assert not parse_args([]).shedding
    assert not parse_args(["--no-shedding"]).shedding


def test_a_cuda_package_is_tuned_at_a_served_batch_inside_the_exported_ranges():
    from export.autotune import example_shape

    assert example_shape("cuda", 128, 128) == (32, 64) and example_shape("cpu", 128, 128) == (2, 16)
    assert example_shape("cuda", 8, 16) == (8, 16)
