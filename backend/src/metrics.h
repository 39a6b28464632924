// The bertserve_* metric families of an encoder model, through Triton's C metrics API (on :8002 beside Triton's
// own). Names, labels and buckets are those of serving/python_backend/metrics.py, so dashboards and alert rules read both alike.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "batching.h"
#include "triton_api.h"

namespace bertserve {

enum class Stage { kTokenize, kCollate, kInfer, kRespond };

class Metrics {
 public:
  // Never throws: where the server has metrics off, the model serves without them (logged once). `deadline_s`:
  // the model's default deadline, published once as a gauge beside the backlog, for the saturation alert;
  // `standing_s`: its standing-queue target (work_queue.h), published once too.
  Metrics(const std::string& model, double deadline_s, double standing_s);
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  void Request(double seconds);
  void StageTime(Stage stage, double seconds);
  void Batch(int64_t rows, double padding_ratio, int64_t real_tokens);
  // Counts a failure under its reason's label (every reason has its own series).
  void Failure(FailureReason reason);
  void Truncated(int64_t texts);
  // Seconds of predicted compute queued and in flight (per lane).
  void Backlog(double seconds);

 private:
  TRITONSERVER_MetricFamily* Family(TRITONSERVER_MetricKind kind, const char* name, const char* description);
  TRITONSERVER_Metric* Child(TRITONSERVER_MetricFamily* family, const std::map<std::string, std::string>& labels,
                             const std::vector<double>* buckets);

  bool enabled_ = true;
  std::vector<TRITONSERVER_MetricFamily*> families_;
  std::vector<TRITONSERVER_Metric*> children_;
  TRITONSERVER_Metric* request_ = nullptr;
  std::map<Stage, TRITONSERVER_Metric*> stages_;
  TRITONSERVER_Metric* batch_size_ = nullptr;
  TRITONSERVER_Metric* padding_ = nullptr;
  TRITONSERVER_Metric* tokens_ = nullptr;
  TRITONSERVER_Metric* truncated_ = nullptr;
  TRITONSERVER_Metric* backlog_ = nullptr;
  TRITONSERVER_Metric* deadline_ = nullptr;
  std::array<TRITONSERVER_Metric*, kFailureReasonCount> failures_{};
};

}  // namespace bertserve
