// The rerank task's network: padded pair rows (ids, mask, type ids) -> one float32 score per row, through the
// AOTInductor package export wrote (export/rerank.py). CPU forwards run on the shared compute pool
// (compute_pool.h), so their OpenMP teams never outnumber the CPUs beside the embed models'.
#pragma once

#include <memory>
#include <string>

#include "rerank_pairs.h"
#include "settings.h"

namespace bertserve {

class PairScorer {
 public:
  // Loads the (verified) artifact on "cpu" or "cuda:N"; throws BackendError naming what failed.
  static std::unique_ptr<PairScorer> Load(const ModelSettings& settings, const std::string& device);
  virtual ~PairScorer() = default;
  // Writes chunk.rows scores to `out`; throws on failure (the caller fails that request alone).
  virtual void Score(const PairChunk& chunk, float* out) = 0;
};

}  // namespace bertserve
