// The sequence-classifier tasks in the backend: a BertForSequenceClassification served as `rerank` (one label:
// QUERY and DOCUMENTS in, SCORES out; export/rerank.py) or `classify` (several labels: TEXT and TEXT_PAIR in,
// LOGITS, PROBABILITIES and LABEL out; export/classify.py), picked by the config parameter `task`. One request at
// a time per instance (the configs have no dynamic batching: a request already holds its rows), its rows
// tokenized on the instance thread and scored in forwards of at most max_pairs_per_forward (rerank) or
// max_rows_per_forward (classify) rows. They do not go through the embed models' scheduler: no deadline
// admission yet.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "classify_request.h"
#include "metrics.h"
#include "rerank_request.h"
#include "sequence_rows.h"
#include "sequence_scorer.h"
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
  const RerankLimits& rerank_limits() const { return rerank_limits_; }
  const ClassifyLimits& classify_limits() const { return classify_limits_; }
  const std::vector<std::string>& labels() const { return labels_; }
  RowOptions row_options() const { return row_options_; }

 private:
  SequenceTask task_ = SequenceTask::kRerank;
  ModelSettings settings_;
  RerankLimits rerank_limits_;
  ClassifyLimits classify_limits_;
  std::vector<std::string> labels_;  // classify: in id order
  RowOptions row_options_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Metrics> metrics_;
};

class SequenceInstance {
 public:
  static std::unique_ptr<SequenceInstance> Create(SequenceModel* model, TRITONBACKEND_ModelInstance* instance);
  // Answers every request, each alone (a bad one fails by itself). Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  // Reads, tokenizes, scores (outputs() gets `width` floats per row) and answers one request. Never throws.
  template <class Request, class Limits>
  void Serve(Request& r, const Limits& limits, size_t width) noexcept;

  SequenceModel* model_ = nullptr;
  TRITONBACKEND_ModelInstance* instance_ = nullptr;
  std::unique_ptr<RowScorer> scorer_;
};

}  // namespace bertserve
