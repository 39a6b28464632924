#include "scheduler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "triton_util.h"

namespace bertserve {
namespace {

// Client timeouts beyond a day are taken as a day (and never overflow the nanosecond clock).
constexpr uint64_t kLongestTimeoutUs = 86'400'000'000ull;

std::string Ms(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f ms", seconds * 1e3);
  return text;
}

double Seconds(uint64_t from_ns, uint64_t to_ns) { return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) * 1e-9 : 0.0; }

// What a request asks of the device: embed's rows join batches with other requests' rows; a sequence task's
// request runs alone, in its own forwards.
RequestCost CostOf(const Pending& p, const CostModel& costs, const std::vector<int64_t>& length_buckets) {
  return BatchedCost(costs, p.lengths, length_buckets);
}

RequestCost CostOf(const SequenceJob& job, const CostModel& costs, const std::vector<int64_t>& length_buckets) {
  return AloneCost(costs, job.forwards(), length_buckets);
}

}  // namespace

template <class Item>
Scheduler<Item>::Scheduler(const ModelSettings& settings, Metrics& metrics, int64_t batch_rows, int64_t batch_tokens)
    : settings_(settings),
      metrics_(metrics),
      length_buckets_(LengthBuckets(settings.max_seq)),
      batch_rows_(batch_rows),
      batch_tokens_(batch_tokens),
      queue_(settings.queue_by_arrival) {
  queue_.set_standing(settings.standing_queue_us * 1000, settings.standing_interval_us * 1000);
}

template <class Item>
void Scheduler<Item>::AddLane(const CostModel& costs) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!costs_) costs_ = std::make_unique<CostModel>(costs);
  queue_.set_lanes(++lanes_);
}

template <class Item>
int Scheduler<Item>::Subscribe(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(mutex_);
  wakers_[next_waker_] = std::move(wake);
  return next_waker_++;
}

template <class Item>
void Scheduler<Item>::Unsubscribe(int handle) {
  std::unique_lock<std::mutex> lock(mutex_);
  wakers_.erase(handle);
  woken_.wait(lock, [this] { return waking_ == 0; });  // no copy of its waker is still being called
}

template <class Item>
void Scheduler<Item>::Preparing() {
  std::lock_guard<std::mutex> lock(mutex_);
  ++preparing_;
}

template <class Item>
void Scheduler<Item>::Abandon() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    --preparing_;
  }
  ready_.notify_all();
}

template <class Item>
void Scheduler<Item>::Refuse(Item& p, RequestError error, TRITONBACKEND_ModelInstance* instance) {
  p.Fail(std::move(error), instance, settings_, metrics_);
}

