#include "tokenizer_instance.h"

#include <algorithm>

#include "request.h"
#include "triton_util.h"

namespace bertserve {
namespace {

double Seconds(uint64_t from_ns, uint64_t to_ns) { return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) * 1e-9 : 0.0; }

}  // namespace

TokenizerInstance::TokenizerInstance(ModelState* model, TRITONBACKEND_ModelInstance* instance)
    : model_(model), instance_(instance), warmup_left_(model->settings().warmup_requests) {}

void TokenizerInstance::Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept {
  const ModelSettings& s = model_->settings();
  Metrics& metrics = model_->metrics();
  const uint64_t start = NowNs();
  int64_t rows = 0;
  for (uint32_t i = 0; i < count; ++i) {
    Pending p;  // answers and releases its request whatever happens below
    p.request = requests[i];
    p.arrived_ns = start;
    const uint64_t began = NowNs();
    try {
      p.Read(s);
      if (warmup_left_ > 0) p.warmup = warmup_left_-- > 0;
      if (!p.error) {
        p.Tokenize(s, *model_->tokenizer());
        metrics.StageTime(Stage::kTokenize, Seconds(began, NowNs()));
        metrics.Truncated(std::count(p.truncated.begin(), p.truncated.end(), uint8_t{1}));
      }
    } catch (const std::exception& e) {
      p.error = Internal(std::string("tokenizing failed: ") + e.what());
    }
    const uint64_t tokenized = NowNs();
    p.Respond(s, metrics);
    const uint64_t end = NowNs();
    p.Finish(instance_, began, began, tokenized, end);
    if (!p.warmup) {
      metrics.StageTime(Stage::kRespond, Seconds(tokenized, end));
      metrics.Request(Seconds(start, end));
      if (!p.error) rows += p.rows();
    }
  }
  if (rows > 0) {
    const uint64_t end = NowNs();
    ErrorPtr(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance_, static_cast<uint64_t>(rows), start, start,
                                                              end, end));
  }
}

}  // namespace bertserve
