// What a model needs from its config.pbtxt (as Triton's JSON) and manifest.json, read and checked once at load.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace bertserve {

struct ModelSettings {
  std::string name;
  std::filesystem::path dir;  // the model's directory in the repository
  int64_t max_batch = 0;
  int64_t max_seq = 0;
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  std::string precision;
  std::string runtime;  // "aoti" or "torchscript"; "none" for a tokenizer model (no encoder, no artifact)
  std::filesystem::path artifact;
  bool tokenize_only() const { return runtime == "none"; }
  // Text in (`embed`): the tokenizer.json the backend tokenizes with; empty for a model of token ids.
  std::filesystem::path tokenizer;
  bool text() const { return !tokenizer.empty(); }
  int threads = 1;  // intra-op threads of each instance
  // Scheduling (scheduler.h): the deadline of a request that brings no timeout of its own, and the padded tokens
  // one batch may hold.
  uint64_t deadline_us = 0;
  int64_t max_batch_tokens = 0;
  bool queue_by_arrival = false;  // `queue_order`: "deadline" (earliest first, the default) or "arrival"
  // Sustained overload (work_queue.h): a queue whose requests without a timeout of their own have all waited at
  // least `standing_queue_us` for `standing_interval_us` admits such requests only while their predicted wait is
  // shorter. 0 (the default): no such rule, the deadline alone (it also refuses closed-loop clients, whose waits
  // stand without an overload: docs/PERFORMANCE.md). Where config.pbtxt lacks `deadline_us` (a repository exported
  // before it), export's default for the instances' kind: 10 ms on a GPU, 1 s on the CPU.
  uint64_t standing_queue_us = 0;
  uint64_t standing_interval_us = 0;
  // `cuda_graphs` ("true", the default, or "false"): the sequence tasks' scorer replays a CUDA graph per bucket on
  // CUDA (sequence_scorer_cuda.cc) instead of running its package eagerly (rerank 1 x 32 on an H100: p99 3.18
  // against 4.06 ms, docs/PERFORMANCE.md). The embed runtime always replays graphs.
  bool cuda_graphs = true;
  // The requests Triton sends each instance to warm it up (model_warmup: batch_size x count per sample).
  int64_t warmup_requests = 0;
};

// Reads the settings and verifies the artifact against the sha256 in the manifest before anything loads it
// (a pickled format executes code on load). Throws BackendError naming the file or field that is wrong.
ModelSettings ReadSettings(const std::string& name, const std::filesystem::path& dir, const std::string& config_json);

// The CPUs this process may use: its affinity mask, bounded by a cgroup CPU quota (a 4-CPU pod on a 64-core node
// gets 4).
int UsableCpus();

// Lowercase hex sha256 of a file's bytes.
std::string Sha256(const std::filesystem::path& path);

}  // namespace bertserve
