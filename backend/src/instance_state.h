// One instance of an encoder model: its loaded runtime and the execute loop (validate, collate, infer, respond).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "batching.h"
#include "model_state.h"
#include "runtime.h"
#include "triton_api.h"

namespace bertserve {

class InstanceState {
 public:
  // Loads the artifact on the instance's device and warms it (on CUDA, captures and times every bucket).
  static std::unique_ptr<InstanceState> Create(ModelState* model, TRITONBACKEND_ModelInstance* instance);

  // Answers every request (one response each, a bad request fails alone) and releases it. Never throws.
  void Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept;

 private:
  struct Pending;
  InstanceState(ModelState* model, TRITONBACKEND_ModelInstance* instance, std::string device);
  void Run(std::vector<Pending>& pending);
  void Read(Pending& p);
  void Infer(std::vector<Pending>& pending, const Collated& collated);
  void Respond(Pending& p);

  ModelState* model_;
  TRITONBACKEND_ModelInstance* instance_;
  std::string device_;
  std::unique_ptr<Runtime> runtime_;
  std::vector<int64_t> batch_buckets_;  // CUDA: batches are padded to these (one graph per bucket)
  std::optional<Costs> costs_;          // CUDA: measured per (batch, length) bucket
};

}  // namespace bertserve
