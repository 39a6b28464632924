"""Triton Python-backend model ``tokenizer``: TEXT (and TEXT_PAIR) -> input_ids, attention_mask, token_type_ids,
truncated.

With TEXT_PAIR (as many elements as TEXT) each row is the pair `[CLS] TEXT [SEP] TEXT_PAIR [SEP]`, type ids 0 then
1, cut as the request's ``truncation`` parameter says (``longest_first``, the default, or ``only_second``).

Export copies this file into the repository as ``tokenizer/1/model.py``; the code it imports lives in ``serving``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

from serving.python_backend import batching, heap, pairs
from serving.python_backend.errors import RequestError
from serving.python_backend.metrics import ModelMetrics
from serving.python_backend.model import StubModel

# The `truncate` request parameter's accepted values: a boolean (1 and 0 find True and False), or its spelling.
TRUNCATE_VALUES = {True: True, False: False, "true": True, "false": False, "True": True, "False": False,
                   "1": True, "0": False}  # fmt: skip


def _truncate_requested(request) -> bool:
    """``truncate`` request parameter: true (default) truncates long texts, false rejects them; anything else is
    the client's error."""
    value = json.loads(request.parameters() or "{}").get("truncate", True)
    if isinstance(value, float) or value not in TRUNCATE_VALUES:
        raise RequestError("bad_parameter", f"truncate must be true or false, got {json.dumps(value)[:64]}")
    return TRUNCATE_VALUES[value]


def _padded(rows: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Token id rows -> (ids, attention mask), int64 [rows, longest], zero-padded on the right."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    width = int(lengths.max())
    ids = np.zeros((len(rows), width), dtype=np.int64)
    for k, row in enumerate(rows):
        ids[k, : len(row)] = row
    return ids, (np.arange(width) < lengths[:, None]).astype(np.int64)


class TritonPythonModel(StubModel):
    pb_utils = pb_utils

    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        self.max_seq = int(config["parameters"]["max_seq"]["string_value"])
        path = Path(args["model_repository"]) / args["model_version"] / "tokenizer" / "tokenizer.json"
        self.tokenizer = Tokenizer.from_file(str(path))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(self.max_seq)
        self.pairs = pairs.PairEncoder(path, self.max_seq)
        self.metrics = ModelMetrics(pb_utils, args["model_name"], stages=("tokenize", "respond"))
        heap.settle()

    def execute(self, requests: list) -> list:
        is_pair = [pb_utils.get_input_tensor_by_name(r, "TEXT_PAIR") is not None for r in requests]
        if not any(is_pair):
            return self._execute_texts(requests)
        if all(is_pair):
            return self._execute_pairs(requests)
        singles = iter(self._execute_texts([r for r, p in zip(requests, is_pair, strict=True) if not p]))
        doubles = iter(self._execute_pairs([r for r, p in zip(requests, is_pair, strict=True) if p]))
        return [next(doubles) if p else next(singles) for p in is_pair]

    def _execute_texts(self, requests: list) -> list:
        start = time.perf_counter()
        errors: dict[int, RequestError] = {}
        texts: dict[int, list[str]] = {}
        for i, request in enumerate(requests):
            try:
                texts[i] = batching.decode_texts(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy())
            except RequestError as e:
                errors[i] = e
        order = [(i, j) for i, ts in texts.items() for j in range(len(ts))]
        encodings = self.tokenizer.encode_batch([texts[i][j] for i, j in order]) if order else []
        per_request: dict[int, list] = {}
        for (i, _), enc in zip(order, encodings, strict=True):
            per_request.setdefault(i, []).append(enc)
        for i, encs in per_request.items():
            try:
                truncate = _truncate_requested(requests[i])  # checked whether or not a text is too long
            except RequestError as e:
                errors[i] = e
                continue
            if any(e.overflowing for e in encs) and not truncate:
                errors[i] = RequestError("too_long", f"TEXT is longer than the max length of {self.max_seq} tokens")
        tokenized = time.perf_counter()
        self.metrics.stage["tokenize"].observe(tokenized - start)

        responses = []
        for i in range(len(requests)):
            if i in errors:
                responses.append(self.error_response(errors[i]))
                continue
            encs = per_request[i]
            ids, mask = _padded([e.ids for e in encs])  # each .ids builds a new list: read it once
            types = np.zeros_like(ids)  # one sequence: type 0 throughout
            truncated = np.array([[bool(e.overflowing)] for e in encs])
            self.metrics.tokens.increment(int(mask.sum()))
            if truncated.any():
                self.metrics.truncated.increment(int(truncated.sum()))
            responses.append(_tokens_response(ids, mask, types, truncated))
        end = time.perf_counter()
        self.metrics.stage["respond"].observe(end - tokenized)
        for _ in responses:
            self.metrics.request.observe(end - start)
        return responses

    def _pairs_of(self, request) -> tuple[list[tuple[str, str]], str]:
        """A pair request's (TEXT, TEXT_PAIR) elements, checked, and its truncation strategy."""
        first = batching.decode_texts(pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy())
        try:
            second = batching.decode_texts(pb_utils.get_input_tensor_by_name(request, "TEXT_PAIR").as_numpy())
        except RequestError as e:
            raise RequestError(e.reason, f"TEXT_PAIR: {e}") from None
        if len(second) != len(first):
            raise RequestError("bad_input", f"TEXT has {len(first)} elements and TEXT_PAIR {len(second)}; pair them")
        parameters = json.loads(request.parameters() or "{}")
        if "truncate" in parameters:
            _truncate_requested(request)
        return list(zip(first, second, strict=True)), pairs.strategy_of(parameters)

    def _execute_pairs(self, requests: list) -> list:
        start = time.perf_counter()
        responses = []
        for request in requests:
            try:
                pair_list, strategy = self._pairs_of(request)
                encs = self.pairs.encode(pair_list, strategy)
                refused = next((e for e in encs if isinstance(e, RequestError)), None)
                if refused is not None:
                    raise refused
                if any(e.overflowing for e in encs) and not _truncate_requested(request):
                    raise RequestError("too_long", f"a pair is longer than the max length of {self.max_seq} tokens")
            except RequestError as e:
                responses.append(self.error_response(e))
                continue
            ids, mask, types = pairs.padded(encs)
            truncated = np.array([[bool(e.overflowing)] for e in encs])
            self.metrics.tokens.increment(int(mask.sum()))
            responses.append(_tokens_response(ids, mask, types, truncated))
        end = time.perf_counter()
        self.metrics.stage["tokenize"].observe(end - start)
        for _ in responses:
            self.metrics.request.observe(end - start)
        return responses


def _tokens_response(ids: np.ndarray, mask: np.ndarray, types: np.ndarray, truncated: np.ndarray):
    """One request's answer: its padded ids, mask and type ids, and which of its rows were cut."""
    return pb_utils.InferenceResponse(
        [
            pb_utils.Tensor("input_ids", ids),
            pb_utils.Tensor("attention_mask", mask),
            pb_utils.Tensor("token_type_ids", types),
            pb_utils.Tensor("truncated", truncated),
        ]
    )
