"""Triton config.pbtxt for every model, generated through Triton's protobuf schema (never hand-written)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2 as mc

# Files under <model>/warmup/ that model_warmup feeds (written by the repository writer).
WARMUP_TEXT = "text"
WARMUP_IDS = "input_ids"
WARMUP_MASK = "attention_mask"
WARMUP_QUERY = "query"
WARMUP_DOCUMENTS = "documents"
# rerank: the most documents one request may rank (each is one query/document pair through the model).
MAX_DOCUMENTS = 1024


@dataclass(frozen=True)
class ServingShape:
    max_batch: int
    max_seq: int
    hidden: int
    instances: int
    kind: str  # KIND_CPU or KIND_GPU
    max_queue_delay_us: int
    execution_env: str  # the Python environment the backend stub runs in
    warmup_seq: int  # token count of the warm-up ids
    queue: QueuePolicy | None  # None: no queue policy (and no shedding in the native models)
    deadline_us: int = 10_000  # native models: the deadline of a request without a timeout of its own
    standing_queue_us: int = 0  # native models: the wait a sustained overload is held to (0: the deadline alone)
    max_batch_tokens: int = 0  # native models: padded tokens per batch (0: max_batch x max_seq)


@dataclass(frozen=True)
class QueuePolicy:
    """Load shedding of a dynamically batched model (Triton's ModelQueuePolicy, timeout_action REJECT).

    A request that finds ``max_queue_size`` requests waiting, or that waits longer than its timeout, is answered
    at once with UNAVAILABLE (HTTP 503) instead of queueing without bound. ``timeout_us`` is the default; a
    client may send a shorter per-request ``timeout`` (its deadline) when ``allow_timeout_override`` is set.

    The cost, in tritonserver 2.51: any queue policy turns off the dynamic batcher's payload prefetch, so the
    batcher hands a batch over only to an idle instance, and waits for one by polling every 500 ms. With one
    instance, a request that arrives while the instance is still finishing the previous batch (a client on
    loopback sends its next request that fast) waits the rest of that poll: 0.1-0.3 % of requests at
    concurrency 1 on the CPU took ~505 ms. Without a policy, or with an idle second instance, none did.
    """

    max_queue_size: int
    timeout_us: int
    allow_timeout_override: bool = True

    def __post_init__(self) -> None:
        if self.max_queue_size < 1:
            raise ValueError(f"max_queue_size must be at least 1, got {self.max_queue_size}")
        if self.timeout_us < 1:
            raise ValueError(f"timeout_us must be at least 1, got {self.timeout_us}")

    @classmethod
    def for_batch(cls, max_batch: int, timeout_us: int | None = None) -> QueuePolicy:
        """Two full batches may wait; none waits longer than ``timeout_us`` (QUEUE_TIMEOUT_US)."""
        return cls(max_queue_size=2 * max_batch, timeout_us=timeout_us or QUEUE_TIMEOUT_US)


# The default longest wait in a model's queue before UNAVAILABLE (the native encoder applies it only while more than
# a batch waits). Measured on the 2-core CPU (docs/PERFORMANCE.md): with 1 s a 10-minute soak at 70 % of capacity
# refused nothing and 3x overload gave accepted requests 10x the unloaded p99; with 50 ms the overload figure was
# 4.4x, but the soak refused 4 % (a full batch's forward takes 40-60 ms there). Clients with tighter deadlines send
# them (the per-request timeout), and `--queue-timeout-us` trades one for the other (reliability/README.md).
QUEUE_TIMEOUT_US = 1_000_000
# A native model exported with --no-shedding: requests without a timeout of their own wait as long as it takes.
NO_DEADLINE_US = 86_400_000_000


def render(config: dict[str, Any]) -> str:
    """dict -> ModelConfig (validated by the schema) -> protobuf text format."""
    return text_format.MessageToString(json_format.ParseDict(config, mc.ModelConfig()))


def parse(text: str) -> mc.ModelConfig:
    return text_format.Parse(text, mc.ModelConfig())


def _params(**values: str) -> dict[str, dict[str, str]]:
    return {k: {"string_value": v} for k, v in values.items()}


def _batching(shape: ServingShape) -> dict[str, Any]:
    return {"max_queue_delay_microseconds": shape.max_queue_delay_us}


def queue_policy(policy: QueuePolicy) -> dict[str, Any]:
    """The ``default_queue_policy`` of a dynamically batched model (an ensemble takes none)."""
    return {
        "timeout_action": "REJECT",
        "default_timeout_microseconds": policy.timeout_us,
        "allow_timeout_override": policy.allow_timeout_override,
        "max_queue_size": policy.max_queue_size,
    }


def _shedding(shape: ServingShape) -> dict[str, Any]:
    if shape.queue is None:
        return _batching(shape)
    return {**_batching(shape), "default_queue_policy": queue_policy(shape.queue)}


# The Python `tokenizer` model's inputs and outputs. TEXT_PAIR (the second text of each pair, for a cross-encoder:
# serving/python_backend/pairs.py) and token_type_ids are its own: the native tokenizer model serves single texts.
TOKENIZER_INPUTS = [
    {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]},
    {"name": "TEXT_PAIR", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
]
TOKENIZER_OUTPUTS = [
    {"name": "input_ids", "data_type": "TYPE_INT64", "dims": [-1]},
    {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": [-1]},
    {"name": "token_type_ids", "data_type": "TYPE_INT64", "dims": [-1]},
    {"name": "truncated", "data_type": "TYPE_BOOL", "dims": [1]},
]
PAIR_ONLY = {"TEXT_PAIR", "token_type_ids"}


def tokenizer_config(shape: ServingShape) -> dict[str, Any]:
    return {
        "name": "tokenizer",
        "backend": "python",
        "max_batch_size": shape.max_batch,
        "input": TOKENIZER_INPUTS,
        "output": TOKENIZER_OUTPUTS,
        # No queue policy: it would turn off the batcher's prefetch, and a request then waits up to tritonserver
        # 2.51's 500 ms poll whenever it finds the instance busy. The encoder behind it (the bottleneck) sheds.
        "dynamic_batching": _batching(shape),
        "instance_group": [{"kind": "KIND_CPU", "count": shape.instances}],
        "parameters": _params(EXECUTION_ENV_PATH=shape.execution_env, max_seq=str(shape.max_seq)),
        "model_warmup": [
            {
                "name": "real_sentence",
                "batch_size": 1,
                "inputs": {"TEXT": {"data_type": "TYPE_STRING", "dims": [1], "input_data_file": WARMUP_TEXT}},
            }
        ],
    }


def native_tokenizer_config(shape: ServingShape) -> dict[str, Any]:
    """`tokenizer` in the native backend (its manifest's runtime is "none"): the Python model's inputs, outputs
    (single texts: no TEXT_PAIR, no token_type_ids), batching and warm-up, tokenized on Triton's instance thread
    with no stub process."""
    config = tokenizer_config(shape)
    return {
        **config,
        "backend": "bertserve",
        "input": [t for t in TOKENIZER_INPUTS if t["name"] not in PAIR_ONLY],
        "output": [t for t in TOKENIZER_OUTPUTS if t["name"] not in PAIR_ONLY],
        "parameters": _params(max_seq=str(shape.max_seq)),
    }


def native_admission(shape: ServingShape) -> dict[str, str]:
    """The native models' admission parameters (backend/src/scheduler.h, work_queue.h): `deadline_us`, the deadline
    of a request that sends no timeout of its own, and `standing_queue_us`, the wait that such requests are held to
    once the queue stands under a sustained overload. Without shedding (no queue policy) the deadline is a day and
    the queue never stands: nothing is refused."""
    if shape.queue is None:
        return {"deadline_us": str(NO_DEADLINE_US), "standing_queue_us": "0"}
    return {"deadline_us": str(shape.deadline_us), "standing_queue_us": str(shape.standing_queue_us)}


def bert_config(
    name: str, shape: ServingShape, precision: str, runtime: str, backend: str = "python", threads: int = 0
) -> dict[str, Any]:
    """An encoder model; ``backend`` is "python" (a stub runs serving/python_backend/models/bert.py) or the native backend's name.

    ``threads``: intra-op threads per instance, 0 for the CPUs the server process may use."""
    params = {"precision": precision, "runtime": runtime, "threads": str(threads)}
    if backend == "python":
        params["EXECUTION_ENV_PATH"] = shape.execution_env
        batching = _shedding(shape)
    else:
        # The native backend queues and sheds itself, by predicted work against each request's deadline
        # (backend/src/scheduler.h): Triton's queue policy would turn off the batcher's prefetch and bring back its
        # 500 ms poll.
        params.update(native_admission(shape))
        params["max_batch_tokens"] = str(shape.max_batch_tokens or shape.max_batch * shape.max_seq)
        # Nor does Triton hold requests back for company: execute hands each over at once and what arrives during
        # a forward joins the next batch (native embed, 16 tokens, c=1: queue 654 -> 60 us, p50 3.20 -> 1.99 ms;
        # docs/PERFORMANCE.md).
        batching = {"max_queue_delay_microseconds": 0}
    ragged = {"data_type": "TYPE_INT64", "dims": [-1], "allow_ragged_batch": True}
    ids = {"data_type": "TYPE_INT64", "dims": [shape.warmup_seq], "input_data_file": WARMUP_IDS}
    mask = {"data_type": "TYPE_INT64", "dims": [shape.warmup_seq], "input_data_file": WARMUP_MASK}
    return {
        "name": name,
        "backend": backend,
        "max_batch_size": shape.max_batch,
        "input": [{"name": "input_ids", **ragged}, {"name": "attention_mask", **ragged}],
        "output": [{"name": "embedding", "data_type": "TYPE_FP32", "dims": [shape.hidden]}],
        "dynamic_batching": batching,
        "instance_group": [{"kind": shape.kind, "count": shape.instances}],
        "parameters": _params(**params),
        "model_warmup": [
            {"name": f"batch_{b}", "batch_size": b, "inputs": {"input_ids": ids, "attention_mask": mask}}
            for b in sorted({1, min(8, shape.max_batch)})
        ],
    }


def embed_config(
    shape: ServingShape, bert_model: str = "bert", name: str = "embed", tokenizer_model: str = "tokenizer"
) -> dict[str, Any]:
    """The ensemble: TEXT -> tokenizer -> bert -> EMBEDDING (ensembles take no batching or warm-up)."""
    return {
        "name": name,
        "platform": "ensemble",
        "max_batch_size": shape.max_batch,
        "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [
            {"name": "EMBEDDING", "data_type": "TYPE_FP32", "dims": [shape.hidden]},
            {"name": "TRUNCATED", "data_type": "TYPE_BOOL", "dims": [1]},
        ],
        "ensemble_scheduling": {
            "step": [
                {
                    "model_name": tokenizer_model,
                    "model_version": -1,
                    "input_map": {"TEXT": "TEXT"},
                    "output_map": {"input_ids": "ids", "attention_mask": "mask", "truncated": "TRUNCATED"},
                },
                {
                    "model_name": bert_model,
                    "model_version": -1,
                    "input_map": {"input_ids": "ids", "attention_mask": "mask"},
                    "output_map": {"embedding": "EMBEDDING"},
                },
            ]
        },
    }


def native_embed_config(shape: ServingShape, precision: str, runtime: str, threads: int = 0) -> dict[str, Any]:
    """`embed` as one model of the native backend: TEXT in, tokenized on its compute threads, EMBEDDING and
    TRUNCATED out (the encoder model's parameters and batching, the ensemble's inputs and outputs), and TOKENS,
    the tokens of each text with the special ones, for a request that asks for it (the OpenAI route's usage)."""
    config = bert_config("embed", shape, precision, runtime, "bertserve", threads)
    text = {"data_type": "TYPE_STRING", "dims": [1], "input_data_file": WARMUP_TEXT}
    return {
        **config,
        "input": [{"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]}],
        "output": [*embed_config(shape)["output"], {"name": "TOKENS", "data_type": "TYPE_INT64", "dims": [1]}],
        "model_warmup": [
            {"name": f"batch_{b}", "batch_size": b, "inputs": {"TEXT": text}}
            for b in sorted({1, min(8, shape.max_batch)})
        ],
    }


def torchscript_config(shape: ServingShape) -> dict[str, Any]:
    """For stock Triton's PyTorch backend (absent from the bundled server): clients send padded batches."""
    return {
        "name": "bert_torchscript",
        "platform": "pytorch_libtorch",
        "max_batch_size": shape.max_batch,
        "default_model_filename": "model.pt",
        "input": [
            {"name": "input_ids", "data_type": "TYPE_INT64", "dims": [-1]},
            {"name": "attention_mask", "data_type": "TYPE_INT64", "dims": [-1]},
        ],
        "output": [{"name": "embedding__0", "data_type": "TYPE_FP32", "dims": [shape.hidden]}],
        "dynamic_batching": _batching(shape),
        "instance_group": [{"kind": shape.kind, "count": shape.instances}],
    }


def rerank_config(shape: ServingShape, threads: int = 0) -> dict[str, Any]:
    """`rerank`, a native model of the rerank task (backend/src/rerank*): QUERY (one text) and DOCUMENTS (n texts)
    in, SCORES (n float32, the cross-encoder's logit per query/document pair) out. No Triton batching (one request
    already holds n pairs): the backend admits each request by its predicted forwards against its deadline
    (`deadline_us`, as the native encoder's) and runs its pairs in forwards of at most max_batch rows."""
    return {
        "name": "rerank",
        "backend": "bertserve",
        "max_batch_size": 1,
        "input": [
            {"name": "QUERY", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "DOCUMENTS", "data_type": "TYPE_STRING", "dims": [-1]},
        ],
        "output": [{"name": "SCORES", "data_type": "TYPE_FP32", "dims": [-1]}],
        "instance_group": [{"kind": shape.kind, "count": shape.instances}],
        "parameters": _params(
            task="rerank",
            threads=str(threads),
            max_pairs_per_forward=str(shape.max_batch),
            max_documents=str(MAX_DOCUMENTS),
            **native_admission(shape),
        ),
        "model_warmup": [
            {
                "name": "query_and_two_documents",
                "batch_size": 1,
                "inputs": {
                    "QUERY": {"data_type": "TYPE_STRING", "dims": [1], "input_data_file": WARMUP_QUERY},
                    "DOCUMENTS": {"data_type": "TYPE_STRING", "dims": [2], "input_data_file": WARMUP_DOCUMENTS},
                },
            }
        ],
    }


def classify_config(shape: ServingShape, threads: int, labels: dict[int, str]) -> dict[str, Any]:
    """`classify`, a native model of the classify task (backend/src/classify_request.*): TEXT and an optional
    TEXT_PAIR (one text each per row, up to max_batch rows a request) in; LOGITS and PROBABILITIES (softmax) of
    every label and LABEL (the most probable label's name) out. The labels in id order are the parameter `labels`
    (a JSON list). Admitted by its predicted forwards against its deadline (`deadline_us`) as rerank is, its rows
    run in forwards of at most max_batch rows."""
    names = [labels[i] for i in sorted(labels)]
    return {
        "name": "classify",
        "backend": "bertserve",
        "max_batch_size": shape.max_batch,
        "input": [
            {"name": "TEXT", "data_type": "TYPE_STRING", "dims": [1]},
            {"name": "TEXT_PAIR", "data_type": "TYPE_STRING", "dims": [1], "optional": True},
        ],
        "output": [
            {"name": "LOGITS", "data_type": "TYPE_FP32", "dims": [len(names)]},
            {"name": "PROBABILITIES", "data_type": "TYPE_FP32", "dims": [len(names)]},
            {"name": "LABEL", "data_type": "TYPE_STRING", "dims": [1]},
        ],
        "instance_group": [{"kind": shape.kind, "count": shape.instances}],
        "parameters": _params(
            task="classify",
            threads=str(threads),
            max_rows_per_forward=str(shape.max_batch),
            labels=json.dumps(names),
            **native_admission(shape),
        ),
        "model_warmup": [
            {
                "name": "one_text",
                "batch_size": 1,
                "inputs": {"TEXT": {"data_type": "TYPE_STRING", "dims": [1], "input_data_file": WARMUP_TEXT}},
            }
        ],
    }
