#include "model_state.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "batching.h"
#include "triton_util.h"

namespace bertserve {
namespace {

// The (verified) tokenizer.json; its max_seq must leave room for the special tokens.
std::unique_ptr<tokenizer::Tokenizer> LoadTokenizer(const ModelSettings& s) {
  std::ifstream in(s.tokenizer, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": cannot read " + s.tokenizer.string());
  try {
    auto t = tokenizer::Tokenizer::FromJson(text.str());
    if (static_cast<size_t>(s.max_seq) <= t->special_count()) {
      throw std::invalid_argument("max_seq leaves no room for text between the special tokens");
    }
    // Every id the tokenizer can give must index the model's embedding table: ids are never checked again.
    if (const auto [low, high] = t->id_range(); low < 0 || high >= s.vocab_size) {
      throw std::invalid_argument(s.tokenizer.filename().string() + " gives ids from " + std::to_string(low) + " to " +
                                  std::to_string(high) + "; the model's vocab_size is " +
                                  std::to_string(s.vocab_size));
    }
    BERTSERVE_LOG(INFO, s.name + ": native tokenizer from " + s.tokenizer.string());
    return t;
  } catch (const std::invalid_argument& e) {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": " + e.what());
  }
}

}  // namespace

ModelState::ModelState(ModelSettings settings)
    : settings_(std::move(settings)),
      length_buckets_(LengthBuckets(settings_.max_seq)),
      metrics_(std::make_unique<Metrics>(settings_.name, static_cast<double>(settings_.deadline_us) * 1e-6,
                                         static_cast<double>(settings_.standing_queue_us) * 1e-6)),
      scheduler_(std::make_unique<EmbedScheduler>(settings_, *metrics_, settings_.max_batch,
                                                   settings_.max_batch_tokens)) {}

// A quarter of the CPUs, 2 to 4, tokenize (a thread encodes 40-50k short texts a second); half of them, 2 to 8,
// answer.
ComputePool& ModelState::PreparePool() {
  std::lock_guard<std::mutex> lock(pools_mutex_);
  if (!prepare_pool_) prepare_pool_ = std::make_unique<ComputePool>(std::clamp(UsableCpus() / 4, 2, 4), 1, "bs-prepare");
  return *prepare_pool_;
}

ComputePool& ModelState::AnswerPool() {
  std::lock_guard<std::mutex> lock(pools_mutex_);
  if (!answer_pool_) answer_pool_ = std::make_unique<ComputePool>(std::clamp(UsableCpus() / 2, 2, 8), 1, "bs-answer");
  return *answer_pool_;
}

std::unique_ptr<ModelState> ModelState::Create(TRITONBACKEND_Model* model) {
  const ModelSource source = ReadModelSource(model);
  auto settings = ReadSettings(source.name, source.location, source.config_json);
  if (settings.tokenize_only()) {
    BERTSERVE_LOG(INFO, settings.name + ": a tokenizer model; " + settings.tokenizer.string() + " verified");
  } else {
    BERTSERVE_LOG(INFO, settings.name + ": " + settings.precision + " " + settings.runtime + " artifact " +
                            settings.artifact.string() + " verified; " + std::to_string(settings.threads) +
                            " intra-op threads per instance");
  }
  std::unique_ptr<ModelState> state(new ModelState(std::move(settings)));
  if (state->settings_.text()) state->tokenizer_ = LoadTokenizer(state->settings_);
  return state;
}

}  // namespace bertserve
