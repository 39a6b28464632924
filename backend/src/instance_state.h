// One instance of an encoder model: its loaded runtime, and the loop that serves batches from the model's
// scheduler (scheduler.h) on it.
//
// Execute only reads and validates its requests and hands them on: on CUDA to the model's host threads, which
// tokenize and submit them; on the CPU it tokenizes and submits them itself (a second busy thread would take a
// core from the forward's OpenMP team). Triton's instance thread is therefore always waiting for work and its
// dynamic batcher never stalls.
//
// On CUDA each instance runs two threads of its own. The feeder takes a batch, collates it and queues its passes
// on the instance's stream, with up to two batches in flight: the next batch is collated and queued while the
// device computes the current one. The completion thread waits for each batch's passes and hands the responses
// to the host threads, so nothing a frontend does inside ResponseSend (HTTP's JSON formatting) holds up the
// device. On the CPU a batch runs as one task on the compute pool that every model shares (compute_pool.h):
// collate, forward, respond.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
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
  // Loads the artifact on the instance's device and measures what a forward costs (on CUDA, captures and times
  // every bucket), then starts serving from the model's queue.
  static std::unique_ptr<InstanceState> Create(ModelState* model, TRITONBACKEND_ModelInstance* instance);
  ~InstanceState();  // serves what is queued, then stops

  // Answers every request (one response each, a bad request fails alone) or hands it on. Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  struct Flight;  // a batch from its launch to its responses

  InstanceState(ModelState* model, TRITONBACKEND_ModelInstance* instance, std::string device);
  CostModel MeasureCosts();
  void Prepare(std::unique_ptr<Pending> p) noexcept;  // tokenizes (text models) and submits
  // Prepares read requests here, or on the prepare threads in chunks when they hold more than a few texts.
  void Dispatch(std::vector<std::unique_ptr<Pending>>& held, size_t texts) noexcept;
  // Answers a request execute failed on: through `p` where a Pending still holds it; where none took it
  // (`held` false), here; where one took it and moved on (`p` null, `held` true), its new owner answers.
  void FailOne(TRITONBACKEND_Request* request, Pending* p, bool held, const char* what) noexcept;
  void Launch(Flight& f);         // collates and starts the passes (the batch stays in `f` if it throws)
  void Land(Flight& f);           // waits for the passes and scatters their rows
  void Respond(Flight& f, size_t begin, size_t end) noexcept;  // responses and statistics of batch[begin, end)
  void Close(Flight& f) noexcept;                               // the batch's statistics and metrics
  void Answer(std::shared_ptr<Flight> f);                       // CUDA: Respond in chunks on the answer threads
  void Fail(Flight& f, const std::string& what) noexcept;
  void Feed();        // CUDA: the feeder thread
  void Complete();    // CUDA: the completion thread
  void ServeQueued() noexcept;  // CPU: one batch on a compute pool thread (a turn of turns_)

  ModelState* model_;
  TRITONBACKEND_ModelInstance* instance_;
  std::string device_;
  bool gpu_ = false;
  std::unique_ptr<Runtime> runtime_;
  std::vector<int64_t> batch_buckets_;  // CUDA: batches are padded to these (one graph per bucket)
  std::optional<Costs> graph_costs_;    // CUDA: measured per (batch, length) bucket, for Collate
  // Triton sends each instance the config's warm-up requests first, before the model is ready, and gives them no
  // id: the first this many requests an instance receives are admitted whatever the queue.
  int64_t warmup_left_ = 0;

  std::mutex mutex_;
  std::condition_variable changed_;
  std::atomic<bool> stopping_{false};
  // CUDA
  std::deque<std::unique_ptr<Flight>> flights_;  // launched, not landed
  int in_flight_ = 0;
  bool fed_ = false;  // the feeder has stopped
  int answering_ = 0;  // batches whose responses a host thread is sending
  uint64_t last_landed_ns_ = 0;
  // The feeder's: when the device should have finished what was launched, and the host time a launch takes.
  uint64_t device_free_ns_ = 0;
  double launch_s_ = 0.0;
  std::atomic<uint64_t> take_after_ns_{0};  // the next batch is taken then, or when full (Scheduler::Take)
  std::thread feeder_, completer_;
  // CPU
  ComputePool* pool_ = nullptr;
  std::unique_ptr<PoolTurns> turns_;
  int waker_ = -1;
};

}  // namespace bertserve
