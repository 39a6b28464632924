"""Generated Triton configs: where shedding lives (Triton's queue policy or the native backend) and when not."""

from __future__ import annotations

import dataclasses

import pytest

from export.config import parse_args
from export.model_configs import (
    NO_DEADLINE_US,
    QueuePolicy,
    ServingShape,
    bert_config,
    classify_config,
    parse,
    render,
    rerank_config,
    tokenizer_config,
)
from serving.contract import native

SHAPE = ServingShape(
    max_batch=32,
    max_seq=128,
    hidden=384,
    instances=1,
    kind="KIND_CPU",
    max_queue_delay_us=500,
    execution_env="/env",
    warmup_seq=8,
    queue=QueuePolicy(max_queue_size=64, timeout_us=100_000),
)


def python_bert(shape: ServingShape):
    return bert_config("bert", shape, "int8", "aoti")


def native_bert(shape: ServingShape):
    return bert_config("bert", shape, "int8", "aoti", backend=native.NAME)


def test_the_python_encoder_sheds_through_triton_queue_policy():
    batching = parse(render(python_bert(SHAPE))).dynamic_batching
    assert batching.max_queue_delay_microseconds == 500
    policy = batching.default_queue_policy
    assert (policy.max_queue_size, policy.default_timeout_microseconds) == (64, 100_000)
    assert policy.allow_timeout_override


@pytest.mark.parametrize("kind", ["KIND_CPU", "KIND_GPU"])
def test_the_native_encoder_sheds_itself_without_a_queue_policy(kind):
    config = parse(render(native_bert(dataclasses.replace(SHAPE, kind=kind))))
    assert not config.dynamic_batching.HasField("default_queue_policy")  # it would bring back the 500 ms poll
    assert config.parameters["deadline_us"].string_value == "10000"  # admission by work against the deadline
    assert config.parameters["max_batch_tokens"].string_value == str(32 * 128)  # the rows bind by default
    assert config.dynamic_batching.max_queue_delay_microseconds == 0  # it batches what queues during a forward
    held = parse(render(native_bert(dataclasses.replace(SHAPE, standing_queue_us=40_000))))
    assert held.parameters["standing_queue_us"].string_value == "40000"  # the wait a sustained overload keeps
    unbounded = parse(render(native_bert(dataclasses.replace(SHAPE, queue=None, standing_queue_us=40_000))))
    assert unbounded.parameters["deadline_us"].string_value == str(NO_DEADLINE_US)
    assert unbounded.parameters["standing_queue_us"].string_value == "0"  # without shedding nothing is refused


@pytest.mark.parametrize(
    "config", [lambda shape: rerank_config(shape), lambda shape: classify_config(shape, 0, {0: "no", 1: "yes"})]
)
def test_the_sequence_tasks_are_admitted_by_deadline_as_the_native_encoder(config):
    generated = parse(render(config(dataclasses.replace(SHAPE, standing_queue_us=40_000))))
    assert generated.parameters["deadline_us"].string_value == "10000"
    assert generated.parameters["standing_queue_us"].string_value == "40000"
    assert not generated.HasField("dynamic_batching")  # one request already holds its rows
    unbounded = parse(render(config(dataclasses.replace(SHAPE, queue=None))))
    assert unbounded.parameters["deadline_us"].string_value == str(NO_DEADLINE_US)


def test_the_tokenizer_has_no_queue_policy():
    batching = parse(render(tokenizer_config(SHAPE))).dynamic_batching
    assert batching.max_queue_delay_microseconds == 500  # still batched dynamically
    assert not batching.HasField("default_queue_policy")


def test_without_shedding_there_is_no_queue_policy():
    batching = parse(render(python_bert(dataclasses.replace(SHAPE, queue=None)))).dynamic_batching
    assert batching.max_queue_delay_microseconds == 500
    assert not batching.HasField("default_queue_policy")


def test_no_shedding_from_the_command_line():
    assert parse_args([]).shedding
    assert not parse_args(["--no-shedding"]).shedding
