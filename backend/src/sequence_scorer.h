// The sequence-classifier tasks' network: padded rows (ids, mask, type ids) -> `width` float32 outputs per row
// (rerank: one score; classify: a logit per label), through the AOTInductor package export wrote
// (export/rerank.py). CPU forwards run on the shared compute pool (compute_pool.h), so their OpenMP teams never
// outnumber the CPUs beside the embed models'.
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
};

}  // namespace bertserve
