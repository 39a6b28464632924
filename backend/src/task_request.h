// What every request of the sequence-classifier tasks (rerank_request.h, classify_request.h) shares: the
// request and its error, the `truncation` and `truncate` parameters, reading BYTES inputs element by element
// (each checked as TEXT is), writing an output, and sending the one response with statistics and release. The
// serving path (sequence_job.h) holds a request through this interface, whatever its task.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "batching.h"
#include "metrics.h"
#include "response.h"
#include "sequence_rows.h"
#include "tokenizer/truncation.h"
#include "triton_api.h"

namespace bertserve {

struct TaskRequest {
  virtual ~TaskRequest() = default;
  // The rows to score, and where the scorer writes their outputs (the task's width per row).
  virtual RowTexts texts() const = 0;
  virtual std::vector<float>& outputs() = 0;
  // Sends the one response (the task's outputs, or the error with its status; a failure counted by reason),
  // reports the statistics and releases the request. Never throws.
  virtual void Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                      uint64_t compute_end_ns) noexcept = 0;

  TRITONBACKEND_Request* request = nullptr;
  uint64_t arrived_ns = 0;
  tokenizer::PairTruncation truncation = tokenizer::PairTruncation::kLongestFirst;
  bool truncate = true;
  // One of Triton's warm-up requests, sent before the model is ready: kept out of the statistics the SLO and the
  // traffic panels read, as embed's are.
  bool warmup = false;
  std::optional<RequestError> error;
};

// Whether the request carries input `name` (an optional input may be absent).
bool HasInput(TRITONBACKEND_Request* request, const char* name);

// The BYTES elements of input `name` (each a 4-byte little-endian length, then its bytes), between 1 and
// `max_count` of them, each checked as decode_text checks TEXT (size, UTF-8, blank) and named by its index.
// Throws BackendError only when a Triton call fails.
std::optional<RequestError> ReadStrings(TRITONBACKEND_Request* request, const char* name, uint64_t max_count,
                                        std::vector<std::string>* out);

// The `truncation` (longest_first, only_second) and `truncate` (true, false) request parameters into `r`.
std::optional<RequestError> ReadPairParameters(TaskRequest* r);

// Sends the request's one response: the outputs `write` adds when there is no error (a failure there becomes
// an INTERNAL error), else the error with its status, counted by reason; then the statistics and the release.
// Never throws.
void SendResponse(TaskRequest& r, TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                  uint64_t compute_end_ns,
                  const std::function<TRITONSERVER_Error*(TRITONBACKEND_Response*)>& write) noexcept;

}  // namespace bertserve
