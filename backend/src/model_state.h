// What the instances of one encoder model share: its settings (config + verified manifest), its metrics, its
// scheduler (one queue for all its instances) and, on CUDA, the host threads that prepare and answer requests.
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "compute_pool.h"
#include "metrics.h"
#include "scheduler.h"
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
  EmbedScheduler& scheduler() { return *scheduler_; }
  // CUDA models: the threads that tokenize requests, and those that send responses, beside the device's work (made
  // on first use). Apart, so that a frontend's slow formatting of responses never delays an admission.
  ComputePool& PreparePool();
  ComputePool& AnswerPool();
  // Text models only (settings().text()).
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }

 private:
  explicit ModelState(ModelSettings settings);
  ModelSettings settings_;
  std::vector<int64_t> length_buckets_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<EmbedScheduler> scheduler_;
  std::mutex pools_mutex_;
  std::unique_ptr<ComputePool> prepare_pool_, answer_pool_;
};

}  // namespace bertserve
