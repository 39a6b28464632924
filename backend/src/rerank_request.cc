#include "rerank_request.h"

namespace bertserve {

void RerankRequest::Read(const RerankLimits& limits) noexcept {
  try {
    error = ReadPairParameters(this);
    if (!error) error = ReadStrings(request, "QUERY", 1, &query);
    if (!error) error = ReadStrings(request, "DOCUMENTS", static_cast<uint64_t>(limits.max_documents), &documents);
  } catch (const std::exception& e) {
    error = RequestError{FailureReason::kInternal, e.what()};
  }
}

void RerankRequest::Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                           uint64_t compute_end_ns) noexcept {
  SendResponse(*this, instance, metrics, compute_start_ns, compute_end_ns, [&](TRITONBACKEND_Response* response) {
    const int64_t shape[2] = {1, static_cast<int64_t>(scores.size())};
    return WriteOutput(response, "SCORES", TRITONSERVER_TYPE_FP32, shape, scores.data(), scores.size() * sizeof(float));
  });
}

}  // namespace bertserve
