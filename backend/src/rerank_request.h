// One request of the rerank task while the backend holds it: QUERY (one text) and DOCUMENTS (n texts) read and
// checked, the `truncation` and `truncate` parameters, then SCORES (n float32) or its error, statistics, release.
// A type of its own: the embed path's request (request.h) carries ids or texts and an embedding instead.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "metrics.h"
#include "sequence_rows.h"
#include "task_request.h"
#include "triton_api.h"

namespace bertserve {

struct RerankLimits {
  int64_t max_documents = 0;
};

struct RerankRequest : TaskRequest {
  std::vector<std::string> query;  // one text
  std::vector<std::string> documents;
  std::vector<float> scores;  // one per document

  // Reads and checks the inputs and parameters; sets `error` for a bad request. Never throws.
  void Read(const RerankLimits& limits) noexcept;
  // The rows to score: the query with each document.
  RowTexts texts() const override { return {query, documents, "QUERY", "DOCUMENTS"}; }
  // The outputs per row (one score), written by the scorer.
  std::vector<float>& outputs() override { return scores; }
  // Sends the one response (SCORES, or the error with its status; a failure counted by reason), reports the
  // statistics and releases the request. Never throws.
  void Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
              uint64_t compute_end_ns) noexcept override;
};

}  // namespace bertserve
