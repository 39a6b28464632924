"""Run the artifact a model's manifest names: verified, loaded once, never compiled; CUDA graphs per bucket."""

from __future__ import annotations

import logging
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from export.artifacts import load_module
from serving.manifest import verify

log = logging.getLogger(__name__)


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
        self.graphs: dict[tuple[int, int], tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        log.info("loaded %s artifact %s on %s", self.kind, rel, device)

    def __call__(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        if self.use_graphs:
            return self._replay(ids, mask)
        with torch.inference_mode():
            return self.module(torch.from_numpy(ids), torch.from_numpy(mask)).float().numpy()

    def _replay(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Replay the CUDA graph of this (batch, length) bucket, captured in the calling thread on first use."""
        key = ids.shape
        if key not in self.graphs:
            self.graphs[key] = self._capture(key)
        graph, static_ids, static_mask, out = self.graphs[key]
        static_ids.copy_(torch.from_numpy(ids), non_blocking=True)
        static_mask.copy_(torch.from_numpy(mask), non_blocking=True)
        graph.replay()
        return out.float().cpu().numpy()

    def _capture(self, shape: tuple[int, int]) -> tuple[Any, torch.Tensor, torch.Tensor, torch.Tensor]:
        static_ids = torch.ones(shape, dtype=torch.int64, device=self.device)
        static_mask = torch.ones(shape, dtype=torch.int64, device=self.device)
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for _ in range(2):
                self.module(static_ids, static_mask)
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.inference_mode(), torch.cuda.graph(graph):
            out = self.module(static_ids, static_mask)
        log.info("captured a CUDA graph for bucket %s", shape)
        return graph, static_ids, static_mask, out

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
