// One instance of an encoder model: its loaded runtime and how it serves what execute hands it.
//
// Execute only reads and validates its requests, queues the valid ones and returns; batches are taken from the
// queue on a compute pool thread: on the CPU the pool all models share (compute_pool.h), on CUDA one thread of
// the instance's own (its stream and CUDA graphs). Triton's instance thread is therefore always waiting for
// work, so its dynamic batcher never stalls (with a queue policy, tritonserver 2.51 waits for a busy instance
// by polling every 500 ms), and the backend, which sees every queued request, does the load shedding: a full
// queue refuses at once; a request that waited past its deadline (the client's timeout, or the model's while
// more than a batch waits) is refused when its turn comes (both UNAVAILABLE). Whatever arrives while a forward
// runs is batched into the next one.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "batching.h"
#include "compute_pool.h"
#include "model_state.h"
#include "request.h"
#include "runtime.h"
#include "triton_api.h"

namespace bertserve {

class InstanceState {
 public:
  // Loads the artifact on the instance's device (on CUDA, captures and times every bucket).
  static std::unique_ptr<InstanceState> Create(ModelState* model, TRITONBACKEND_ModelInstance* instance);
  ~InstanceState();  // waits until every queued request has been answered

  // Answers every request (one response each, a bad request fails alone) and releases it. Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  InstanceState(ModelState* model, TRITONBACKEND_ModelInstance* instance, std::string device);
  // Collates, runs, responds to and releases valid requests; exec_start_ns: when their execution began.
  void Serve(const std::vector<Pending*>& batch, uint64_t exec_start_ns);
  void Refuse(Pending& p, RequestError error);
  // Queues the valid requests that fit (their entries become null) and refuses the others.
  void Enqueue(std::vector<std::unique_ptr<Pending>>& pending);
  // Answers a request execute could not even read (INTERNAL) and releases it.
  void FailUnread(TRITONBACKEND_Request* request, const char* what) noexcept;
  void ServeQueued();  // on a compute pool thread: one batch from the queue
  // The longest `p` may wait (0: none): the client's timeout, and the model's while `overloaded`.
  uint64_t DeadlineUs(const Pending& p, bool overloaded) const;

  ModelState* model_;
  TRITONBACKEND_ModelInstance* instance_;
  std::string device_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<int64_t> batch_buckets_;  // CUDA: batches are padded to these (one graph per bucket)
  std::optional<Costs> costs_;          // CUDA: measured per (batch, length) bucket

  std::unique_ptr<ComputePool> own_pool_;  // CUDA
  ComputePool* pool_ = nullptr;            // where queued batches run
  std::mutex mutex_;
  std::condition_variable idle_;
  std::deque<std::unique_ptr<Pending>> queue_;
  int64_t queued_rows_ = 0;
  bool serving_ = false;  // a ServeQueued is posted or running
};

}  // namespace bertserve
