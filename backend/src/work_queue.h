// A model's queue of admitted requests, by work and deadline rather than by count. Plain C++, no locking (the
// Scheduler holds the lock), no Triton types: a request is a Job, known to its owner by `id`.
//
// Admission: a request is admitted when its predicted completion meets its deadline: the work queued ahead of it
// (earliest deadline first, so only work due no later than it; by arrival, all of it) and the work in flight, shared among the lanes,
// plus its own forward. With nothing ahead of it a request is always admitted: no other order would serve it
// sooner. Batches are taken earliest deadline first, bounded by rows and by padded tokens, and filled only with
// jobs that keep the batch inside the earliest deadline it can still meet; a request whose own deadline (`hard`:
// the client's timeout) has passed is handed back as expired instead.
//
// Sustained overload (after CoDel, Nichols and Jacobson 2012): a deadline admits bursts, but under a load the
// device cannot drain the queue fills to the deadline and every accepted request waits that long. So the queue also
// watches the wait of the requests without a deadline of their own (not `hard`): when every one taken for a whole
// `interval` had waited at least `target`, and meanwhile more work was admitted than drained (by over a quarter, and
// by more than a batch per lane: the requests that closed-loop clients send as each answer arrives), the queue is
// standing. Closed-loop clients at capacity wait long, but each sends only once answered, so what they admit during
// the run stays within a batch of what drained, however many they are. While it stands, such a request is admitted
// only if its predicted wait is less than `target`: the work ahead times the ratio of the waits measured to those
// predicted, learnt from every request taken (under overload batches are smaller than the full ones the work
// assumes, and answering takes the cores between forwards). It stands no more once nothing is queued or in flight,
// or once every such request taken for an `interval` had waited less than `target` and none was refused for as
// long. A transient queue shorter than `interval` (a burst: it arrives before anything has waited) is admitted
// whole, and a client's own deadline is never shortened.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

namespace bertserve {

struct Job {
  uint64_t id = 0;           // the owner's handle
  uint64_t deadline_ns = 0;  // absolute, steady clock
  bool hard = false;         // the client's own deadline: past it, the request is refused, never served
  int64_t rows = 0;
  int64_t tokens = 0;   // padded to length buckets
  double work_s = 0.0;  // its share of the device at full batches
  double own_s = 0.0;   // its own forward alone: the least time it needs
  uint64_t arrived_ns = 0;  // steady clock: its wait is measured from here
  double ahead_s = 0.0;     // set by Offer: the work ahead of it when admitted, its predicted wait
};

struct Admission {
  bool admitted = false;
  double ahead_s = 0.0;      // predicted seconds before its batch can start
  double predicted_s = 0.0;  // predicted seconds to its completion
  double standing_wait_s = 0.0;  // refused because the queue stands: its predicted wait
};

class WorkQueue {
 public:
  // `by_arrival`: first come, first served instead of earliest deadline first (every queued job is ahead of a
  // new one); kept to measure the two orders against each other.
  explicit WorkQueue(bool by_arrival = false) : by_arrival_(by_arrival) {}

  // Admits (queues) the job or refuses it; `now_ns` on the deadline's clock.
  Admission Offer(const Job& job, uint64_t now_ns);

  struct Taken {
    std::vector<Job> batch;    // to run now: at most `max_rows` rows and `max_tokens` tokens, or one job
    std::vector<Job> expired;  // past their hard deadline
    double work_s = 0.0;       // of the batch: what its Done returns
  };
  Taken Take(uint64_t now_ns, int64_t max_rows, int64_t max_tokens);
  // A taken batch whose jobs carried `work_s` in total finished.
  void Done(double work_s);

  void set_lanes(int lanes) { lanes_ = lanes < 1 ? 1 : lanes; }
  // The standing-queue rule above; a `target_ns` of 0 turns it off.
  void set_standing(uint64_t target_ns, uint64_t interval_ns) { target_ns_ = target_ns, interval_ns_ = interval_ns; }
  bool standing() const { return standing_; }
  double wait_ratio() const { return wait_ratio_; }
  int lanes() const { return lanes_; }
  bool empty() const { return jobs_.empty(); }
  size_t size() const { return jobs_.size(); }
  // Whether what is queued already fills a batch of `max_rows` rows or `max_tokens` tokens.
  bool full(int64_t max_rows, int64_t max_tokens) const { return rows_ >= max_rows || tokens_ >= max_tokens; }
  // Seconds of predicted work queued and in flight (per lane).
  double backlog_s() const { return (queued_s_ + inflight_s_) / lanes_; }

 private:
  void Waited(const Job& job, uint64_t now_ns);  // a job without a deadline of its own was taken now

  std::map<std::pair<uint64_t, uint64_t>, Job> jobs_;  // (deadline, or arrival order; arrival order) -> job
  uint64_t target_ns_ = 0, interval_ns_ = 0;
  bool above_ = false;  // every soft job taken since `since_ns_` had waited at least the target (else: less)
  uint64_t since_ns_ = 0;
  uint64_t refused_ns_ = 0;  // when the standing rule last refused a request (its arrival)
  bool standing_ = false;
  double admitted_s_ = 0.0, drained_s_ = 0.0;  // work admitted, and finished, since `since_ns_`
  double batch_s_ = 0.0;                        // the most work one batch taken since `since_ns_` carried
  double wait_ratio_ = 1.0;  // measured waits over predicted ones
  bool by_arrival_ = false;
  uint64_t order_ = 0;
  double queued_s_ = 0.0, inflight_s_ = 0.0;
  int64_t rows_ = 0, tokens_ = 0;  // queued
  int lanes_ = 1;
};

}  // namespace bertserve
