#include "request.h"

#include <algorithm>
#include <cstring>

#include "triton_util.h"

namespace bertserve {
namespace {

constexpr const char* kIds = "input_ids";
constexpr const char* kMask = "attention_mask";
constexpr const char* kOutput = "embedding";

RequestError BadShape(const std::string& message) { return {"bad_shape", message}; }

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
    return BadShape(std::string(name) + " must be INT64, got " + TRITONSERVER_DataTypeString(dtype));
  }
  shape->assign(dims, dims + dims_count);
  uint64_t elements = 1;
  for (int64_t d : *shape) elements *= static_cast<uint64_t>(std::max<int64_t>(d, 0));
  if (byte_size != elements * sizeof(int64_t)) {
    return BadShape(std::string(name) + " holds " + std::to_string(byte_size) + " bytes; its shape needs " +
                    std::to_string(elements * sizeof(int64_t)));
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
    if (copied + size > byte_size) return BadShape(std::string(name) + " has more bytes than its shape");
    std::memcpy(dst + copied, buffer, size);
    copied += size;
  }
  if (copied != byte_size) return BadShape(std::string(name) + " has fewer bytes than its shape");
  return std::nullopt;
}

TRITONSERVER_Error_Code CodeOf(const RequestError& e) {
  switch (e.kind) {
    case RequestError::Kind::kInternal:
      return TRITONSERVER_ERROR_INTERNAL;
    case RequestError::Kind::kRefused:
      return TRITONSERVER_ERROR_UNAVAILABLE;
    case RequestError::Kind::kBadInput:
      break;
  }
  return TRITONSERVER_ERROR_INVALID_ARG;
}

}  // namespace

RequestError Internal(const std::string& message) { return {"internal", message, RequestError::Kind::kInternal}; }
RequestError Unavailable(const std::string& reason, const std::string& message) {
  return {reason, message, RequestError::Kind::kRefused};
}

void Pending::Read(const ModelSettings& s) {
  try {
    std::vector<int64_t> ids_shape, mask_shape;
    error = ReadInput(request, kIds, &ids_shape, &ids);
    if (!error) error = ReadInput(request, kMask, &mask_shape, &mask);
    if (error) return;
    batch = TokenBatch{ids_shape, mask_shape, ids, mask};
    error = Validate(batch, s.vocab_size, s.max_seq, &lengths);
  } catch (const std::exception& e) {
    error = Internal(e.what());
  }
}

void Pending::Respond(const ModelSettings& s, Metrics& metrics) {
  responded = true;
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, request)) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(ERROR, std::string("cannot create a response: ") + TRITONSERVER_ErrorMessage(e));
    return;
  }
  if (!error) {
    const int64_t shape[2] = {batch.rows(), s.hidden};
    const uint64_t bytes = embedding.size() * sizeof(float);
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
      error = Internal(std::string("cannot write the output: ") + TRITONSERVER_ErrorMessage(e));
    } else {
      std::memcpy(buffer, embedding.data(), bytes);
    }
  }
  ErrorPtr status;
  if (error) {
    status.reset(TRITONSERVER_ErrorNew(CodeOf(*error), error->message.c_str()));
    metrics.Failure(error->reason);
  }
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, status.get())) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(ERROR, std::string("cannot send a response: ") + TRITONSERVER_ErrorMessage(e));
    ErrorPtr(TRITONBACKEND_ResponseDelete(response));
  }
}

void Pending::Finish(TRITONBACKEND_ModelInstance* instance, uint64_t exec_start_ns, uint64_t compute_start_ns,
                     uint64_t compute_end_ns, uint64_t exec_end_ns) {
  if (released) return;
  ErrorPtr(TRITONBACKEND_ModelInstanceReportStatistics(instance, request, !error, exec_start_ns, compute_start_ns,
                                                       compute_end_ns, exec_end_ns));
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
  released = true;
}

}  // namespace bertserve
