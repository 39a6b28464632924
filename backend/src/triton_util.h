// Errors as values across the C boundary, RAII owners for Triton objects, logging and the steady clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>

#include "triton_api.h"

namespace bertserve {

// A failure inside the backend that becomes a TRITONSERVER_Error at the C boundary.
class BackendError : public std::runtime_error {
 public:
  BackendError(TRITONSERVER_Error_Code code, const std::string& message) : std::runtime_error(message), code_(code) {}
  TRITONSERVER_Error_Code code() const { return code_; }

 private:
  TRITONSERVER_Error_Code code_;
};

struct ErrorDeleter {
  void operator()(TRITONSERVER_Error* e) const { TRITONSERVER_ErrorDelete(e); }
};
using ErrorPtr = std::unique_ptr<TRITONSERVER_Error, ErrorDeleter>;

// Throws a BackendError carrying the code and message of a Triton call that failed (and frees the error).
inline void Check(TRITONSERVER_Error* error, const char* what) {
  if (error == nullptr) return;
  ErrorPtr owned(error);
  throw BackendError(TRITONSERVER_ErrorCode(error), std::string(what) + ": " + TRITONSERVER_ErrorMessage(error));
}

void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) noexcept;
#define BERTSERVE_LOG(LEVEL, MESSAGE) ::bertserve::Log(TRITONSERVER_LOG_##LEVEL, __FILE__, __LINE__, (MESSAGE))

// Runs `body` and turns any exception it throws into a TRITONSERVER_Error: nothing C++ crosses the C API.
template <typename Body>
TRITONSERVER_Error* Guard(const char* where, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const BackendError& e) {
    return TRITONSERVER_ErrorNew(e.code(), e.what());
  } catch (const std::exception& e) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, (std::string(where) + ": " + e.what()).c_str());
  } catch (...) {
    return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, (std::string(where) + ": unknown exception").c_str());
  }
}

// The model's config as Triton serializes it to JSON.
inline std::string ModelConfigJson(TRITONBACKEND_Model* model) {
  TRITONSERVER_Message* message = nullptr;
  Check(TRITONBACKEND_ModelConfig(model, 1, &message), "model config");
  std::unique_ptr<TRITONSERVER_Message, void (*)(TRITONSERVER_Message*)> owned(
      message, [](TRITONSERVER_Message* m) { ErrorPtr(TRITONSERVER_MessageDelete(m)); });
  const char* text = nullptr;
  size_t size = 0;
  Check(TRITONSERVER_MessageSerializeToJson(message, &text, &size), "model config JSON");
  return std::string(text, size);
}

// A model as ReadSettings takes it: its name, its directory (a model not on a filesystem is refused) and config.
struct ModelSource {
  std::string name, location, config_json;
};

inline ModelSource ReadModelSource(TRITONBACKEND_Model* model) {
  const char* name = nullptr;
  Check(TRITONBACKEND_ModelName(model, &name), "model name");
  TRITONBACKEND_ArtifactType artifact_type;
  const char* location = nullptr;
  Check(TRITONBACKEND_ModelRepository(model, &artifact_type, &location), "model repository");
  if (artifact_type != TRITONBACKEND_ARTIFACT_FILESYSTEM) {
    throw BackendError(TRITONSERVER_ERROR_UNSUPPORTED, std::string(name) + ": the model must be on a filesystem");
  }
  return {name, location, ModelConfigJson(model)};
}

// Nanoseconds on the steady clock, the clock Triton's statistics expect.
// The device an instance runs on: "cuda:N" for a GPU instance, else "cpu".
inline std::string InstanceDevice(TRITONBACKEND_ModelInstance* instance) {
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id = 0;
  Check(TRITONBACKEND_ModelInstanceKind(instance, &kind), "instance kind");
  Check(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id), "instance device");
  return kind == TRITONSERVER_INSTANCEGROUPKIND_GPU ? "cuda:" + std::to_string(device_id) : "cpu";
}

inline uint64_t NowNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}

}  // namespace bertserve
