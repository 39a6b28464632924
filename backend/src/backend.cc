// The C entry points Triton calls. Each one finds its state object and delegates; Guard turns any exception
// into a TRITONSERVER_Error, so nothing C++ crosses the C API.
#include <ATen/cpu/Utils.h>

#include <memory>
#include <string>

#include "compute_pool.h"
#include "instance_state.h"
#include "model_state.h"
#include "sequence_instance.h"
#include "sequence_model.h"
#include "tokenizer_instance.h"
#include "triton_util.h"

namespace bertserve {

void Log(TRITONSERVER_LogLevel level, const char* file, int line, const std::string& message) noexcept {
  if (TRITONSERVER_LogIsEnabled(level)) ErrorPtr(TRITONSERVER_LogMessage(level, file, line, message.c_str()));
}

namespace {

// A model's state is that of its task: embed (ModelState, InstanceState; a tokenizer model, manifest runtime
// "none", has TokenizerInstance instances) or a sequence classifier's, rerank or classify (sequence_model.h).
struct ModelHandle {
  std::unique_ptr<ModelState> embed;
  std::unique_ptr<SequenceModel> sequence;
};
struct InstanceHandle {
  std::unique_ptr<InstanceState> embed;
  std::unique_ptr<TokenizerInstance> tokenizer;
  std::unique_ptr<SequenceInstance> sequence;
};

}  // namespace
}  // namespace bertserve

using bertserve::Check;
using bertserve::Guard;
using bertserve::InstanceHandle;
using bertserve::InstanceState;
using bertserve::ModelHandle;
using bertserve::ModelState;
using bertserve::SequenceInstance;
using bertserve::SequenceModel;
using bertserve::TokenizerInstance;

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
    // AOTInductor's AMX GEMM kernels (export's autotuning picks them on CPUs with AMX) execute tile instructions,
    // which Linux allows a process only once it has asked for the tile state; torch's Python runtime asks when it
    // compiles them, tritonserver never does, so without this the first forward dies of SIGILL. A no-op elsewhere.
    if (at::cpu::init_amx()) BERTSERVE_LOG(INFO, "AMX tile state enabled for this process");
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_Finalize(TRITONBACKEND_Backend* /*backend*/) {
  return Guard("finalize", [] { bertserve::ReleaseComputePools(); });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInitialize(TRITONBACKEND_Model* model) {
  return Guard("model initialize", [&] {
    auto state = std::make_unique<ModelHandle>();
    if (const auto task = SequenceModel::TaskOf(model)) {
      state->sequence = SequenceModel::Create(model, *task);
    } else {
      state->embed = ModelState::Create(model);
    }
    Check(TRITONBACKEND_ModelSetState(model, state.get()), "model state");
    state.release();
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelFinalize(TRITONBACKEND_Model* model) {
  return Guard("model finalize", [&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelState(model, &state), "model state");
    delete static_cast<ModelHandle*>(state);
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceInitialize(TRITONBACKEND_ModelInstance* instance) {
  return Guard("instance initialize", [&] {
    TRITONBACKEND_Model* model = nullptr;
    void* model_state = nullptr;
    Check(TRITONBACKEND_ModelInstanceModel(instance, &model), "instance model");
    Check(TRITONBACKEND_ModelState(model, &model_state), "model state");
    auto* handle = static_cast<ModelHandle*>(model_state);
    auto state = std::make_unique<InstanceHandle>();
    if (handle->sequence) {
      state->sequence = SequenceInstance::Create(handle->sequence.get(), instance);
    } else if (handle->embed->settings().tokenize_only()) {
      state->tokenizer = std::make_unique<TokenizerInstance>(handle->embed.get(), instance);
    } else {
      state->embed = InstanceState::Create(handle->embed.get(), instance);
    }
    Check(TRITONBACKEND_ModelInstanceSetState(instance, state.get()), "instance state");
    state.release();
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceFinalize(TRITONBACKEND_ModelInstance* instance) {
  return Guard("instance finalize", [&] {
    void* state = nullptr;
    Check(TRITONBACKEND_ModelInstanceState(instance, &state), "instance state");
    delete static_cast<InstanceHandle*>(state);
  });
}

TRITONBACKEND_ISPEC TRITONSERVER_Error* TRITONBACKEND_ModelInstanceExecute(
    TRITONBACKEND_ModelInstance* instance, TRITONBACKEND_Request** requests, const uint32_t request_count) {
  // Ownership of the requests passes to the backend only when this returns no error: a state that cannot be
  // found is reported before any request is touched.
  void* state = nullptr;
  if (TRITONSERVER_Error* e = TRITONBACKEND_ModelInstanceState(instance, &state)) return e;
  if (state == nullptr) return TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, "instance has no state");
  auto* handle = static_cast<InstanceHandle*>(state);
  if (handle->sequence) {
    handle->sequence->Execute(requests, request_count);
  } else if (handle->tokenizer) {
    handle->tokenizer->Execute(requests, request_count);
  } else {
    handle->embed->Execute(requests, request_count);
  }
  return nullptr;
}

}  // extern "C"
