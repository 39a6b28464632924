// The rerank task in the backend: a cross-encoder model (config parameter task: "rerank", written by
// export/rerank.py) and its instances. QUERY and DOCUMENTS in, SCORES out; one request at a time per instance
// (the config has no dynamic batching: a request already holds its n pairs), its pairs tokenized on the instance
// thread and scored in forwards of at most max_pairs_per_forward rows. It does not go through the embed models'
// scheduler: no deadline admission yet.
#pragma once

#include <memory>

#include "metrics.h"
#include "rerank_pairs.h"
#include "rerank_request.h"
#include "rerank_scorer.h"
#include "settings.h"
#include "tokenizer/tokenizer.h"
#include "triton_api.h"

namespace bertserve {

class RerankModel {
 public:
  // Whether the model's config names the rerank task (else it is an embed model: model_state.h).
  static bool Handles(TRITONBACKEND_Model* model);
  // Reads the config and manifest, verifies the artifact and tokenizer, checks the tokenizer encodes pairs.
  static std::unique_ptr<RerankModel> Create(TRITONBACKEND_Model* model);

  const ModelSettings& settings() const { return settings_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  Metrics& metrics() { return *metrics_; }
  const RerankLimits& limits() const { return limits_; }
  PairOptions pair_options() const { return pair_options_; }

 private:
  ModelSettings settings_;
  RerankLimits limits_;
  PairOptions pair_options_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<Metrics> metrics_;
};

class RerankInstance {
 public:
  static std::unique_ptr<RerankInstance> Create(RerankModel* model, TRITONBACKEND_ModelInstance* instance);
  // Answers every request, each alone (a bad one fails by itself). Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  void Serve(RerankRequest& r) noexcept;

  RerankModel* model_ = nullptr;
  TRITONBACKEND_ModelInstance* instance_ = nullptr;
  std::unique_ptr<PairScorer> scorer_;
};

}  // namespace bertserve
