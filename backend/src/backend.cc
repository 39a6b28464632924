// The C entry points Triton calls. Each one finds its state object and delegates; Guard turns any exception
// into a TRITONSERVER_Error, so nothing C++ crosses the C API.
#include <memory>
#include <string>

#include "compute_pool.h"
#include "instance_state.h"
#include "model_state.h"
#include "tokenizer_instance.h"
#include "triton_util.h"

namespace bertserve {

void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) noexcept {
  if (TRITONSERVER_LogIsEnabled(level)) ErrorPtr(TRITONSERVER_LogMessage(level, file, line, message.c_str()));
}

}  // namespace bertserve

using bertserve::Check;
using bertserve::Guard;
using bertserve::InstanceState;
using bertserve::ModelState;
using bertserve::TokenizerInstance;

namespace {

// The model an instance belongs to: an encoder (InstanceState) or a tokenizer model (TokenizerInstance).
ModelState* ModelOf(TRITONBACKEND_ModelInstance* instance) {
  TRITONBACKEND_Model* model = nullptr;
  void* state = nullptr;
  Check(TRITONBACKEND_ModelInstanceModel(instance, &model), "instance model");
  Check(TRITONBACKEND_ModelState(model, &state), "model state");
  if (state == nullptr) throw bertserve::BackendError(TRITONSERVER_ERROR_INTERNAL, "model has no state");
  return static_cast<ModelState*>(state);
}

}  // namespace

extern "C" {

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Initialize(TRITONBACKEND_Backend* backend) {
  return Guard("initialize", [&] {
    const char* name = nullptr;
    Check(TRITONBACKEND_BackendName(backend, &name), "backend name");
    uint32_t major = 0, minor = 0;
    Check(TRITONBACKEND_ApiVersion(&major, &minor), "backend API version");
    if (major != TRITONBACKEND_API_VERSION_MAJOR || minor < TRITONBACKEND_API_VERSION_MINOR) {
      throw bertserve::BackendError(
          TRITONSERVER_ERROR_UNSUPPORTED,
          std::string(name) + " backend was built for TRITONBACKEND API " +
              std::to_string(TRITONBACKEND_API_VERSION_MAJOR) + "." + std::to_string(TRITONBACKEND_API_VERSION_MINOR) +
              "; this server has " + std::to_string(major) + "." + std::to_string(minor));
    }
    BERTSERVE_LOG(INFO, std::string(name) + " backend: TRITONBACKEND API " + std::to_string(major) + "." +
                            std::to_string(minor));
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* /*backend*/) {
  return Guard("finalize", [] { bertserve::ReleaseComputePools(); });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  return Guard("model initialize", [&] {
    auto state = ModelState::Create(model);
    Check(TRITONBACKEND_ModelSetState(model, state.get()), "model state");
    state.release();
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  return Guard("model finalize", [&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelState(model, &state), "model state");
    delete static_cast<ModelState*>(state);
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  return Guard("instance initialize", [&] {
    ModelState* model = ModelOf(instance);
    if (model->settings().tokenize_only()) {
      auto state = std::make_unique<TokenizerInstance>(model, instance);
      Check(TRITONBACKEND_ModelInstanceSetState(instance, state.get()), "instance state");
      state.release();
      return;
    }
    auto state = InstanceState::Create(model, instance);
    Check(TRITONBACKEND_ModelInstanceSetState(instance, state.get()), "instance state");
    state.release();
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  return Guard("instance finalize", [&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelInstanceState(instance, &state), "instance state");
    if (ModelOf(instance)->settings().tokenize_only()) {
      delete static_cast<TokenizerInstance*>(state);
    } else {
      delete static_cast<InstanceState*>(state);
    }
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  // Ownership of the requests passes to the backend only when this returns no error: a state that cannot be
  // found is reported before any request is touched.
  void* state = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &state)) return e;
  if (state == nullptr) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "instance has no state");
  bool tokenize_only = false;
  if (TRITONSERVER_Error* e = Guard("execute", [&] { tokenize_only = ModelOf(instance)->settings().tokenize_only(); })) {
    return e;
  }
  if (tokenize_only) {
    static_cast<TokenizerInstance*>(state)->Execute(requests, request_count);
  } else {
    static_cast<InstanceState*>(state)->Execute(requests, request_count);
  }
  return nullptr;
}

}  // extern "C"
