#include "sequence_job.h"

#include "triton_util.h"

namespace bertserve {

SequenceJob::SequenceJob(std::unique_ptr<TaskRequest> t) noexcept
    : task(std::move(t)), request(task->request), arrived_ns(task->arrived_ns) {}

SequenceJob::~SequenceJob() {
  if (request == nullptr || released) return;
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONBACKEND_ResponseNew(&response, request) == nullptr) {
    ErrorPtr status(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the request was dropped on an error path"));
    ErrorPtr(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, status.get()));
  }
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
}

int64_t SequenceJob::rows() const {
  int64_t n = 0;
  for (const RowChunk& c : chunks) n += c.rows;
  return n;
}

std::vector<std::pair<int64_t, int64_t>> SequenceJob::forwards() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  out.reserve(chunks.size());
  for (const RowChunk& c : chunks) out.emplace_back(c.rows, c.seq);
  return out;
}

void SequenceJob::Fail(RequestError error, TRITONBACKEND_ModelInstance* instance, const ModelSettings& /*settings*/,
                       Metrics& metrics) noexcept {
  if (released) return;
  task->error = std::move(error);
  const uint64_t now = NowNs();
  Finish(instance, metrics, now, now);
}

void SequenceJob::Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                         uint64_t compute_end_ns) noexcept {
  if (released) return;
  task->Finish(instance, metrics, compute_start_ns, compute_end_ns);
  released = true;
}

}  // namespace bertserve
