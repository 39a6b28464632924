#include "instance_state.h"

#include <algorithm>
#include <cstring>

#include "triton_util.h"

namespace bertserve {
namespace {

constexpr const char* kIds = "input_ids";
constexpr const char* kMask = "attention_mask";
constexpr const char* kOutput = "embedding";

double Seconds(uint64_t from_ns, uint64_t to_ns) { return static_cast<double>(to_ns - from_ns) * 1e-9; }

RequestError Internal(const std::string& message) { return {"internal", message}; }

// One input of a request as [rows, seq] int64 in `data` (copied: Triton's buffers carry no alignment promise
// and may come in pieces).
std::optional<RequestError> ReadInput(
    TRITONBACKEND_Request* request, const char* name, std::vector<int64_t>* shape, std::vector<int64_t>* data) {
  TRITONBACKEND_Input* input = nullptr;
  Check(TRITONBACKEND_RequestInput(request, name, &input), name);
  TRITONSERVER_DataType dtype;
  const int64_t* dims = nullptr;
  uint32_t dims_count = 0, buffer_count = 0;
  uint64_t byte_size = 0;
  Check(TRITONBACKEND_InputProperties(input, nullptr, &dtype, &dims, &dims_count, &byte_size, &buffer_count), name);
  if (dtype != TRITONSERVER_TYPE_INT64) {
    return RequestError{"bad_shape", std::string(name) + " must be INT64, got " + TRITONSERVER_DataTypeString(dtype)};
  }
  shape->assign(dims, dims + dims_count);
  uint64_t elements = 1;
  for (int64_t d : *shape) elements *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  if (byte_size != elements * sizeof(int64_t)) {
    return RequestError{"bad_shape", std::string(name) + " holds " + std::to_string(byte_size) +
                                         " bytes; its shape needs " + std::to_string(elements * sizeof(int64_t))};
  }
  data->resize(elements);
  auto* dst = reinterpret_cast<char*>(data->data());
  uint64_t copied = 0;
  for (uint32_t b = 0; b < buffer_count; ++b) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    Check(TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory, &memory_id), name);
    if (memory == TRITONSERVER_MEMORY_GPU) return Internal(std::string(name) + " arrived in GPU memory");
    if (copied + size > byte_size) return RequestError{"bad_shape", std::string(name) + " has more bytes than its shape"};
    std::memcpy(dst + copied, buffer, size);
    copied += size;
  }
  if (copied != byte_size) return RequestError{"bad_shape", std::string(name) + " has fewer bytes than its shape"};
  return std::nullopt;
}

}  // namespace

struct InstanceState::Pending {
  TRITONBACKEND_Request* request = nullptr;
  std::vector<int64_t> ids, mask;
  TokenBatch batch;
  std::vector<int64_t> lengths;
  std::optional<RequestError> error;
  std::vector<float> embedding;  // [rows, hidden]
  bool responded = false;  // a final response went out (or could not be created)
  bool released = false;
};

InstanceState::InstanceState(ModelState* model, TRITONBACKEND_ModelInstance* instance, std::string device)
    : model_(model), instance_(instance), device_(std::move(device)) {}

std::unique_ptr<InstanceState> InstanceState::Create(ModelState* model, TRITONBACKEND_ModelInstance* instance) {
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id = 0;
  Check(TRITONBACKEND_ModelInstanceKind(instance, &kind), "instance kind");
  Check(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id), "instance device");
  const bool gpu = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU;
  std::unique_ptr<InstanceState> state(
      new InstanceState(model, instance, gpu ? "cuda:" + std::to_string(device_id) : "cpu"));
  const ModelSettings& s = model->settings();
  state->runtime_ = Runtime::Load(s, state->device_);
  if (gpu) {
    // Every (batch, length) bucket runs once before the model reports ready, and the measured cost per bucket
    // decides which length buckets share a pass.
    state->batch_buckets_ = BatchBuckets(s.max_batch);
    Costs costs;
    for (int64_t b : state->batch_buckets_)
      for (int64_t l : model->length_buckets()) costs[{b, l}] = state->runtime_->Warm(b, l, 5);
    state->costs_ = std::move(costs);
  }
  BERTSERVE_LOG(INFO, s.name + ": instance loaded on " + state->device_);
  return state;
}

void InstanceState::Read(Pending& p) {
  std::vector<int64_t> ids_shape, mask_shape;
  p.error = ReadInput(p.request, kIds, &ids_shape, &p.ids);
  if (!p.error) p.error = ReadInput(p.request, kMask, &mask_shape, &p.mask);
  if (p.error) return;
  p.batch = TokenBatch{ids_shape, mask_shape, p.ids, p.mask};
  const ModelSettings& s = model_->settings();
  p.error = Validate(p.batch, s.vocab_size, s.max_seq, &p.lengths);
}

void InstanceState::Infer(std::vector<Pending>& pending, const Collated& collated) {
  const int64_t hidden = model_->settings().hidden;
  std::vector<float> out;
  for (const Group& g : collated.groups) {
    out.resize(g.batch * hidden);
    try {
      runtime_->Run(g.ids.data(), g.mask.data(), g.batch, g.seq, out.data());
    } catch (const std::exception& e) {  // one failed forward fails only the requests in it
      BERTSERVE_LOG(ERROR, model_->settings().name + ": forward failed for a batch of shape [" +
                               std::to_string(g.batch) + ", " + std::to_string(g.seq) + "]: " + e.what());
      for (const auto& [req, row] : g.rows) pending[req].error = Internal(std::string("inference failed: ") + e.what());
      continue;
    }
    for (size_t k = 0; k < g.rows.size(); ++k) {
      Pending& p = pending[g.rows[k].first];
      if (p.error) continue;
      p.embedding.resize(p.batch.rows() * hidden);
      std::copy_n(out.data() + k * hidden, hidden, p.embedding.data() + g.rows[k].second * hidden);
    }
  }
}

