#include "rerank_model.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "triton_util.h"

namespace bertserve {
namespace {

using nlohmann::json;

constexpr const char* kTask = "rerank";

std::string ConfigJson(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* message = nullptr;
  Check(TRITONBACKEND_ModelConfig(model, 1, &message), "model config");
  std::unique_ptr<TRITONSERVER_Message, void (*)(TRITONSERVER_Message*)> owned(
      message, [](TRITONSERVER_Message* m) { ErrorPtr(TRITONSERVER_MessageDelete(m)); });
  const char* text = nullptr;
  size_t size = 0;
  Check(TRITONSERVER_MessageSerializeToJson(message, &text, &size), "model config JSON");
  return std::string(text, size);
}

// A string parameter of the config, or "" when absent.
std::string Parameter(const json& config, const char* key) {
  const json params = config.value("parameters", json::object());
  if (!params.is_object() || !params.contains(key) || !params[key].is_object()) return "";
  const json& value = params[key];
  return value.contains("string_value") && value["string_value"].is_string() ? value["string_value"].get<std::string>()
                                                                              : "";
}

int64_t PositiveParameter(const json& config, const std::string& model, const char* key) {
  const std::string text = Parameter(config, key);
  try {
    size_t used = 0;
    const int64_t value = std::stoll(text, &used);
    if (used == text.size() && value > 0) return value;
  } catch (const std::exception&) {
  }
  throw BackendError(TRITONSERVER_ERROR_INVALID_ARG,
                     model + ": parameter " + key + " must be a positive integer, got \"" + text + "\"");
}

}  // namespace

bool RerankModel::Handles(TRITONBACKEND_Model* model) {
  try {
    return Parameter(json::parse(ConfigJson(model)), "task") == kTask;
  } catch (const json::exception&) {
    return false;  // the embed path reports the config's error
  }
}

std::unique_ptr<RerankModel> RerankModel::Create(TRITONBACKEND_Model* model) {
  const char* name = nullptr;
  Check(TRITONBACKEND_ModelName(model, &name), "model name");
  TRITONBACKEND_ArtifactType artifact_type;
  const char* location = nullptr;
  Check(TRITONBACKEND_ModelRepository(model, &artifact_type, &location), "model repository");
  if (artifact_type != TRITONBACKEND_ARTIFACT_FILESYSTEM) {
    throw BackendError(TRITONSERVER_ERROR_UNSUPPORTED, std::string(name) + ": the model must be on a filesystem");
  }
  const std::string config_text = ConfigJson(model);
  auto m = std::make_unique<RerankModel>();
  m->settings_ = ReadSettings(name, location, config_text);  // verifies the artifact and tokenizer by sha256
  const ModelSettings& s = m->settings_;
  if (!s.text()) throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": the manifest names no tokenizer");
  const json config = json::parse(config_text);
  m->limits_.max_documents = PositiveParameter(config, s.name, "max_documents");
  m->pair_options_.max_seq = s.max_seq;
  m->pair_options_.max_rows = PositiveParameter(config, s.name, "max_pairs_per_forward");

  std::ifstream in(s.tokenizer, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  if (!in) throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": cannot read " + s.tokenizer.string());
  try {
    m->tokenizer_ = tokenizer::Tokenizer::FromJson(text.str());
  } catch (const std::invalid_argument& e) {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": " + e.what());
  }
  if (!m->tokenizer_->pair_unsupported().empty()) {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": " + m->tokenizer_->pair_unsupported());
  }
  if (static_cast<size_t>(s.max_seq) <= m->tokenizer_->pair_special_count()) {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": max_seq leaves no room between the special tokens");
  }
  m->metrics_ = std::make_unique<Metrics>(s.name);
  BERTSERVE_LOG(INFO, s.name + ": rerank task, " + s.runtime + " artifact " + s.artifact.string() +
                          " verified; pairs tokenized natively; " + std::to_string(s.threads) +
                          " intra-op threads per forward");
  return m;
}

std::unique_ptr<RerankInstance> RerankInstance::Create(RerankModel* model, TRITONBACKEND_ModelInstance* instance) {
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id = 0;
  Check(TRITONBACKEND_ModelInstanceKind(instance, &kind), "instance kind");
  Check(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id), "instance device");
  const bool gpu = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU;
  auto state = std::make_unique<RerankInstance>();
  state->model_ = model;
  state->instance_ = instance;
  state->scorer_ = PairScorer::Load(model->settings(), gpu ? "cuda:" + std::to_string(device_id) : "cpu");
  return state;
}

void RerankInstance::Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept {
  for (uint32_t i = 0; i < count; ++i) {
    RerankRequest r;
    r.request = requests[i];
    r.arrived_ns = NowNs();
    Serve(r);
  }
}

void RerankInstance::Serve(RerankRequest& r) noexcept {
  Metrics& metrics = model_->metrics();
  uint64_t compute_start = 0, compute_end = 0;
  r.Read(model_->limits());
  try {
    if (!r.error) {
      PairOptions options = model_->pair_options();
      options.truncation = r.truncation;
      options.truncate = r.truncate;
      std::vector<PairChunk> chunks;
      const uint64_t tokenize_start = NowNs();
      r.error = EncodePairs(model_->tokenizer(), r.query, r.documents, options, &chunks);
      compute_start = NowNs();
      metrics.StageTime(Stage::kTokenize, static_cast<double>(compute_start - tokenize_start) * 1e-9);
      if (!r.error) {
        r.scores.resize(r.documents.size());
        for (const PairChunk& c : chunks) {
          scorer_->Score(c, r.scores.data() + c.first);
          const auto real = static_cast<int64_t>(std::count(c.mask.begin(), c.mask.end(), int64_t{1}));
          metrics.Batch(c.rows, 1.0 - static_cast<double>(real) / static_cast<double>(c.rows * c.seq), real);
        }
        compute_end = NowNs();
        metrics.StageTime(Stage::kInfer, static_cast<double>(compute_end - compute_start) * 1e-9);
      }
    }
  } catch (const std::exception& e) {
    r.error = RequestError{"internal", std::string("rerank forward failed: ") + e.what(), RequestError::Kind::kInternal};
  }
  if (compute_start == 0) compute_start = NowNs();
  if (compute_end == 0) compute_end = compute_start;
  r.Finish(instance_, metrics, compute_start, compute_end);
}

}  // namespace bertserve
