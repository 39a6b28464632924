#include "task_request.h"

#include <cstring>
#include <string_view>

#include "parameters.h"
#include "response.h"
#include "text_input.h"
#include "triton_util.h"

namespace bertserve {
namespace {

RequestError BadShape(const std::string& message) { return {FailureReason::kBadShape, message}; }

}  // namespace

bool HasInput(TRITONBACKEND_Request* request, const char* name) {
  TRITONBACKEND_Input* input = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_RequestInput(request, name, &input)) {
    ErrorPtr owned(e);
    return false;
  }
  return true;
}

std::optional<RequestError> ReadStrings(TRITONBACKEND_Request* request, const char* name, uint64_t max_count,
                                        std::vector<std::string>* out) {
  TRITONBACKEND_Input* input = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_RequestInput(request, name, &input)) {
    ErrorPtr owned(e);
    return BadShape(std::string(name) + " is missing");
  }
  TRITONSERVER_DataType dtype = TRITONSERVER_TYPE_INVALID;
  const int64_t* dims = nullptr;
  uint32_t dims_count = 0, buffers = 0;
  uint64_t byte_size = 0;
  Check(TRITONBACKEND_InputProperties(input, nullptr, &dtype, &dims, &dims_count, &byte_size, &buffers), name);
  if (dtype != TRITONSERVER_TYPE_BYTES) {
    return BadShape(std::string(name) + " must be BYTES, got " + TRITONSERVER_DataTypeString(dtype));
  }
  uint64_t count = 1;
  for (uint32_t i = 0; i < dims_count; ++i) {
    if (dims[i] < 0 || __builtin_mul_overflow(count, static_cast<uint64_t>(dims[i]), &count)) {
      return BadShape(std::string(name) + " has a shape whose size overflows");
    }
  }
  if (count == 0) return BadShape(std::string(name) + " holds no element");
  if (count > max_count) {
    return BadShape(std::string(name) + " holds " + std::to_string(count) + " elements; the limit is " + std::to_string(max_count));
  }
  // The elements can be no larger than the limit each, with their length prefixes: refuse a bigger input unread.
  if (byte_size > count * (kMaxTextBytes + 4)) {
    return RequestError{FailureReason::kTextTooLarge, std::string(name) + " is " + std::to_string(byte_size) +
                                              " bytes: more than " + std::to_string(count) +
                                              " element(s) of at most " + std::to_string(kMaxTextBytes) +
                                              " bytes each"};
  }
  std::string data(byte_size, '\0');
  uint64_t copied = 0;
  for (uint32_t b = 0; b < buffers; ++b) {
    const void* buffer = nullptr;
    uint64_t size = 0;
    TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
    int64_t memory_id = 0;
    Check(TRITONBACKEND_InputBuffer(input, b, &buffer, &size, &memory, &memory_id), name);
    if (memory == TRITONSERVER_MEMORY_GPU) return RequestError{FailureReason::kInternal, std::string(name) + " is in GPU memory"};
    if (copied + size > byte_size) return BadShape(std::string(name) + " has more bytes than declared");
    if (size > 0) std::memcpy(data.data() + copied, buffer, size);
    copied += size;
  }
  if (copied != byte_size) return BadShape(std::string(name) + " has fewer bytes than declared");
  size_t at = 0;
  out->clear();
  for (uint64_t i = 0; i < count; ++i) {
    if (data.size() - at < 4) return BadShape(std::string(name) + " has fewer elements than its shape");
    uint32_t size = 0;
    for (int k = 3; k >= 0; --k) size = (size << 8) | static_cast<unsigned char>(data[at + static_cast<size_t>(k)]);
    at += 4;
    if (data.size() - at < size) return BadShape(std::string(name) + " element " + std::to_string(i) + " is cut short");
    const std::string_view element(data.data() + at, size);
    if (auto error = CheckText(element)) {
      // as the embed path names a TEXT element: "DOCUMENTS element 3: TEXT is empty"
      error->message = std::string(name) + (count > 1 ? " element " + std::to_string(i) : "") + ": " + error->message;
      return error;
    }
    out->emplace_back(element);
    at += size;
  }
  if (at != data.size()) return BadShape(std::string(name) + " has more bytes than its elements");
  return std::nullopt;
}

std::optional<RequestError> ReadPairParameters(TaskRequest* r) {
  TRITONSERVER_ParameterType type;
  const void* value = nullptr;
  if (FindParameter(r->request, "truncation", &type, &value)) {
    const std::string_view v = type == TRITONSERVER_PARAMETER_STRING ? static_cast<const char*>(value) : "";
    if (v == "longest_first") {
      r->truncation = tokenizer::PairTruncation::kLongestFirst;
    } else if (v == "only_second") {
      r->truncation = tokenizer::PairTruncation::kOnlySecond;
    } else {
      return RequestError{FailureReason::kBadParameter,
                          "truncation must be longest_first or only_second, got \"" + std::string(v.substr(0, 64)) + "\""};
    }
  }
  return ReadTruncate(r->request, &r->truncate);
}

void SendResponse(TaskRequest& r, TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                  uint64_t compute_end_ns,
                  const std::function<TRITONSERVER_Error*(TRITONBACKEND_Response*)>& write) noexcept {
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, r.request)) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(ERROR, std::string("cannot create a response: ") + TRITONSERVER_ErrorMessage(e));
  } else {
    if (!r.error) {
      TRITONSERVER_Error* e = nullptr;
      try {
        e = write(response);
      } catch (const std::exception& ex) {
        e = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, ex.what());
      }
      if (e != nullptr) {
        ErrorPtr owned(e);
        r.error = OutputError(e);
      }
    }
    ErrorPtr status;
    if (r.error) {
      status.reset(TRITONSERVER_ErrorNew(CodeOf(*r.error), r.error->message.c_str()));
      metrics.Failure(r.error->reason);
    }
    if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, status.get())) {
      ErrorPtr owned(e);
      BERTSERVE_LOG(ERROR, std::string("cannot send a response: ") + TRITONSERVER_ErrorMessage(e));
    }
  }
  const uint64_t end = NowNs();
  if (!r.warmup) {
    ErrorPtr(TRITONBACKEND_ModelInstanceReportStatistics(instance, r.request, !r.error, r.arrived_ns, compute_start_ns,
                                                         compute_end_ns, end));
  }
  ErrorPtr(TRITONBACKEND_RequestRelease(r.request, TRITONSERVER_REQUEST_RELEASE_ALL));
  if (!r.warmup) metrics.Request(end > r.arrived_ns ? static_cast<double>(end - r.arrived_ns) * 1e-9 : 0.0);
}

}  // namespace bertserve
