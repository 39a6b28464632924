"""Generated Triton configs: the queue policy is there when shedding, absent when not."""

from __future__ import annotations

import dataclasses

import pytest

from export.config import parse_args
from export.model_configs import QueuePolicy, ServingShape, bert_config, parse, render, tokenizer_config

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
CONFIGS = {
    "tokenizer": tokenizer_config,
    "bert": lambda shape: bert_config("bert", shape, "int8", "aoti"),
}


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_shedding_writes_the_queue_policy(model):
    batching = parse(render(CONFIGS[model](SHAPE))).dynamic_batching
    assert batching.max_queue_delay_microseconds == 500
    assert batching.HasField("default_queue_policy")
    policy = batching.default_queue_policy
    assert (policy.max_queue_size, policy.default_timeout_microseconds) == (64, 100_000)
    assert policy.allow_timeout_override


@pytest.mark.parametrize("model", sorted(CONFIGS))
def test_without_shedding_there_is_no_queue_policy(model):
    batching = parse(render(CONFIGS[model](dataclasses.replace(SHAPE, queue=None)))).dynamic_batching
    assert batching.max_queue_delay_microseconds == 500  # still batched dynamically
    assert not batching.HasField("default_queue_policy")


def test_no_shedding_from_the_command_line():
    assert parse_args([]).shedding
    assert not parse_args(["--no-shedding"]).shedding
