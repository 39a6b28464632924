#include "rerank_request.h"

#include <cstring>
#include <string_view>

#include "text_input.h"
#include "triton_util.h"

namespace bertserve {
namespace {

constexpr const char* kQuery = "QUERY";
constexpr const char* kDocuments = "DOCUMENTS";
constexpr const char* kScores = "SCORES";

RequestError BadShape(const std::string& message) { return {"bad_shape", message}; }

// The BYTES elements of input `name` (each a 4-byte little-endian length, then its bytes), between 1 and
// `max_count` of them, each checked as decode_text checks TEXT (size, UTF-8, blank) and named by its index.
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
    return RequestError{"text_too_large", std::string(name) + " is " + std::to_string(byte_size) +
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
    if (memory == TRITONSERVER_MEMORY_GPU) return RequestError{"internal", std::string(name) + " is in GPU memory",
                                                               RequestError::Kind::kInternal};
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

// The `truncation` (longest_first, only_second) and `truncate` (true, false) request parameters.
std::optional<RequestError> ReadParameters(TRITONBACKEND_Request* request, RerankRequest* r) {
  uint32_t count = 0;
  Check(TRITONBACKEND_RequestParameterCount(request, &count), "request parameters");
  for (uint32_t i = 0; i < count; ++i) {
    const char* key = nullptr;
    TRITONSERVER_ParameterType type;
    const void* value = nullptr;
    Check(TRITONBACKEND_RequestParameter(request, i, &key, &type, &value), "request parameter");
    if (key == nullptr || value == nullptr) continue;
    const std::string_view k(key);
    if (k == "truncation") {
      const std::string_view v = type == TRITONSERVER_PARAMETER_STRING ? static_cast<const char*>(value) : "";
      if (v == "longest_first") {
        r->truncation = tokenizer::PairTruncation::kLongestFirst;
      } else if (v == "only_second") {
        r->truncation = tokenizer::PairTruncation::kOnlySecond;
      } else {
        return RequestError{"bad_parameter", "truncation must be longest_first or only_second, got \"" +
                                                 std::string(v.substr(0, 64)) + "\""};
      }
    } else if (k == "truncate") {
      if (type == TRITONSERVER_PARAMETER_BOOL) {
        r->truncate = *static_cast<const bool*>(value);
      } else if (type == TRITONSERVER_PARAMETER_STRING &&
                 (std::string_view(static_cast<const char*>(value)) == "true" ||
                  std::string_view(static_cast<const char*>(value)) == "false")) {
        r->truncate = std::string_view(static_cast<const char*>(value)) == "true";
      } else {
        return RequestError{"bad_parameter", "truncate must be true or false"};
      }
    }
  }
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

void RerankRequest::Read(const RerankLimits& limits) noexcept {
  try {
    error = ReadParameters(request, this);
    std::vector<std::string> one;
    if (!error) error = ReadStrings(request, kQuery, 1, &one);
    if (!error) query = std::move(one[0]);
    if (!error) error = ReadStrings(request, kDocuments, static_cast<uint64_t>(limits.max_documents), &documents);
  } catch (const std::exception& e) {
    error = RequestError{"internal", e.what(), RequestError::Kind::kInternal};
  }
}

void RerankRequest::Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
                           uint64_t compute_end_ns) noexcept {
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ResponseNew(&response, request)) {
    ErrorPtr owned(e);
    BERTSERVE_LOG(ERROR, std::string("cannot create a response: ") + TRITONSERVER_ErrorMessage(e));
  } else {
    if (!error) {
      const int64_t shape[2] = {1, static_cast<int64_t>(scores.size())};
      TRITONBACKEND_Output* output = nullptr;
      void* buffer = nullptr;
      TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
      int64_t memory_id = 0;
      const uint64_t bytes = scores.size() * sizeof(float);
      TRITONSERVER_Error* e = TRITONBACKEND_ResponseOutput(response, &output, kScores, TRITONSERVER_TYPE_FP32, shape, 2);
      if (e == nullptr) e = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &memory, &memory_id);
      if (e == nullptr && memory == TRITONSERVER_MEMORY_GPU) {
        e = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the output buffer is in GPU memory");
      }
      if (e == nullptr) std::memcpy(buffer, scores.data(), bytes);
      if (e != nullptr) {
        ErrorPtr owned(e);
        error = RequestError{"internal", std::string("cannot write SCORES: ") + TRITONSERVER_ErrorMessage(e),
                             RequestError::Kind::kInternal};
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
    }
  }
  const uint64_t end = NowNs();
  ErrorPtr(TRITONBACKEND_ModelInstanceReportStatistics(instance, request, !error, arrived_ns, compute_start_ns,
                                                       compute_end_ns, end));
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
  metrics.Request(end > arrived_ns ? static_cast<double>(end - arrived_ns) * 1e-9 : 0.0);
}

}  // namespace bertserve
