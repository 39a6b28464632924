#include "sequence_model.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "triton_util.h"

namespace bertserve {
namespace {

using nlohmann::json;

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

// The labels of a classify model: the parameter `labels`, a JSON list of names in id order, as many as the
// LOGITS output's width.
std::vector<std::string> Labels(const json& config, const std::string& model) {
  std::vector<std::string> labels;
  try {
    const json list = json::parse(Parameter(config, "labels"));
    for (const json& name : list) labels.push_back(name.get<std::string>());
  } catch (const json::exception& e) {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG,
                       model + ": parameter labels must be a JSON list of label names: " + e.what());
  }
  int64_t width = -1;
  for (const json& output : config.value("output", json::array())) {
    if (output.value("name", "") == "LOGITS" && output.value("dims", json::array()).size() == 1) {
      width = std::stoll(output["dims"][0].is_string() ? output["dims"][0].get<std::string>()
                                                      : std::to_string(output["dims"][0].get<int64_t>()));
    }
  }
  if (labels.size() < 2 || width != static_cast<int64_t>(labels.size())) {
    throw BackendError(TRITONSERVER_ERROR_INVALID_ARG,
                       model + ": the classify task needs two labels or more, as many as LOGITS' dims; the config has " +
                           std::to_string(labels.size()) + " label(s) and LOGITS dims [" + std::to_string(width) + "]");
  }
  return labels;
}

}  // namespace

std::optional<SequenceTask> SequenceModel::TaskOf(TRITONBACKEND_Model* model) {
  try {
    const std::string task = Parameter(json::parse(ModelConfigJson(model)), "task");
    if (task == "rerank") return SequenceTask::kRerank;
    if (task == "classify") return SequenceTask::kClassify;
  } catch (const json::exception&) {
    // the embed path reports the config's error
  }
  return std::nullopt;
}

std::unique_ptr<SequenceModel> SequenceModel::Create(TRITONBACKEND_Model* model, SequenceTask task) {
  const ModelSource source = ReadModelSource(model);
  const std::string& config_text = source.config_json;
  auto m = std::make_unique<SequenceModel>();
  m->task_ = task;
  m->settings_ = ReadSettings(source.name, source.location, config_text);  // verifies the artifact and tokenizer
  const ModelSettings& s = m->settings_;
  if (!s.text()) throw BackendError(TRITONSERVER_ERROR_INVALID_ARG, s.name + ": the manifest names no tokenizer");
  const json config = json::parse(config_text);
  m->row_options_.max_seq = s.max_seq;
  if (task == SequenceTask::kRerank) {
    m->rerank_limits_.max_documents = PositiveParameter(config, s.name, "max_documents");
    m->row_options_.max_rows = PositiveParameter(config, s.name, "max_pairs_per_forward");
  } else {
    m->labels_ = Labels(config, s.name);
    m->classify_limits_.max_rows = std::max<int64_t>(1, s.max_batch);
    m->row_options_.max_rows = PositiveParameter(config, s.name, "max_rows_per_forward");
  }

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
  m->metrics_ = std::make_unique<Metrics>(s.name, static_cast<double>(s.deadline_us) * 1e-6,
                                          static_cast<double>(s.standing_queue_us) * 1e-6);
  // Each request is served alone (a batch of one request, whatever its rows): its rows are already a batch.
  m->scheduler_ = std::make_unique<SequenceScheduler>(m->settings_, *m->metrics_, 1, 1);
  BERTSERVE_LOG(INFO, s.name + (task == SequenceTask::kRerank ? ": rerank task, " : ": classify task, ") + s.runtime + " artifact " + s.artifact.string() +
                          " verified; pairs tokenized natively; " + std::to_string(s.threads) +
                          " intra-op threads per forward");
  return m;
}

std::unique_ptr<TaskRequest> SequenceModel::Read(TRITONBACKEND_Request* request, uint64_t arrived_ns) const {
  std::unique_ptr<TaskRequest> r;
  if (task_ == SequenceTask::kRerank) {
    auto rerank = std::make_unique<RerankRequest>();
    rerank->request = request;
    rerank->Read(rerank_limits_);
    r = std::move(rerank);
  } else {
    auto classify = std::make_unique<ClassifyRequest>(labels_);
    classify->request = request;
    classify->Read(classify_limits_);
    r = std::move(classify);
  }
  r->arrived_ns = arrived_ns;
  return r;
}

}  // namespace bertserve
