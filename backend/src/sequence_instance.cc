#include "sequence_instance.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "triton_util.h"

namespace bertserve {
namespace {

double Seconds(uint64_t from_ns, uint64_t to_ns) { return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) * 1e-9 : 0.0; }

// Seconds as milliseconds with three decimals.
std::string Millis(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", seconds * 1e3);
  return text;
}

}  // namespace

SequenceInstance::SequenceInstance(SequenceModel* model, TRITONBACKEND_ModelInstance* instance, std::string device)
    : model_(model),
      instance_(instance),
      device_(std::move(device)),
      warmup_left_(model->settings().warmup_requests) {}

std::unique_ptr<SequenceInstance> SequenceInstance::Create(SequenceModel* model, TRITONBACKEND_ModelInstance* instance) {
  std::unique_ptr<SequenceInstance> state(new SequenceInstance(model, instance, InstanceDevice(instance)));
  const bool gpu = state->device_ != "cpu";
  state->gpu_ = gpu;
  const ModelSettings& s = model->settings();
  state->scorer_ = RowScorer::Load(s, state->device_);
  SequenceInstance* self = state.get();
  if (gpu) {
    model->scheduler().AddLane(state->MeasureCosts());
    state->server_ = std::thread([self] { self->Serve(); });
  } else {
    // On a compute pool thread, as every CPU forward (compute_pool.h).
    state->pool_ = &SharedComputePool(s.threads);
    model->scheduler().AddLane(state->pool_->Call([self] { return self->MeasureCosts(); }));
    SequenceScheduler& scheduler = model->scheduler();
    state->turns_ = std::make_unique<PoolTurns>(*state->pool_, s.name, [self] { self->ServeQueued(); },
                                                [&scheduler] { return !scheduler.Idle(); });
    state->waker_ = scheduler.Subscribe([self] { self->turns_->Wake(); });
  }
  BERTSERVE_LOG(INFO, s.name + ": instance loaded on " + state->device_);
  return state;
}

CostModel SequenceInstance::MeasureCosts() {
  const ModelSettings& s = model_->settings();
  const int64_t max_rows = model_->row_options().max_rows;
  const std::vector<int64_t> lengths = LengthBuckets(s.max_seq);
  const auto width = static_cast<int64_t>(model_->width());
  // Two shapes, extended linearly in padded tokens, on CUDA too (the scorer replays no graphs: a forward's time
  // follows its tokens); completed forwards correct it.
  const int64_t b2 = std::min<int64_t>(8, max_rows), l2 = std::min<int64_t>(64, s.max_seq);
  const int calls = gpu_ ? 5 : 2;
  const auto start = std::chrono::steady_clock::now();
  const double small = scorer_->Time(1, lengths.front(), width, calls);
  const double large = scorer_->Time(b2, l2, width, calls);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BERTSERVE_LOG(INFO, s.name + ": forward costs measured in " + Millis(took) + " ms; median ms per call (rows x " +
                          "length): 1x" + std::to_string(lengths.front()) + " " + Millis(small) + " " +
                          std::to_string(b2) + "x" + std::to_string(l2) + " " + Millis(large));
  return CostModel::Fit(1, lengths.front(), small, b2, l2, large, max_rows, lengths);
}

SequenceInstance::~SequenceInstance() {
  SequenceScheduler& scheduler = model_->scheduler();
  stopping_ = true;
  if (gpu_) {
    scheduler.WakeAll();
    if (server_.joinable()) server_.join();
  } else if (pool_ != nullptr) {
    scheduler.Unsubscribe(waker_);
    turns_->Wake();  // what is still queued is served before the instance goes
    turns_->Drain();
  }
}

void SequenceInstance::Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept {
  const uint64_t now = NowNs();
  Metrics& metrics = model_->metrics();
  SequenceScheduler& scheduler = model_->scheduler();
  for (uint32_t i = 0; i < count; ++i) {
    std::unique_ptr<SequenceJob> job;  // from its making on, it answers for requests[i]
    try {
      job = std::make_unique<SequenceJob>(model_->Read(requests[i], now));
      if (warmup_left_ > 0) job->warmup = job->task->warmup = warmup_left_-- > 0;
      TaskRequest& r = *job->task;
      if (!r.error) {
        RowOptions options = model_->row_options();
        options.truncation = r.truncation;
        options.truncate = r.truncate;
        const uint64_t start = NowNs();
        r.error = EncodeRows(model_->tokenizer(), r.texts(), options, &job->chunks);
        metrics.StageTime(Stage::kTokenize, Seconds(start, NowNs()));
      }
      if (r.error) {
        const uint64_t end = NowNs();
        job->Finish(instance_, metrics, end, end);
        continue;
      }
      job->width = model_->width();
      scheduler.Preparing();
      scheduler.Submit(std::move(job), instance_);
    } catch (const std::exception& e) {  // e.g. out of memory: this request fails alone, the server stays up
      if (job != nullptr) {
        job->Fail(Internal(e.what()), instance_, model_->settings(), metrics);
      } else {
        FailUnheld(requests[i], e.what());
      }
    } catch (...) {
      if (job != nullptr) {
        job->Fail(Internal("execute failed"), instance_, model_->settings(), metrics);
      } else {
        FailUnheld(requests[i], "execute failed");
      }
    }
  }
}

