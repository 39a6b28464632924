#include "metrics.h"

#include "triton_util.h"

namespace bertserve {
namespace {

const std::string kPrefix = "bertserve_";
// 50 µs .. 1 s with a boundary at exactly 10 ms (the latency SLO).
const std::vector<double> kLatencyBuckets = {0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075,
                                             0.01,    0.015,  0.02,   0.03,   0.05,  0.1,   0.2,   0.5,   1.0};
const std::vector<double> kBatchBuckets = {1, 2, 4, 8, 16, 32, 64, 128};
const std::vector<double> kRatioBuckets = {0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
const std::pair<Stage, const char*> kStages[] = {
    {Stage::kTokenize, "tokenize"}, {Stage::kCollate, "collate"}, {Stage::kInfer, "infer"}, {Stage::kRespond, "respond"}};

// Records a value, dropping (and logging) a failure: a metric must never fail a request.
void Record(TRITONSERVER_Error* (*update)(TRITONSERVER_Metric*, double), TRITONSERVER_Metric* m, double v) {
  if (m == nullptr) return;
  if (TRITONSERVER_Error* e = update(m, v)) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(WARN, std::string("metric update failed: ") + TRITONSERVER_ErrorMessage(e));
  }
}

}  // namespace

Metrics::Metrics(const std::string& model, double deadline_s, double standing_s) {
  try {
    auto* request = Family(TRITONSERVER_METRIC_KIND_HISTOGRAM, "request_duration_seconds",
                           "Per request, from the model's execute() entry to its response being sent "
                           "(excludes gRPC/HTTP handling, Triton queueing and ensemble hops)");
    auto* stage = Family(TRITONSERVER_METRIC_KIND_HISTOGRAM, "stage_duration_seconds",
                         "Time per executed batch in each stage (tokenize, collate, infer, respond)");
    auto* batch = Family(TRITONSERVER_METRIC_KIND_HISTOGRAM, "batch_size", "Sequences per executed batch");
    auto* padding =
        Family(TRITONSERVER_METRIC_KIND_HISTOGRAM, "padding_ratio", "Padded tokens / all tokens of an executed batch");
    auto* tokens = Family(TRITONSERVER_METRIC_KIND_COUNTER, "tokens_total", "Real tokens processed");
    auto* truncated = Family(TRITONSERVER_METRIC_KIND_COUNTER, "truncated_total", "Texts truncated to the max length");
    auto* failures =
        Family(TRITONSERVER_METRIC_KIND_COUNTER, "failures_total", "Rejected or failed requests by reason");
    auto* backlog = Family(TRITONSERVER_METRIC_KIND_GAUGE, "queue_backlog_seconds",
                           "Predicted compute seconds queued and in flight per serving lane: how long a request "
                           "arriving now would wait before its batch starts");
    auto* deadline = Family(TRITONSERVER_METRIC_KIND_GAUGE, "deadline_seconds",
                            "The model's default deadline: a request that sends no timeout is refused at once when "
                            "the queued work predicts it would finish later");
    auto* standing = Family(TRITONSERVER_METRIC_KIND_GAUGE, "standing_queue_seconds",
                            "The model's standing-queue target: once a sustained overload makes the queue stand, a "
                            "request that sends no timeout is admitted only while its predicted wait is shorter "
                            "(0: off)");
    const std::map<std::string, std::string> labels{{"model", model}};
    request_ = Child(request, labels, &kLatencyBuckets);
    for (const auto& [s, name] : kStages) stages_[s] = Child(stage, {{"model", model}, {"stage", name}}, &kLatencyBuckets);
    batch_size_ = Child(batch, labels, &kBatchBuckets);
    padding_ = Child(padding, labels, &kRatioBuckets);
    tokens_ = Child(tokens, labels, nullptr);
    truncated_ = Child(truncated, labels, nullptr);
    backlog_ = Child(backlog, labels, nullptr);
    deadline_ = Child(deadline, labels, nullptr);
    Record(TRITONSERVER_MetricSet, deadline_, deadline_s);
    Record(TRITONSERVER_MetricSet, Child(standing, labels, nullptr), standing_s);
    for (size_t r = 0; r < kFailureReasonCount; ++r) {
      const char* reason = FailureName(static_cast<FailureReason>(r));
      failures_[r] = Child(failures, {{"model", model}, {"reason", reason}}, nullptr);
    }
  } catch (const std::exception& e) {
    BERTSERVE_LOG(WARN, model + ": serving without bertserve_* metrics: " + e.what());
    enabled_ = false;
  }
}

Metrics::~Metrics() {
  for (auto* m : children_) ErrorPtr(TRITONSERVER_MetricDelete(m));
  for (auto* f : families_) ErrorPtr(TRITONSERVER_MetricFamilyDelete(f));
}

TRITONSERVER_MetricFamily* Metrics::Family(TRITONSERVER_MetricKind kind, const char* name, const char* description) {
  TRITONSERVER_MetricFamily* family = nullptr;
  Check(TRITONSERVER_MetricFamilyNew(&family, kind, (kPrefix + name).c_str(), description), name);
  families_.push_back(family);
  return family;
}

TRITONSERVER_Metric* Metrics::Child(
    TRITONSERVER_MetricFamily* family, const std::map<std::string, std::string>& labels,
    const std::vector<double>* buckets) {
  std::vector<std::unique_ptr<TRITONSERVER_Parameter, decltype(&TRITONSERVER_ParameterDelete)>> owned;
  std::vector<const TRITONSERVER_Parameter*> params;
  for (const auto& [key, value] : labels) {
    owned.emplace_back(TRITONSERVER_ParameterNew(key.c_str(), TRITONSERVER_PARAMETER_STRING, value.c_str()),
                       TRITONSERVER_ParameterDelete);
    params.push_back(owned.back().get());
  }
  TRITONSERVER_Metric* metric = nullptr;
  if (buckets == nullptr) {
    Check(TRITONSERVER_MetricNew(&metric, family, params.data(), params.size()), "metric");
  } else {
    TRITONSERVER_MetricArgs* args = nullptr;
    Check(TRITONSERVER_MetricArgsNew(&args), "metric args");
    std::unique_ptr<TRITONSERVER_MetricArgs, void (*)(TRITONSERVER_MetricArgs*)> args_owner(
        args, [](TRITONSERVER_MetricArgs* a) { ErrorPtr(TRITONSERVER_MetricArgsDelete(a)); });
    Check(TRITONSERVER_MetricArgsSetHistogram(args, buckets->data(), buckets->size()), "histogram buckets");
    Check(TRITONSERVER_MetricNewWithArgs(&metric, family, params.data(), params.size(), args), "histogram");
  }
  children_.push_back(metric);
  return metric;
}

void Metrics::Request(double seconds) {
  if (enabled_) Record(TRITONSERVER_MetricObserve, request_, seconds);
}

void Metrics::StageTime(Stage stage, double seconds) {
  if (enabled_) Record(TRITONSERVER_MetricObserve, stages_[stage], seconds);
}

void Metrics::Batch(int64_t rows, double padding_ratio, int64_t real_tokens) {
  if (!enabled_) return;
  Record(TRITONSERVER_MetricObserve, batch_size_, static_cast<double>(rows));
  Record(TRITONSERVER_MetricObserve, padding_, padding_ratio);
  Record(TRITONSERVER_MetricIncrement, tokens_, static_cast<double>(real_tokens));
}

void Metrics::Truncated(int64_t texts) {
  if (enabled_ && texts > 0) Record(TRITONSERVER_MetricIncrement, truncated_, static_cast<double>(texts));
}

void Metrics::Backlog(double seconds) {
  if (enabled_) Record(TRITONSERVER_MetricSet, backlog_, seconds);
}

void Metrics::Failure(FailureReason reason) {
  if (enabled_) Record(TRITONSERVER_MetricIncrement, failures_[static_cast<size_t>(reason)], 1.0);
}

}  // namespace bertserve
