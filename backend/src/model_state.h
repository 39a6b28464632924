// What the instances of one encoder model share: its settings (config + verified manifest) and its metrics.
#pragma once

#include <memory>
#include <vector>

#include "metrics.h"
#include "settings.h"
#include "tokenizer/tokenizer.h"
#include "triton_api.h"

namespace bertserve {

class ModelState {
 public:
  // Reads the config and manifest and verifies the artifact; throws BackendError naming what is wrong.
  static std::unique_ptr<ModelState> Create(TRITONBACKEND_Model* model);

  const ModelSettings& settings() const { return settings_; }
  const std::vector<int64_t>& length_buckets() const { return length_buckets_; }
  Metrics& metrics() { return *metrics_; }
  // Text models only (settings().text()).
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  explicit ModelState(ModelSettings settings);
  ModelSettings settings_;
  std::vector<int64_t> length_buckets_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
};

}  // namespace bertserve
