// One inference request while the backend holds it: its inputs read and validated, its embedding or its error,
// then one response, its statistics and its release. Every request the backend accepts leaves through Finish.
// Its path: read in execute, prepared (tokenized) on a host thread, admitted or refused by the model's scheduler,
// batched, then answered from wherever its batch completes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batching.h"
#include "metrics.h"
#include "settings.h"
#include "tokenizer/tokenizer.h"
#include "triton_api.h"

namespace bertserve {

struct Pending {
  Pending() = default;
  // A request still held here is answered (INTERNAL, unless a response went out) and released: a Pending dropped
  // on an error path never leaves its client waiting.
  ~Pending();
  Pending(const Pending&) = delete;
  Pending& operator=(const Pending&) = delete;

  TRITONBACKEND_Request* request = nullptr;
  uint64_t arrived_ns = 0;  // when execute received it
  std::vector<int64_t> ids, mask;
  TokenBatch batch;
  std::vector<int64_t> lengths;
  std::optional<RequestError> error;
  // Text models: the TEXT elements (checked), the `truncate` request parameter, and per text whether it was cut.
  std::vector<std::string> texts;
  bool truncate = true;
  std::vector<uint8_t> truncated;
  std::vector<float> embedding;  // [rows, hidden]
  bool wants_tokens = false;     // text models: the client asked for TOKENS (tokens per text)
  bool warmup = false;           // one of Triton's warm-up requests: never refused
  bool responded = false;        // a final response went out (or could not be created)
  bool released = false;
  std::string fault_point;       // fault.h: the point this request injects a fault at (tests only)

  // Reads input_ids and attention_mask (TEXT for a text model) and validates them; sets `error` for a bad request.
  void Read(const ModelSettings& settings);
  // Text models, on a compute thread: the ids of each text; sets `error` for a text too long to keep.
  void Tokenize(const ModelSettings& settings, const tokenizer::Tokenizer& tokenizer);
  int64_t rows() const { return texts.empty() ? batch.rows() : static_cast<int64_t>(texts.size()); }
  // Sends the one response (the embedding, or the error with its status) and counts a failure by reason. Whatever
  // fails between creating the response and sending it, the response is sent (INTERNAL): Triton owns it from then.
  void Respond(const ModelSettings& settings, Metrics& metrics) noexcept;
  // Answers with `error` at once (refused or failed before it was batched), with its statistics and metrics.
  void Fail(RequestError error, TRITONBACKEND_ModelInstance* instance, const ModelSettings& settings,
            Metrics& metrics) noexcept;
  // Reports the request's statistics to Triton (exec_start_ns: when its execution began) and releases it.
  void Finish(TRITONBACKEND_ModelInstance* instance, uint64_t exec_start_ns, uint64_t compute_start_ns,
              uint64_t compute_end_ns, uint64_t exec_end_ns) noexcept;
};

// A request the backend could not serve through no fault of its input.
RequestError Internal(const std::string& message);
// A request refused to protect the others (queue full, waited past its deadline): UNAVAILABLE, retry elsewhere.
RequestError Unavailable(FailureReason reason, const std::string& message);

}  // namespace bertserve
