// One request of the classify task while the backend holds it: TEXT (n texts, a [n, 1] batch) and an optional
// TEXT_PAIR (n texts, row i paired with TEXT's row i) read and checked, the `truncation` and `truncate`
// parameters, then LOGITS and PROBABILITIES ([n, labels] float32; softmax over the labels) and LABEL ([n, 1]
// BYTES, the most probable label's name), or its error, statistics, release.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "metrics.h"
#include "sequence_rows.h"
#include "task_request.h"
#include "triton_api.h"

namespace bertserve {

struct ClassifyLimits {
  int64_t max_rows = 0;  // texts per request (the config's max_batch_size)
};

// Softmax of each row of `logits` ([rows, width], row-major), in float32, with the row's largest logit
// subtracted first.
std::vector<float> Softmax(const std::vector<float>& logits, size_t width);

struct ClassifyRequest : TaskRequest {
  explicit ClassifyRequest(std::span<const std::string> labels) : labels(labels) {}

  std::span<const std::string> labels;  // the model's, in id order
  std::vector<std::string> text;
  std::vector<std::string> pair;  // empty, or one per text
  std::vector<float> logits;      // [rows, labels]

  // Reads and checks the inputs and parameters; sets `error` for a bad request. Never throws.
  void Read(const ClassifyLimits& limits) noexcept;
  RowTexts texts() const override { return {text, pair, "TEXT", "TEXT_PAIR"}; }
  std::vector<float>& outputs() override { return logits; }
  // Sends the one response (LOGITS, PROBABILITIES, LABEL, or the error with its status), reports the statistics
  // and releases the request. Never throws.
  void Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
              uint64_t compute_end_ns) noexcept override;
};

}  // namespace bertserve