template <class Item>
void Scheduler<Item>::Submit(std::unique_ptr<Item> p, TRITONBACKEND_ModelInstance* instance) noexcept {
  const std::string& name = settings_.name;
  bool counted = false;  // its Preparing has ended
  try {
    Job job;
    uint64_t client_us = 0;  // the client's own timeout, where it sent one
    ErrorPtr(TRITONBACKEND_InferenceRequestTimeoutMicroseconds(p->request, &client_us));
    const RequestCost cost = CostOf(*p, *costs_, length_buckets_);
    job.work_s = cost.work_s, job.own_s = cost.own_s, job.tokens = cost.tokens;
    job.rows = p->rows();
    job.arrived_ns = p->arrived_ns;
    if (p->warmup) {
      job.deadline_ns = p->arrived_ns + kLongestTimeoutUs * 1000;
    } else if (client_us > 0) {
      job.hard = true;
      job.deadline_ns = p->arrived_ns + std::min(client_us, kLongestTimeoutUs) * 1000;
    } else {
      const double allowed_s = std::max(static_cast<double>(settings_.deadline_us) * 1e-6, 2 * job.own_s);
      job.deadline_ns = p->arrived_ns + static_cast<uint64_t>(allowed_s * 1e9);
    }
    const uint64_t now = NowNs();
    std::vector<std::function<void()>> wake;
    Admission a;
    bool wake_taker = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job.id = next_id_++;
      // A default deadline is judged from arrival: time spent before admission (a busy host thread) is not the
      // queue's, and refusing for it would shed nothing. A client's own deadline counts from now: it has gone then.
      const bool was_empty = queue_.empty();
      a = queue_.Offer(job, job.hard ? now : p->arrived_ns);
      // A blocked Take waits for any work, or, with a batch still on its device, for a full batch or its time.
      wake_taker = was_empty || preparing_ == 1 || queue_.full(batch_rows_, batch_tokens_);
      if (a.admitted) {
        waiting_[job.id] = std::move(p);
        for (const auto& [_, w] : wakers_) wake.push_back(w);
        if (!wake.empty()) ++waking_;
        Publish();
        --preparing_;  // a refused request ends its preparation once answered: its instance may be draining
        counted = true;
      }
    }
    if (a.admitted) {
      if (wake_taker) ready_.notify_all();
      if (!wake.empty()) {
        try {
          for (auto& w : wake) w();
        } catch (const std::exception& e) {  // e.g. no memory to post a task: the next admission wakes it
          BERTSERVE_LOG(ERROR, name + ": waking an instance failed: " + e.what());
        }
        std::lock_guard<std::mutex> lock(mutex_);
        if (--waking_ == 0) woken_.notify_all();
      }
      return;
    }
    const std::string why =
        a.standing_wait_s > 0.0
            ? "requests have waited over " + Ms(settings_.standing_queue_us * 1e-6) + " for " +
                  Ms(settings_.standing_interval_us * 1e-6) + " and more, and this one would wait about " +
                  Ms(a.standing_wait_s)
            : Ms(a.ahead_s) + " of work is queued ahead of this request, which would complete in " +
                  Ms(a.predicted_s) + ", past its deadline of " + Ms(Seconds(p->arrived_ns, job.deadline_ns));
    Refuse(*p, Unavailable(FailureReason::kQueueFull, name + " is overloaded: " + why + "; retry later"), instance);
    counted = true;
    Abandon();  // a draining instance may wait for the last preparation
  } catch (const std::exception& e) {
    BERTSERVE_LOG(ERROR, name + ": admission failed: " + e.what());
    if (p != nullptr && !p->released) Refuse(*p, Internal(e.what()), instance);
    if (!counted) Abandon();
  }
}

template <class Item>
std::vector<std::unique_ptr<Item>> Scheduler<Item>::Take(TRITONBACKEND_ModelInstance* instance, bool block,
                                                       const std::atomic<bool>& stopping, double* work_s,
                                                       const std::atomic<uint64_t>* not_before_ns) {
  std::vector<std::unique_ptr<Item>> batch, expired;
  std::vector<Job> expired_jobs;
  uint64_t now = 0;
  bool more = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    while (block && !(stopping && preparing_ == 0)) {
      if (queue_.empty()) {
        ready_.wait(lock);
        continue;
      }
      const uint64_t wait_until = not_before_ns != nullptr ? not_before_ns->load() : 0;
      now = NowNs();
      if (now >= wait_until || queue_.full(batch_rows_, batch_tokens_)) break;
      ready_.wait_for(lock, std::chrono::nanoseconds(wait_until - now));
    }
    now = NowNs();
    WorkQueue::Taken t = queue_.Take(now, batch_rows_, batch_tokens_);
    *work_s = t.work_s;
    for (const Job& job : t.batch) {
      batch.push_back(std::move(waiting_.at(job.id)));
      waiting_.erase(job.id);
    }
    for (const Job& job : t.expired) {
      expired.push_back(std::move(waiting_.at(job.id)));
      waiting_.erase(job.id);
    }
    expired_jobs = std::move(t.expired);
    more = !queue_.empty();
    Publish();
  }
  if (more) ready_.notify_one();  // another instance may take the rest
  for (size_t i = 0; i < expired.size(); ++i) {
    const Item& p = *expired[i];
    Refuse(*expired[i],
           Unavailable(FailureReason::kQueueTimeout, settings_.name + ": the request waited " + Ms(Seconds(p.arrived_ns, now)) +
                                            " in the queue, past its deadline of " +
                                            Ms(Seconds(p.arrived_ns, expired_jobs[i].deadline_ns))),
           instance);
  }
  return batch;
}

template <class Item>
void Scheduler<Item>::Done(double work_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.Done(work_s);
  Publish();
}

template <class Item>
void Scheduler<Item>::WakeAll() {
  { std::lock_guard<std::mutex> lock(mutex_); }
  ready_.notify_all();
}

template <class Item>
bool Scheduler<Item>::Idle() {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.empty() && preparing_ == 0;
}

template <class Item>
void Scheduler<Item>::Publish() { metrics_.Backlog(queue_.backlog_s()); }

template class Scheduler<Pending>;
template class Scheduler<SequenceJob>;

}  // namespace bertserve
