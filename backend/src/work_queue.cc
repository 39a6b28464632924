#include "work_queue.h"

#include <algorithm>
#include <cstdint>

namespace bertserve {
namespace {

// How far past the head Take looks for requests that still fit the batch.
constexpr size_t kFillWindow = 256;
// The waits that correct the predicted wait (Offer's work ahead): only those predicted long enough to measure, each
// weighing 1/16 (a batch or two of them), their ratio bounded against outliers.
constexpr double kLeastAheadS = 1e-3, kRatioWeight = 1.0 / 16, kLeastRatio = 0.25, kMostRatio = 8.0;
// An overload: more work admitted than drained by over this share of what drained (besides a batch per lane).
constexpr double kOverloadShare = 0.25;

}  // namespace

Admission WorkQueue::Offer(const Job& job, uint64_t now_ns) {
  double ahead = inflight_s_;
  for (const auto& [key, queued] : jobs_) {
    if (!by_arrival_ && key.first > job.deadline_ns) break;  // due later: this job goes first
    ahead += queued.work_s;
  }
  Admission a;
  a.ahead_s = ahead / lanes_;
  a.predicted_s = a.ahead_s + job.own_s;
  const double allowed_s = job.deadline_ns > now_ns ? static_cast<double>(job.deadline_ns - now_ns) * 1e-9 : 0.0;
  a.admitted = ahead <= 0.0 || a.predicted_s <= allowed_s;
  if (standing_ && jobs_.empty() && inflight_s_ < 1e-9) standing_ = false, above_ = false;  // it has caught up
  if (a.admitted && standing_ && !job.hard && ahead > 0.0) {
    const double wait_s = a.ahead_s * wait_ratio_;
    if (wait_s >= static_cast<double>(target_ns_) * 1e-9) {
      a.admitted = false, a.standing_wait_s = wait_s;
      refused_ns_ = std::max(refused_ns_, job.arrived_ns);
    }
  }
  if (a.admitted) {
    if (target_ns_ != 0) admitted_s_ += job.work_s;  // for Waited: is more admitted than drained?
    const uint64_t order = order_++;
    Job& queued = jobs_.emplace(std::make_pair(by_arrival_ ? order : job.deadline_ns, order), job).first->second;
    queued.ahead_s = a.ahead_s;
    queued_s_ += job.work_s;
    rows_ += job.rows, tokens_ += job.tokens;
  }
  return a;
}

WorkQueue::Taken WorkQueue::Take(uint64_t now_ns, int64_t max_rows, int64_t max_tokens) {
  Taken t;
  int64_t rows = 0, tokens = 0;
  size_t looked = 0;
  double own_s = 0.0;                   // the batch's forward, at least: its longest job's alone, or its work
  uint64_t due_ns = UINT64_MAX;         // its earliest deadline
  auto seconds_to = [now_ns](uint64_t t_ns) { return t_ns > now_ns ? static_cast<double>(t_ns - now_ns) * 1e-9 : 0.0; };
  for (auto it = jobs_.begin(); it != jobs_.end() && looked < kFillWindow;) {
    const Job& job = it->second;
    const bool late = job.hard && now_ns > job.deadline_ns;
    bool fits = t.batch.empty() || (rows + job.rows <= max_rows && tokens + job.tokens <= max_tokens);
    if (fits && !t.batch.empty()) {
      // Filling must not make the batch miss a deadline it would meet: bulk work with a long deadline does not
      // ride along with an interactive request when the batch would then finish past the request's deadline.
      const double with_s = std::max({own_s, job.own_s, t.work_s + job.work_s});
      const bool meets_now = own_s <= seconds_to(due_ns);
      fits = !meets_now || with_s <= seconds_to(std::min(due_ns, job.deadline_ns));
    }
    if (!late && !fits) {
      ++it, ++looked;
      if (rows >= max_rows) break;
      continue;
    }
    queued_s_ -= job.work_s;
    rows_ -= job.rows, tokens_ -= job.tokens;
    if (!job.hard) Waited(job, now_ns);
    if (late) {
      t.expired.push_back(job);
    } else {
      rows += job.rows, tokens += job.tokens;
      inflight_s_ += job.work_s;
      t.work_s += job.work_s;
      own_s = std::max({own_s, job.own_s, t.work_s});
      due_ns = std::min(due_ns, job.deadline_ns);
      t.batch.push_back(job);
    }
    it = jobs_.erase(it);
  }
  if (target_ns_ != 0) batch_s_ = std::max(batch_s_, t.work_s);
  if (jobs_.empty()) queued_s_ = 0.0;  // no drift from float sums
  if (jobs_.empty() && t.batch.empty() && inflight_s_ < 1e-9) inflight_s_ = 0.0;
  return t;
}

void WorkQueue::Waited(const Job& job, uint64_t now_ns) {
  if (target_ns_ == 0) return;
  if (job.ahead_s >= kLeastAheadS) {
    const double ratio = static_cast<double>(now_ns > job.arrived_ns ? now_ns - job.arrived_ns : 0) * 1e-9 / job.ahead_s;
    wait_ratio_ += kRatioWeight * (std::clamp(ratio, kLeastRatio, kMostRatio) - wait_ratio_);
  }
  const bool above = now_ns >= job.arrived_ns + target_ns_;
  if (above != above_) {  // a run on the other side starts
    above_ = above, since_ns_ = now_ns;
    admitted_s_ = drained_s_ = batch_s_ = 0.0;
  }
  const bool run_is_long = now_ns >= since_ns_ + interval_ns_;
  if (!standing_ && above_ && run_is_long) {
    standing_ = admitted_s_ - drained_s_ > kOverloadShare * drained_s_ + lanes_ * batch_s_;
  } else if (!above_ && run_is_long && now_ns >= refused_ns_ + interval_ns_) {
    standing_ = false;  // short waits, and none refused for as long: the overload has passed
  }
}

void WorkQueue::Done(double work_s) {
  inflight_s_ = std::max(0.0, inflight_s_ - work_s);
  if (target_ns_ != 0) drained_s_ += work_s;
}

}  // namespace bertserve