void SequenceInstance::FailUnheld(TRITONBACKEND_Request* request, const char* what) noexcept {
  try {
    BERTSERVE_LOG(ERROR, model_->settings().name + ": execute failed: " + what);
  } catch (...) {
  }
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONBACKEND_ResponseNew(&response, request) == nullptr) {
    ErrorPtr error(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, what));
    ErrorPtr(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error.get()));
  }
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
}

void SequenceInstance::Run(SequenceJob& job, double work_s) noexcept {
  Metrics& metrics = model_->metrics();
  SequenceScheduler& scheduler = model_->scheduler();
  const uint64_t start = NowNs();
  uint64_t end = start;
  try {
    CostModel& costs = scheduler.costs();
    const size_t width = job.width;
    std::vector<float>& out = job.task->outputs();
    out.resize(static_cast<size_t>(job.rows()) * width);
    double predicted_s = 0.0;  // uncorrected, for Observe
    for (const RowChunk& c : job.chunks) {
      predicted_s += costs.Measured(c.rows, c.seq);
      scorer_->Score(c, static_cast<int64_t>(width), out.data() + c.first * width);
      const auto real = static_cast<int64_t>(std::count(c.mask.begin(), c.mask.end(), int64_t{1}));
      metrics.Batch(c.rows, 1.0 - static_cast<double>(real) / static_cast<double>(c.rows * c.seq), real);
    }
    end = NowNs();
    metrics.StageTime(Stage::kInfer, Seconds(start, end));
    costs.Observe(predicted_s, Seconds(start, end));
  } catch (const std::exception& e) {  // this request fails alone
    end = NowNs();
    try {
      BERTSERVE_LOG(ERROR, model_->settings().name + ": forward failed: " + e.what());
      job.task->error = Internal(std::string("forward failed: ") + e.what());
    } catch (...) {
      job.task->error = RequestError{FailureReason::kInternal, {}};
    }
  }
  try {
    scheduler.Done(work_s);  // before the answer: a client that has its response sees the work gone
  } catch (const std::exception& e) {
    BERTSERVE_LOG(ERROR, model_->settings().name + ": " + e.what());
  }
  job.Finish(instance_, metrics, start, end);
}

void SequenceInstance::Serve() {
  NameThisThread("bs-score");
  SequenceScheduler& scheduler = model_->scheduler();
  for (;;) {
    std::vector<std::unique_ptr<SequenceJob>> jobs;
    double work_s = 0.0;
    try {
      jobs = scheduler.Take(instance_, /*block=*/true, stopping_, &work_s);
    } catch (const std::exception& e) {  // what it took is unwound: each job answers as it goes
      BERTSERVE_LOG(ERROR, model_->settings().name + ": taking a request failed: " + e.what());
      continue;
    }
    if (jobs.empty()) {
      if (stopping_ && scheduler.Idle()) break;
      continue;  // what was taken had expired
    }
    // The scheduler takes each request alone; the batch's work goes back with the first.
    for (size_t i = 0; i < jobs.size(); ++i) Run(*jobs[i], i == 0 ? work_s : 0.0);
  }
}

void SequenceInstance::ServeQueued() noexcept {
  SequenceScheduler& scheduler = model_->scheduler();
  try {
    double work_s = 0.0;
    std::vector<std::unique_ptr<SequenceJob>> jobs = scheduler.Take(instance_, /*block=*/false, stopping_, &work_s);
    for (size_t i = 0; i < jobs.size(); ++i) Run(*jobs[i], i == 0 ? work_s : 0.0);
  } catch (const std::exception& e) {  // what it took is unwound: each job answers as it goes
    BERTSERVE_LOG(ERROR, model_->settings().name + ": taking a request failed: " + e.what());
  }
}

}  // namespace bertserve
