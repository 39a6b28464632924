// One request of the rerank task while the backend holds it: QUERY (one text) and DOCUMENTS (n texts) read and
// checked, the `truncation` and `truncate` parameters, then SCORES (n float32) or its error, statistics, release.
// A type of its own: the embed path's request (request.h) carries ids or texts and an embedding instead.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batching.h"
#include "metrics.h"
#include "tokenizer/truncation.h"
#include "triton_api.h"

namespace bertserve {

struct RerankLimits {
  int64_t max_documents = 0;
};

struct RerankRequest {
  TRITONBACKEND_Request* request = nullptr;
  uint64_t arrived_ns = 0;
  std::string query;
  std::vector<std::string> documents;
  tokenizer::PairTruncation truncation = tokenizer::PairTruncation::kLongestFirst;
  bool truncate = true;
  std::optional<RequestError> error;
  std::vector<float> scores;  // one per document

  // Reads and checks the inputs and parameters; sets `error` for a bad request. Never throws.
  void Read(const RerankLimits& limits) noexcept;
  // Sends the one response (SCORES, or the error with its status; a failure counted by reason), reports the
  // statistics and releases the request. Never throws.
  void Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
              uint64_t compute_end_ns) noexcept;
};

}  // namespace bertserve
