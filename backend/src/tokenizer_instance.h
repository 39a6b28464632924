// One instance of a tokenizer model (manifest runtime "none"): TEXT in; input_ids, attention_mask (int64, [rows,
// longest], zero-padded) and truncated (bool, [rows, 1]) out, for clients that tokenize on the server and send the
// ids on (the contract of the Python `tokenizer` model it replaces where the native tokenizer reproduces the
// checkpoint's). No runtime and no scheduler: each request is read, tokenized and answered on Triton's instance
// thread, with the messages, statuses and failure reasons of the encoder models' text path (request.h).
#pragma once

#include <cstdint>

#include "model_state.h"
#include "triton_api.h"

namespace bertserve {

class TokenizerInstance {
 public:
  TokenizerInstance(ModelState* model, TRITONBACKEND_ModelInstance* instance);

  // Answers every request (one response each, a bad request fails alone). Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  ModelState* model_;
  TRITONBACKEND_ModelInstance* instance_;
  int64_t warmup_left_ = 0;  // Triton's warm-up requests come first: not counted as served (request.h)
};

}  // namespace bertserve
