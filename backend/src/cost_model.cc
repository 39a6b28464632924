#include "cost_model.h"

#include <algorithm>
#include <utility>

namespace bertserve {
namespace {

// How fast the correction follows the measured service times: a batch moves it 5 % of the way, after the first
// twenty, which average (a measurement at load, beside other models loading, can be far off).
constexpr double kLearningRate = 0.05;
constexpr double kMinCorrection = 1.0 / 64, kMaxCorrection = 64.0;

}  // namespace

CostModel::CostModel(Costs measured, std::vector<int64_t> batch_buckets, std::vector<int64_t> length_buckets)
    : measured_(std::move(measured)),
      batch_buckets_(std::move(batch_buckets)),
      length_buckets_(std::move(length_buckets)) {}

CostModel::CostModel(const CostModel& other)
    : measured_(other.measured_),
      batch_buckets_(other.batch_buckets_),
      length_buckets_(other.length_buckets_),
      correction_(other.correction()) {}

CostModel CostModel::Linear(double fixed_s, double token_s, int64_t max_batch, std::vector<int64_t> length_buckets) {
  Costs table;
  const std::vector<int64_t> batches = BatchBuckets(max_batch);
  for (int64_t b : batches)
    for (int64_t l : length_buckets) table[{b, l}] = fixed_s + token_s * static_cast<double>(b * l);
  return CostModel(std::move(table), batches, std::move(length_buckets));
}

CostModel CostModel::Fit(int64_t b1, int64_t l1, double s1, int64_t b2, int64_t l2, double s2, int64_t max_batch,
                         std::vector<int64_t> length_buckets) {
  const double t1 = static_cast<double>(b1 * l1), t2 = static_cast<double>(b2 * l2);
  double token_s = t2 > t1 ? (s2 - s1) / (t2 - t1) : 0.0;
  if (token_s <= 0.0) token_s = std::max(s1, s2) / std::max(t1, t2);  // noise: all of it per token
  const double fixed_s = std::max(0.0, s1 - token_s * t1);
  return Linear(fixed_s, token_s, max_batch, std::move(length_buckets));
}

double CostModel::Measured(int64_t batch, int64_t seq) const {
  if (measured_.empty()) return 0.0;
  const int64_t b = BucketFor(std::max<int64_t>(batch, 1), batch_buckets_);
  const int64_t l = BucketFor(std::max<int64_t>(seq, 1), length_buckets_);
  auto it = measured_.find({b, l});
  if (it != measured_.end()) return it->second;
  // Past the largest bucket: the largest, scaled by the padded tokens.
  const auto& [shape, seconds] = *measured_.rbegin();
  return seconds * static_cast<double>(b * l) / static_cast<double>(shape.first * shape.second);
}

double CostModel::Forward(int64_t batch, int64_t seq) const { return Measured(batch, seq) * correction(); }

double CostModel::RowWork(int64_t length) const {
  if (batch_buckets_.empty()) return 0.0;
  const int64_t full = batch_buckets_.back();
  return Forward(full, length) / static_cast<double>(full);
}

void CostModel::Observe(double predicted_s, double actual_s) {
  if (predicted_s <= 0.0 || actual_s <= 0.0) return;
  const double ratio = std::clamp(actual_s / predicted_s, kMinCorrection, kMaxCorrection);
  const int64_t n = observed_.fetch_add(1, std::memory_order_relaxed) + 1;
  const double rate = std::max(kLearningRate, 1.0 / static_cast<double>(n));
  double current = correction_.load(std::memory_order_relaxed);
  const double next = std::clamp(current + rate * (ratio - current), kMinCorrection, kMaxCorrection);
  correction_.compare_exchange_strong(current, next, std::memory_order_relaxed);  // a lost race loses one sample
}

RequestCost BatchedCost(const CostModel& costs, const std::vector<int64_t>& lengths,
                        const std::vector<int64_t>& length_buckets) {
  RequestCost cost;
  int64_t longest = 0;
  for (int64_t length : lengths) {
    cost.work_s += costs.RowWork(length);
    cost.tokens += BucketFor(length, length_buckets);
    longest = std::max(longest, length);
  }
  cost.own_s = costs.Forward(static_cast<int64_t>(lengths.size()), longest);
  return cost;
}

RequestCost AloneCost(const CostModel& costs, const std::vector<std::pair<int64_t, int64_t>>& forwards,
                      const std::vector<int64_t>& length_buckets) {
  RequestCost cost;
  for (const auto& [rows, seq] : forwards) {
    cost.own_s += costs.Forward(rows, seq);
    cost.tokens += rows * BucketFor(std::max<int64_t>(seq, 1), length_buckets);
  }
  cost.work_s = cost.own_s;
  return cost;
}

}  // namespace bertserve
