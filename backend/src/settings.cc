#include "settings.h"

#include <openssl/evp.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "triton_util.h"

namespace bertserve {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kManifest = "manifest.json";
// Admission where config.pbtxt has no parameter (a repository exported before it existed): export's defaults, per
// device kind (export/config.py, DEFAULT_DEADLINE_US and DEFAULT_STANDING_QUEUE_US; export writes each model's own).
constexpr int64_t kGpuDeadlineUs = 10'000, kCpuDeadlineUs = 1'000'000;
constexpr int64_t kGpuStandingQueueUs = 0, kCpuStandingQueueUs = 40'000;
// How long every request must have waited past standing_queue_us before the queue counts as standing: CoDel's
// interval, longer than the transient queues of an ordinary load.
constexpr int64_t kStandingIntervalUs = 100'000;
constexpr int64_t kLongestDeadlineUs = 86'400'000'000;  // a day: deadlines stay far inside the nanosecond clock

BackendError Invalid(const std::string& message) { return BackendError(TRITONSERVER_ERROR_INVALID_ARG, message); }

json ParseFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw Invalid(path.string() + " is missing: the model was not exported");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw Invalid(path.string() + " is not valid JSON: " + e.what());
  }
}

template <typename T>
T Field(const json& object, const char* key, const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) throw Invalid(where + " has no \"" + key + "\"");
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    throw Invalid(where + ": \"" + key + "\" has the wrong type: " + e.what());
  }
}

// A string parameter of config.pbtxt, or `fallback` when absent.
std::string Parameter(const json& config, const char* key, const std::string& fallback) {
  auto params = config.find("parameters");
  if (params == config.end() || !params->contains(key)) return fallback;
  return Field<std::string>((*params)[key], "string_value", std::string("parameter ") + key);
}

// Whether the model's instances run on GPUs (Triton resolves KIND_AUTO before the backend sees the config).
bool OnGpu(const json& config) {
  auto groups = config.find("instance_group");
  if (groups == config.end() || !groups->is_array()) return false;
  return std::any_of(groups->begin(), groups->end(),
                     [](const json& g) { return g.is_object() && g.value("kind", std::string()) == "KIND_GPU"; });
}

// An integer parameter of config.pbtxt of at least `min`, or `fallback` when absent.
int64_t IntParameter(const json& config, const std::string& name, const char* key, int64_t fallback, int64_t min) {
  const std::string text = Parameter(config, key, "");
  if (text.empty()) return fallback;
  int64_t value = 0;
  try {
    size_t used = 0;
    value = std::stoll(text, &used);
    if (used != text.size()) throw std::invalid_argument(text);
  } catch (const std::exception&) {
    throw Invalid(name + ": parameter " + key + " must be an integer, got \"" + text + "\"");
  }
  if (value < min) throw Invalid(name + ": parameter " + key + " must be at least " + std::to_string(min));
  return value;
}

// A file the manifest names lies inside the model's directory: a path that is absolute or climbs out with `..` is
// refused, or a manifest could point the server at any file it can read.
void CheckInside(const std::string& name, const std::string& rel) {
  const fs::path path(rel);
  bool climbs = false;
  for (const fs::path& part : path) climbs = climbs || part == "..";
  if (rel.empty() || path.is_absolute() || path.has_root_name() || path.has_root_directory() || climbs) {
    throw Invalid(name + ": " + kManifest + " names \"" + rel +
                  "\"; a file must be a relative path inside the model's directory (no leading /, no ..)");
  }
}

void Verify(const std::string& name, const fs::path& dir, const json& manifest, const std::string& rel) {
  CheckInside(name, rel);
  const json& files = manifest.contains("files") ? manifest["files"] : json::object();
  if (!files.contains(rel)) throw Invalid(name + ": " + rel + " is not listed in " + kManifest);
  const fs::path path = dir / rel;
  if (!fs::is_regular_file(path)) throw Invalid(name + ": " + path.string() + " is missing");
  const json& entry = files[rel];
  const auto bytes = Field<uint64_t>(entry, "bytes", rel);
  if (fs::file_size(path) != bytes || Sha256(path) != Field<std::string>(entry, "sha256", rel)) {
    throw Invalid(name + ": " + path.string() + " does not match its sha256 in " + kManifest);
  }
}

// The CPU quota of the process's cgroup (v2 cpu.max, else v1 cfs), rounded up; 0 when there is none.
int CgroupCpus() {
  std::ifstream v2("/sys/fs/cgroup/cpu.max");
  std::string quota;
  double period = 0;
  if (v2 >> quota >> period) {
    return quota == "max" || period <= 0 ? 0 : static_cast<int>(std::ceil(std::stod(quota) / period));
  }
  std::ifstream q("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"), p("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  double quota_us = 0, period_us = 0;
  if (q >> quota_us && p >> period_us && quota_us > 0 && period_us > 0) {
    return static_cast<int>(std::ceil(quota_us / period_us));
  }
  return 0;
}

}  // namespace

int UsableCpus() {
  cpu_set_t set;
  int cpus = 1;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) cpus = std::max(1, CPU_COUNT(&set));
  if (int quota = CgroupCpus(); quota > 0) cpus = std::min(cpus, quota);
  return cpus;
}

