"""Triton Python-backend model ``bert`` (and ``bert_<precision>``): token ids -> sentence embedding.

Export copies this file into the repository as ``<model>/1/model.py``; the code it imports lives in ``serving``.
Ragged requests are validated one by one (a bad one fails alone), collated into length buckets, run through the
verified artifact the manifest names, and answered with one response per request.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import numpy as np
import torch
import triton_python_backend_utils as pb_utils

from serving.contract.manifest import read
from serving.python_backend import batching, heap
from serving.python_backend.errors import InternalError, RequestError
from serving.python_backend.metrics import ModelMetrics
from serving.python_backend.model import StubModel
from serving.python_backend.runtime import Runtime

log = logging.getLogger(__name__)


class TritonPythonModel(StubModel):
    pb_utils = pb_utils

    def initialize(self, args: dict) -> None:
        model_dir = Path(args["model_repository"])
        self.manifest = read(model_dir)
        config = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        # 0: the CPUs this process may use (its affinity), never the host's count
        torch.set_num_threads(int(params.get("threads", "0")) or len(os.sched_getaffinity(0)))
        device = "cpu"
        if args.get("model_instance_kind") == "GPU":
            device = f"cuda:{args['model_instance_device_id']}"
            torch.cuda.set_device(device)
        self.vocab_size = int(self.manifest["vocab_size"])
        self.max_seq = int(self.manifest["max_seq"])
        self.len_buckets = batching.length_buckets(self.max_seq)
        self.batch_buckets = batching.batch_buckets(int(config["max_batch_size"])) if device != "cpu" else None
        self.runtime = Runtime(model_dir, self.manifest, device)
        # On CUDA every graph is captured before the model reports ready, not on a first request, and timed: the
        # measured cost per (batch, length) bucket decides which length buckets share a pass.
        self.costs = None
        if self.batch_buckets:
            started = time.perf_counter()
            self.costs = self.runtime.warm([(b, s) for b in self.batch_buckets for s in self.len_buckets])
            log.info("captured and timed %d CUDA graphs in %.1f s", len(self.costs), time.perf_counter() - started)
        self.metrics = ModelMetrics(pb_utils, args["model_name"], stages=("collate", "infer", "respond"))
        heap.settle()

    def execute(self, requests: list) -> list:
        start = time.perf_counter()
        errors: dict[int, RequestError] = {}
        valid: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        for i, request in enumerate(requests):
            ids = pb_utils.get_input_tensor_by_name(request, "input_ids").as_numpy()
            mask = pb_utils.get_input_tensor_by_name(request, "attention_mask").as_numpy()
            try:
                valid[i] = (ids, mask, batching.validate(ids, mask, self.vocab_size, self.max_seq))
            except RequestError as e:
                errors[i] = e
        collated = batching.collate(valid, self.len_buckets, self.batch_buckets, self.costs)
        collated_at = time.perf_counter()

        outputs: dict[int, np.ndarray] = {i: np.empty((v[0].shape[0], 0), np.float32) for i, v in valid.items()}
        for group in collated.groups:
            try:
                emb = self.runtime(group.ids, group.mask)
            except Exception as e:  # one failed forward fails only the requests in it
                log.exception("forward failed for a batch of shape %s", group.ids.shape)
                for req, _ in group.rows:
                    errors[req] = InternalError(f"inference failed: {e}")
                continue
            for k, (req, row) in enumerate(group.rows):
                if outputs[req].shape[1] == 0:
                    outputs[req] = np.empty((valid[req][0].shape[0], emb.shape[1]), np.float32)
                outputs[req][row] = emb[k]
        inferred = time.perf_counter()

        responses = []
        for i in range(len(requests)):
            if i in errors:
                responses.append(self.error_response(errors[i]))
            else:
                responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("embedding", outputs[i])]))
        end = time.perf_counter()
        self._observe(collated, start, collated_at, inferred, end, len(responses))
        return responses

    def _observe(self, collated: batching.Collated, start, collated_at, inferred, end, n: int) -> None:
        m = self.metrics
        m.stage["collate"].observe(collated_at - start)
        m.stage["respond"].observe(end - inferred)
        if collated.groups:
            m.stage["infer"].observe(inferred - collated_at)
            m.batch_size.observe(sum(len(g.rows) for g in collated.groups))
            m.padding_ratio.observe(collated.padding_ratio)
            m.tokens.increment(collated.real_tokens)
        for _ in range(n):
            m.request.observe(end - start)
