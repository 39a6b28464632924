"""Run the artifact a model's manifest names: verified, loaded once, never compiled; CUDA graphs per bucket."""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from serving.contract.artifacts import load_module
from serving.contract.manifest import verify

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Bucket:
    """One captured (batch, length) bucket: its graph and the pinned host buffers the graph's copies use."""

    graph: torch.cuda.CUDAGraph
    host_ids: np.ndarray  # [B, S] int64, pinned
    host_mask: np.ndarray  # [B, S] int64, pinned
    host_out: np.ndarray  # [B, H] float32, pinned
    inputs: tuple[torch.Tensor, torch.Tensor]  # the graph's static device inputs, alive as long as it is


class Runtime:
    """(input_ids, attention_mask) int64 numpy [B, S] -> float32 numpy [B, H]."""

    def __init__(self, model_dir: Path, manifest: dict[str, Any], device: str) -> None:
        self.kind = manifest["runtime"]
        rel = manifest["artifacts"][self.kind]["file"]
        # The launcher verified every file, but Kubernetes starts tritonserver without it (model control mode
        # none), and a pickled artifact executes code on load: the model checks what it loads itself.
        verify(model_dir, manifest, only=[rel])
        self.device = device
        self.use_graphs = device.startswith("cuda")
        self.module = load_module(self.kind, model_dir / rel, device, cuda_graphs=self.use_graphs)
        self.graphs: dict[tuple[int, int], _Bucket] = {}
        log.info("loaded %s artifact %s on %s", self.kind, rel, device)

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.use_graphs:
            return self._replay(ids, mask)
        with torch.inference_mode():
            return self.module(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()

    def _replay(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Replay the CUDA graph of this (batch, length) bucket, captured in the calling thread on first use.

        The graph holds the copies too: pinned host inputs -> device, the model, the fp32 cast, device -> pinned
        host output. A call is two host memcpys, one graph launch and one synchronize. One caller thread per
        Runtime (see ``load_module``): the pinned buffers are the bucket's, not the call's.
        """
        key = ids.shape
        if key not in self.graphs:
            self.graphs[key] = self._capture(key)
        bucket = self.graphs[key]
        np.copyto(bucket.host_ids, ids)
        np.copyto(bucket.host_mask, mask)
        bucket.graph.replay()
        # Before the host touches the buffers again (the next call's inputs, this call's output): the caching host
        # allocator does not track the replays' use of them.
        torch.cuda.current_stream().synchronize()
        return bucket.host_out.copy()  # the buffer is the next replay's

    def _capture(self, shape: tuple[int, int]) -> _Bucket:
        # Same dtype and contiguous on both sides, so each copy_ is one captured memcpy: a conversion would go
        # through a temporary that lives only at capture time.
        host_ids = torch.empty(shape, dtype=torch.int64, pin_memory=True)
        host_mask = torch.empty(shape, dtype=torch.int64, pin_memory=True)
        ids = torch.ones(shape, dtype=torch.int64, device=self.device)
        mask = torch.ones(shape, dtype=torch.int64, device=self.device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for _ in range(2):
                out = self.module(ids, mask)
        torch.cuda.current_stream().wait_stream(stream)
        host_out = torch.empty(out.shape, dtype=torch.float32, pin_memory=True)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            ids.copy_(host_ids, non_blocking=True)
            mask.copy_(host_mask, non_blocking=True)
            host_out.copy_(self.module(ids, mask).float(), non_blocking=True)
        log.info("captured a CUDA graph for bucket %s", shape)
        return _Bucket(graph, host_ids.numpy(), host_mask.numpy(), host_out.numpy(), (ids, mask))

    def warm(self, shapes: list[tuple[int, int]], timed_calls: int = 5) -> dict[tuple[int, int], float]:
        """Run every shape once (capturing its graph), then time ``timed_calls`` more: median seconds per shape."""
        costs = {}
        for shape in shapes:
            ids = np.ones(shape, dtype=np.int64)
            self(ids, ids)
            times = []
            for _ in range(timed_calls):
                started = time.perf_counter()
                self(ids, ids)  # returns host memory: the time includes the copies and the sync
                times.append(time.perf_counter() - started)
            costs[shape] = statistics.median(times)
        return costs
