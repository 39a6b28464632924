// One instance of a sequence-classifier model (rerank, classify; sequence_model.h): its loaded scorer, and the
// loop that serves requests from the model's scheduler (scheduler.h) on it.
//
// Execute reads, validates and tokenizes each request on Triton's instance thread (a query paired with each
// document, or each text with its pair, in forwards of at most max_rows rows: sequence_rows.h) and submits it:
// the scheduler admits it by its predicted forwards against its deadline, or refuses it at once (UNAVAILABLE).
// Execute returns without running a forward, so Triton hands every request over at once and the backend's queue
// is the one that holds them. The forwards run off Triton's thread, one request at a time per instance: on CUDA on
// a serving thread of the instance's own; on the CPU as a task on the compute pool every model shares
// (compute_pool.h), so OpenMP teams never outnumber the cores. The responses are sent from there.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "compute_pool.h"
#include "cost_model.h"
#include "sequence_job.h"
#include "sequence_model.h"
#include "sequence_scorer.h"
#include "triton_api.h"

namespace bertserve {

class SequenceInstance {
 public:
  // Loads the scorer on the instance's device and measures what a forward costs, then serves from the model's
  // queue.
  static std::unique_ptr<SequenceInstance> Create(SequenceModel* model, TRITONBACKEND_ModelInstance* instance);
  ~SequenceInstance();  // serves what is queued, then stops

  // Answers each request at once (a bad one fails by itself) or submits it to the scheduler. Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  SequenceInstance(SequenceModel* model, TRITONBACKEND_ModelInstance* instance, std::string device);
  CostModel MeasureCosts();
  // Answers a request no job holds (it could not be made) with INTERNAL `what`, and releases it.
  void FailUnheld(TRITONBACKEND_Request* request, const char* what) noexcept;
  // Runs the job's forwards and answers it; `work_s`: its predicted work, returned to the scheduler.
  void Run(SequenceJob& job, double work_s) noexcept;
  void Serve();                 // CUDA: the serving thread
  void ServeQueued() noexcept;  // CPU: one request on a compute pool thread (a turn of turns_)

  SequenceModel* model_;
  TRITONBACKEND_ModelInstance* instance_;
  std::string device_;
  bool gpu_ = false;
  std::unique_ptr<RowScorer> scorer_;
  // Triton's warm-up requests come first, before the model is ready: admitted whatever the queue.
  int64_t warmup_left_ = 0;

  std::atomic<bool> stopping_{false};
  std::thread server_;  // CUDA
  // CPU
  ComputePool* pool_ = nullptr;
  std::unique_ptr<PoolTurns> turns_;
  int waker_ = -1;
};

}  // namespace bertserve
