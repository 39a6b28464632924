// A request of the sequence-classifier tasks (rerank, classify) on its way through the model's scheduler
// (scheduler.h): read and tokenized on Triton's thread into forwards of its own, admitted or refused by its
// predicted work against its deadline, then scored by an instance (sequence_model.h) and answered. Every job the
// scheduler is offered leaves through Fail or Finish; one dropped on an error path answers INTERNAL as it goes.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "batching.h"
#include "metrics.h"
#include "sequence_rows.h"
#include "settings.h"
#include "task_request.h"
#include "triton_api.h"

namespace bertserve {

struct SequenceJob {
  // Takes `task` (read, its request held) and answers for its request from here on.
  explicit SequenceJob(std::unique_ptr<TaskRequest> task) noexcept;
  ~SequenceJob();
  SequenceJob(const SequenceJob&) = delete;
  SequenceJob& operator=(const SequenceJob&) = delete;

  std::unique_ptr<TaskRequest> task;
  TRITONBACKEND_Request* request = nullptr;  // task's, for the scheduler
  uint64_t arrived_ns = 0;                   // when execute received it
  std::vector<RowChunk> chunks;              // its forwards, at most max_rows rows each
  size_t width = 1;                          // outputs per row: one score, or a logit per label
  bool warmup = false;                       // one of Triton's warm-up requests: never refused
  bool released = false;

  int64_t rows() const;
  // Each forward's [rows, seq], for the cost model.
  std::vector<std::pair<int64_t, int64_t>> forwards() const;
  // Answers with `error` at once (refused, or failed before its forwards ran).
  void Fail(RequestError error, TRITONBACKEND_ModelInstance* instance, const ModelSettings& settings,
            Metrics& metrics) noexcept;
  // Answers with the outputs the forwards wrote, or the task's error. Never throws.
  void Finish(TRITONBACKEND_ModelInstance* instance, Metrics& metrics, uint64_t compute_start_ns,
              uint64_t compute_end_ns) noexcept;
};

}  // namespace bertserve