void InstanceState::Respond(Pending& p) {
  p.responded = true;
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, p.request)) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(ERROR, std::string("cannot create a response: ") + TRITONSERVER_ErrorMessage(e));
    return;
  }
  if (!p.error) {
    const int64_t shape[2] = {p.batch.rows(), model_->settings().hidden};
    const uint64_t bytes = p.embedding.size() * sizeof(float);
    TRITONBACKEND_Output* output = nullptr;
    void* buffer = nullptr;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    TRITONSERVER_Error* e = TRITONBACKEND_ResponseOutput(response, &output, kOutput, TRITONSERVER_TYPE_FP32, shape, 2);
    if (e == nullptr) e = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &memory, &memory_id);
    if (e == nullptr && memory == TRITONSERVER_MEMORY_GPU) {
      e = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the output buffer is in GPU memory");
    }
    if (e != nullptr) {
      ErrorPtr owned(e);
      p.error = Internal(std::string("cannot write the output: ") + TRITONSERVER_ErrorMessage(e));
    } else {
      std::memcpy(buffer, p.embedding.data(), bytes);
    }
  }
  ErrorPtr error;
  if (p.error) {
    const auto code = p.error->reason == "internal" ? TRITONSERVER_ERROR_INTERNAL : TRITONSERVER_ERROR_INVALID_ARG;
    error.reset(TRITONSERVER_ErrorNew(code, p.error->message.c_str()));
    model_->metrics().Failure(p.error->reason);
  }
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error.get())) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(ERROR, std::string("cannot send a response: ") + TRITONSERVER_ErrorMessage(e));
    ErrorPtr(TRITONBACKEND_ResponseDelete(response));
  }
}

void InstanceState::Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept {
  std::vector<Pending> pending(count);
  for (uint32_t i = 0; i < count; ++i) pending[i].request = requests[i];
  try {
    Run(pending);
  } catch (const std::exception& e) {  // e.g. out of memory: answer what is left rather than take the server down
    BERTSERVE_LOG(ERROR, model_->settings().name + ": execute failed: " + e.what());
    for (Pending& p : pending) {
      if (p.released) continue;
      ErrorPtr error(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, e.what()));
      TRITONBACKEND_Response* response = nullptr;
      if (!p.responded && TRITONBACKEND_ResponseNew(&response, p.request) == nullptr) {
        ErrorPtr(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error.get()));
      }
      ErrorPtr(TRITONBACKEND_RequestRelease(p.request, TRITONSERVER_REQUEST_RELEASE_ALL));
    }
  }
}

void InstanceState::Run(std::vector<Pending>& pending) {
  const uint64_t exec_start = NowNs();
  const auto count = static_cast<uint32_t>(pending.size());
  std::vector<ValidRequest> valid;
  uint64_t batch_rows = 0;
  for (uint32_t i = 0; i < count; ++i) {
    Pending& p = pending[i];
    try {
      Read(p);
    } catch (const std::exception& e) {
      p.error = Internal(e.what());
    }
    batch_rows += static_cast<uint64_t>(std::max<int64_t>(p.batch.rows(), 0));
    if (!p.error) valid.push_back({i, &p.batch, p.lengths});
  }
  Collated collated;
  try {
    collated = Collate(valid, model_->length_buckets(), batch_buckets_, costs_ ? &*costs_ : nullptr);
  } catch (const std::exception& e) {
    for (const ValidRequest& v : valid) pending[v.index].error = Internal(std::string("collation failed: ") + e.what());
  }
  const uint64_t compute_start = NowNs();
  Infer(pending, collated);
  const uint64_t compute_end = NowNs();
  for (Pending& p : pending) Respond(p);
  const uint64_t exec_end = NowNs();

  for (Pending& p : pending) {
    ErrorPtr(TRITONBACKEND_ModelInstanceReportStatistics(instance_, p.request, !p.error, exec_start, compute_start,
                                                         compute_end, exec_end));
    ErrorPtr(TRITONBACKEND_RequestRelease(p.request, TRITONSERVER_REQUEST_RELEASE_ALL));
    p.released = true;
  }
  if (!collated.groups.empty()) {
    ErrorPtr(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance_, batch_rows, exec_start, compute_start,
                                                              compute_end, exec_end));
  }
  Metrics& m = model_->metrics();
  m.StageTime(Stage::kCollate, Seconds(exec_start, compute_start));
  m.StageTime(Stage::kRespond, Seconds(compute_end, exec_end));
  if (!collated.groups.empty()) {
    m.StageTime(Stage::kInfer, Seconds(compute_start, compute_end));
    int64_t rows = 0;
    for (const Group& g : collated.groups) rows += static_cast<int64_t>(g.rows.size());
    m.Batch(rows, collated.padding_ratio(), collated.real_tokens);
  }
  for (uint32_t i = 0; i < count; ++i) m.Request(Seconds(exec_start, exec_end));
}

}  // namespace bertserve
