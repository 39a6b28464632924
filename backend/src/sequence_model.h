// The sequence-classifier tasks in the backend: a BertForSequenceClassification served as `rerank` (one label:
// QUERY and DOCUMENTS in, SCORES out; export/rerank.py) or `classify` (several labels: TEXT and TEXT_PAIR in,
// LOGITS, PROBABILITIES and LABEL out; export/classify.py), picked by the config parameter `task`. What the
// model's instances share: its settings, labels and limits, the pair tokenizer, its metrics and its scheduler
// (scheduler.h, the embed models' admission by work and deadline; each request is served alone, in forwards of
// its own). The instances: sequence_instance.h.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "classify_request.h"
#include "metrics.h"
#include "rerank_request.h"
#include "scheduler.h"
#include "sequence_rows.h"
#include "settings.h"
#include "tokenizer/tokenizer.h"
#include "triton_api.h"

namespace bertserve {

enum class SequenceTask { kRerank, kClassify };

class SequenceModel {
 public:
  // The sequence task the model's config names, or nullopt (an embed model: model_state.h).
  static std::optional<SequenceTask> TaskOf(TRITONBACKEND_Model* model);
  // Reads the config and manifest, verifies the artifact and tokenizer, checks the tokenizer encodes pairs and,
  // for classify, the labels against the outputs' width.
  static std::unique_ptr<SequenceModel> Create(TRITONBACKEND_Model* model, SequenceTask task);

  SequenceTask task() const { return task_; }
  const ModelSettings& settings() const { return settings_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  Metrics& metrics() { return *metrics_; }
  SequenceScheduler& scheduler() { return *scheduler_; }
  const RerankLimits& rerank_limits() const { return rerank_limits_; }
  const ClassifyLimits& classify_limits() const { return classify_limits_; }
  const std::vector<std::string>& labels() const { return labels_; }
  RowOptions row_options() const { return row_options_; }
  // Outputs per row: one score (rerank), a logit per label (classify).
  size_t width() const { return task_ == SequenceTask::kRerank ? 1 : labels_.size(); }
  // A new request of the model's task holding `request`, its inputs read and checked (a bad one carries its
  // error). Throws only when no request object can be made: `request` is then not held.
  std::unique_ptr<TaskRequest> Read(TRITONBACKEND_Request* request, uint64_t arrived_ns) const;

 private:
  SequenceTask task_ = SequenceTask::kRerank;
  ModelSettings settings_;
  RerankLimits rerank_limits_;
  ClassifyLimits classify_limits_;
  std::vector<std::string> labels_;  // classify: in id order
  RowOptions row_options_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<SequenceScheduler> scheduler_;
};

}  // namespace bertserve
