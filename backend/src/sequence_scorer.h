// The sequence-classifier tasks' network: padded rows (ids, mask, type ids) -> `width` float32 outputs per row
// (rerank: one score; classify: a logit per label), through the AOTInductor package export wrote
// (export/rerank.py). A forward runs on the calling thread: on the CPU the instance calls it from a thread of the
// shared compute pool (compute_pool.h), so its OpenMP team never outnumbers the CPUs beside the embed models'. On
// CUDA, with the model's `cuda_graphs` parameter "true", it replays a CUDA graph per (batch, length) bucket, every
// one captured at load (sequence_scorer_cuda.cc).
#pragma once

#include <memory>
#include <string>

#include "sequence_rows.h"
#include "settings.h"

namespace bertserve {

class RowScorer {
 public:
  // Loads the (verified) artifact on "cpu" or "cuda:N"; throws BackendError naming what failed.
  static std::unique_ptr<RowScorer> Load(const ModelSettings& settings, const std::string& device);
  virtual ~RowScorer() = default;
  // Writes chunk.rows x width outputs, row-major, to `out`; throws on failure, or when the model's output is
  // not [rows, width] (or [rows] for width 1): the caller fails that request alone.
  virtual void Score(const RowChunk& chunk, int64_t width, float* out) = 0;
  // The median seconds of `timed_calls` forwards of [batch, seq] tokens (after one untimed call), for the cost
  // model; throws as Score does.
  double Time(int64_t batch, int64_t seq, int64_t width, int timed_calls);
};

}  // namespace bertserve
