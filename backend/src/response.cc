#include "response.h"

#include <cstring>
#include <string>

namespace bertserve {

TRITONSERVER_Error* WriteOutput(TRITONBACKEND_Response* response, const char* name, TRITONSERVER_DataType dtype,
                                const int64_t* shape, const void* data, uint64_t bytes) {
  TRITONBACKEND_Output* output = nullptr;
  void* buffer = nullptr;
  TRITONSERVER_MemoryType memory = TRITONSERVER_MEMORY_CPU;
  int64_t memory_id = 0;
  TRITONSERVER_Error* e = TRITONBACKEND_ResponseOutput(response, &output, name, dtype, shape, 2);
  if (e == nullptr) e = TRITONBACKEND_OutputBuffer(output, &buffer, bytes, &memory, &memory_id);
  if (e == nullptr && memory == TRITONSERVER_MEMORY_GPU) {
    e = TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "the output buffer is in GPU memory");
  }
  if (e == nullptr && bytes > 0) std::memcpy(buffer, data, bytes);
  return e;
}

RequestError OutputError(TRITONSERVER_Error* e) {
  const std::string message = TRITONSERVER_ErrorMessage(e);
  if (TRITONSERVER_ErrorCode(e) == TRITONSERVER_ERROR_INVALID_ARG ||
      message.find("to hold the results") != std::string::npos) {
    return RequestError{FailureReason::kBadOutput, "the output does not fit where the request asked for it: " + message};
  }
  return RequestError{FailureReason::kInternal, "cannot write the output: " + message};
}

TRITONSERVER_Error_Code CodeOf(const RequestError& e) {
  switch (e.kind()) {
    case RequestError::Kind::kInternal:
      return TRITONSERVER_ERROR_INTERNAL;
    case RequestError::Kind::kRefused:
      return TRITONSERVER_ERROR_UNAVAILABLE;
    case RequestError::Kind::kBadInput:
      break;
  }
  return TRITONSERVER_ERROR_INVALID_ARG;
}

}  // namespace bertserve
