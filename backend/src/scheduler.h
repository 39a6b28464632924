// A model's scheduler, shared by its instances: admission by work and deadline, one queue earliest deadline first,
// batches by rows and padded tokens (work_queue.h), and the queued work as a gauge. One implementation for every
// task, over what it queues: embed's requests (Pending, request.h), whose rows join batches with other requests',
// and the sequence tasks' (SequenceJob, sequence_job.h), each served alone in forwards of its own.
//
// A request reaches it prepared (read, validated, tokenized). Its deadline is the client's timeout when it sent
// one (a hard deadline: past it the request is refused at its turn, the client has gone), else the model's
// `deadline_us`, widened to twice the request's own forward so that a long request is never refused for waiting
// less than it takes. A request whose predicted completion passes its deadline is refused at once with
// UNAVAILABLE and a message that says how much work, in milliseconds, is queued ahead of it; under a sustained
// overload, one without a timeout of its own is also refused when its wait would pass `standing_queue_us`
// (work_queue.h).
//
// What it queues (Item) has the request's `request`, `arrived_ns`, `warmup`, `released` and `rows()`, and
// `Fail(RequestError, instance, settings, metrics)`, which answers it at once; its cost is CostOf (scheduler.cc).
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "cost_model.h"
#include "metrics.h"
#include "request.h"
#include "sequence_job.h"
#include "settings.h"
#include "triton_api.h"
#include "work_queue.h"

namespace bertserve {

template <class Item>
class Scheduler {
 public:
  // A batch holds at most `batch_rows` rows and `batch_tokens` padded tokens, or one request (1, 1: each
  // request alone).
  Scheduler(const ModelSettings& settings, Metrics& metrics, int64_t batch_rows, int64_t batch_tokens);

  // An instance that serves from the queue: the first brings the costs it measured at load.
  void AddLane(const CostModel& costs);
  // Called whenever work is admitted (CPU instances post a task to the compute pool); returns a handle.
  int Subscribe(std::function<void()> wake);
  void Unsubscribe(int handle);

  // A request read by execute and being prepared, not yet submitted (a draining instance waits for it): each
  // Preparing ends in a Submit or an Abandon (it failed preparation and was answered).
  void Preparing();
  void Abandon();
  // Admits a prepared request or refuses it at once (answered and released through `instance`).
  void Submit(std::unique_ptr<Item> p, TRITONBACKEND_ModelInstance* instance) noexcept;
  // Takes the next batch, refusing what expired in the queue; `work_s`: the batch's predicted work, for Done.
  // `block`: waits for work until `stopping` is set and nothing is queued or being prepared (then returns an
  // empty batch), and, while `not_before_ns` (steady clock) lies ahead, until a full batch is queued: the caller
  // still has a batch on its device, and what arrives meanwhile joins the next one. A change of `not_before_ns`
  // is seen after WakeAll.
  std::vector<std::unique_ptr<Item>> Take(TRITONBACKEND_ModelInstance* instance, bool block,
                                             const std::atomic<bool>& stopping, double* work_s,
                                             const std::atomic<uint64_t>* not_before_ns = nullptr);
  // A taken batch that carried `work_s` of predicted work left the device.
  void Done(double work_s);
  // Wakes every blocked Take (an instance is stopping, or its device has become free).
  void WakeAll();
  bool Idle();

  CostModel& costs() { return *costs_; }  // set by the first AddLane

 private:
  void Refuse(Item& p, RequestError error, TRITONBACKEND_ModelInstance* instance);
  void Publish();  // the backlog gauge; with the lock held

  const ModelSettings& settings_;
  Metrics& metrics_;
  const std::vector<int64_t> length_buckets_;
  const int64_t batch_rows_, batch_tokens_;
  std::unique_ptr<CostModel> costs_;
  std::mutex mutex_;
  std::condition_variable ready_;
  WorkQueue queue_;
  std::map<uint64_t, std::unique_ptr<Item>> waiting_;  // Job::id -> the request
  uint64_t next_id_ = 0;
  int preparing_ = 0;
  int lanes_ = 0;
  std::map<int, std::function<void()>> wakers_;
  int next_waker_ = 0;
  int waking_ = 0;  // Submits calling copies of the wakers
  std::condition_variable woken_;
};

using EmbedScheduler = Scheduler<Pending>;
using SequenceScheduler = Scheduler<SequenceJob>;

}  // namespace bertserve
