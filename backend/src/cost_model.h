// What a forward pass costs on one instance, for admission and for the work gauge: measured when the instance
// loads (every CUDA graph bucket is timed; on the CPU two shapes, extended linearly in tokens), then corrected
// as batches complete. Plain C++, no Triton or torch types.
#pragma once

#include <atomic>
#include <cstdint>
#include <utility>
#include <vector>

#include "batching.h"

namespace bertserve {

class CostModel {
 public:
  // Seconds per forward for every (batch bucket, length bucket); a shape between buckets costs its next bucket's.
  CostModel(Costs measured, std::vector<int64_t> batch_buckets, std::vector<int64_t> length_buckets);
  // A CPU model: `fixed_s` per forward plus `token_s` per padded token, over the same bucket grid.
  static CostModel Linear(double fixed_s, double token_s, int64_t max_batch, std::vector<int64_t> length_buckets);
  // Fits Linear from two measured shapes (a small and a larger one).
  static CostModel Fit(int64_t b1, int64_t l1, double s1, int64_t b2, int64_t l2, double s2, int64_t max_batch,
                       std::vector<int64_t> length_buckets);

  CostModel(const CostModel& other);

  // One forward of [batch, seq], times the correction learnt from completed batches.
  double Forward(int64_t batch, int64_t seq) const;
  // One sequence's share of a full batch of its length bucket: what it takes of the device's time under load.
  double RowWork(int64_t length) const;
  // A completed batch that was predicted to take `predicted_s` (uncorrected) and took `actual_s` of service.
  void Observe(double predicted_s, double actual_s);
  double correction() const { return correction_.load(std::memory_order_relaxed); }
  const Costs& measured() const { return measured_; }
  // Forward without the correction, for Observe.
  double Measured(int64_t batch, int64_t seq) const;

 private:
  Costs measured_;
  std::vector<int64_t> batch_buckets_, length_buckets_;
  std::atomic<double> correction_{1.0};
  std::atomic<int64_t> observed_{0};
};

// What one request asks of the device, for admission (work_queue.h's Job): its share of the device under load,
// its own forward alone (the least time it needs), and its tokens padded to the length buckets.
struct RequestCost {
  double work_s = 0.0;
  double own_s = 0.0;
  int64_t tokens = 0;
};

// Rows that join batches with other requests' rows (embed): each row's share of a full batch of its length
// bucket; alone, one forward of all its rows at its longest.
RequestCost BatchedCost(const CostModel& costs, const std::vector<int64_t>& lengths,
                        const std::vector<int64_t>& length_buckets);
// A request served alone in forwards of its own (rerank, classify), each [rows, longest]: all of their time is
// its work, under load as alone.
RequestCost AloneCost(const CostModel& costs, const std::vector<std::pair<int64_t, int64_t>>& forwards,
                      const std::vector<int64_t>& length_buckets);

}  // namespace bertserve