std::string Sha256(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Invalid("cannot read " + path.string());
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw std::runtime_error("sha256 init failed");
  std::array<char, 1 << 20> chunk;
  while (in.read(chunk.data(), chunk.size()) || in.gcount() > 0) {
    EVP_DigestUpdate(ctx.get(), chunk.data(), static_cast<size_t>(in.gcount()));
  }
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest;
  unsigned int size = 0;
  EVP_DigestFinal_ex(ctx.get(), digest.data(), &size);
  std::ostringstream hex;
  for (unsigned int i = 0; i < size; ++i) hex << "0123456789abcdef"[digest[i] >> 4] << "0123456789abcdef"[digest[i] & 15];
  return hex.str();
}

ModelSettings ReadSettings(const std::string& name, const fs::path& dir, const std::string& config_json) {
  json config;
  try {
    config = json::parse(config_json);
  } catch (const json::exception& e) {
    throw Invalid(name + ": the model config is not valid JSON: " + e.what());
  }
  const json manifest = ParseFile(dir / kManifest);
  const std::string where = (dir / kManifest).string();
  ModelSettings s;
  s.name = name;
  s.dir = dir;
  s.max_batch = Field<int64_t>(config, "max_batch_size", name + " config");
  s.max_seq = Field<int64_t>(manifest, "max_seq", where);
  s.vocab_size = Field<int64_t>(manifest, "vocab_size", where);
  s.hidden = Field<int64_t>(manifest, "hidden", where);
  s.runtime = Field<std::string>(manifest, "runtime", where);
  s.precision = s.tokenize_only() ? "" : Field<std::string>(manifest, "precision", where);
  if (s.runtime != "aoti" && s.runtime != "torchscript" && !s.tokenize_only()) {
    throw Invalid(name + ": runtime \"" + s.runtime + "\" has no native loader (aoti or torchscript); export it " +
                  "with --encoder-backend python");
  }
  if (s.max_batch < 1 || s.max_seq < 1 || s.vocab_size < 1 || s.hidden < 1) {
    throw Invalid(name + ": max_batch_size, max_seq, vocab_size and hidden must be positive");
  }
  if (!s.tokenize_only()) {
    const json& artifacts = Field<json>(manifest, "artifacts", where);
    const auto rel = Field<std::string>(Field<json>(artifacts, s.runtime.c_str(), where), "file", where);
    Verify(name, dir, manifest, rel);
    s.artifact = dir / rel;
  }
  if (auto tokenizer = manifest.find("tokenizer"); tokenizer != manifest.end()) {
    const auto tokenizer_rel = Field<std::string>(manifest, "tokenizer", where);
    Verify(name, dir, manifest, tokenizer_rel);
    s.tokenizer = dir / tokenizer_rel;
  }
  if (s.tokenize_only() && !s.text()) throw Invalid(name + ": a tokenizer model (runtime \"none\") needs a tokenizer");
  s.threads = static_cast<int>(IntParameter(config, name, "threads", 0, 0));
  if (s.threads == 0) s.threads = UsableCpus();
  const bool gpu = OnGpu(config);
  s.deadline_us =
      static_cast<uint64_t>(IntParameter(config, name, "deadline_us", gpu ? kGpuDeadlineUs : kCpuDeadlineUs, 1));
  s.standing_queue_us = static_cast<uint64_t>(
      IntParameter(config, name, "standing_queue_us", gpu ? kGpuStandingQueueUs : kCpuStandingQueueUs, 0));
  s.standing_interval_us =
      static_cast<uint64_t>(IntParameter(config, name, "standing_interval_us", kStandingIntervalUs, 0));
  for (const auto& [key, value] : {std::pair{"deadline_us", s.deadline_us},
                                   std::pair{"standing_queue_us", s.standing_queue_us},
                                   std::pair{"standing_interval_us", s.standing_interval_us}}) {
    if (value > static_cast<uint64_t>(kLongestDeadlineUs)) {
      throw Invalid(name + ": parameter " + key + " must be at most " + std::to_string(kLongestDeadlineUs) +
                    " (a day), got " + std::to_string(value));
    }
  }
  s.max_batch_tokens = IntParameter(config, name, "max_batch_tokens", s.max_batch * s.max_seq, s.max_seq);
  const std::string order = Parameter(config, "queue_order", "deadline");
  if (order != "deadline" && order != "arrival") {
    throw Invalid(name + ": parameter queue_order must be \"deadline\" or \"arrival\", got \"" + order + "\"");
  }
  s.queue_by_arrival = order == "arrival";
  const std::string graphs = Parameter(config, "cuda_graphs", "true");
  if (graphs != "true" && graphs != "false") {
    throw Invalid(name + ": parameter cuda_graphs must be \"true\" or \"false\", got \"" + graphs + "\"");
  }
  s.cuda_graphs = graphs == "true";
  if (auto warmup = config.find("model_warmup"); warmup != config.end() && warmup->is_array()) {
    for (const json& sample : *warmup) {
      const int64_t batch = sample.value("batch_size", int64_t{1}), count = sample.value("count", int64_t{1});
      s.warmup_requests += std::max<int64_t>(batch, 1) * std::max<int64_t>(count, 1);
    }
  }
  return s;
}

}  // namespace bertserve
