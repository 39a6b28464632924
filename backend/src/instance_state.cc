#include "instance_state.h"

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

std::string Ms(uint64_t us) { return std::to_string(us / 1000) + "." + std::to_string(us % 1000 / 100) + " ms"; }

}  // namespace

InstanceState::InstanceState(ModelState* model, TRITONBACKEND_ModelInstance* instance, std::string device)
    : model_(model), instance_(instance), device_(std::move(device)) {}

std::unique_ptr<InstanceState> InstanceState::Create(ModelState* model, TRITONBACKEND_ModelInstance* instance) {
  TRITONSERVER_InstanceGroupKind kind;
  int32_t device_id = 0;
  Check(TRITONBACKEND_ModelInstanceKind(instance, &kind), "instance kind");
  Check(TRITONBACKEND_ModelInstanceDeviceId(instance, &device_id), "instance device");
  const bool gpu = kind == TRITONSERVER_INSTANCEGROUPKIND_GPU;
  std::unique_ptr<InstanceState> state(
      new InstanceState(model, instance, gpu ? "cuda:" + std::to_string(device_id) : "cpu"));
  const ModelSettings& s = model->settings();
  state->runtime_ = Runtime::Load(s, state->device_);
  if (gpu) {
    // Every (batch, length) bucket runs once before the model reports ready, and the measured cost per bucket
    // decides which length buckets share a pass.
    state->batch_buckets_ = BatchBuckets(s.max_batch);
    const auto start = std::chrono::steady_clock::now();
    Costs costs;
    std::string table;
    for (int64_t b : state->batch_buckets_)
      for (int64_t l : model->length_buckets()) {
        costs[{b, l}] = state->runtime_->Warm(b, l, 5);
        table.append(" ").append(std::to_string(b)).append("x").append(std::to_string(l));
        table.append(" ").append(Millis(costs[{b, l}]));
      }
    const double warm_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    BERTSERVE_LOG(INFO, s.name + ": " + std::to_string(costs.size()) + " buckets captured and timed in " +
                            Millis(warm_s) + " ms; median ms per call (batch x length):" + table);
    state->costs_ = std::move(costs);
    // Its own thread: batches of this instance run one at a time on its stream, beside the other instances'.
    state->own_pool_ = std::make_unique<ComputePool>(1, 1);
    state->pool_ = state->own_pool_.get();
  } else {
    state->pool_ = &SharedComputePool(s.threads);
  }
  BERTSERVE_LOG(INFO, s.name + ": instance loaded on " + state->device_);
  return state;
}

InstanceState::~InstanceState() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return !serving_ && queue_.empty(); });
}

void InstanceState::Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept {
  std::vector<std::unique_ptr<Pending>> pending;  // an entry handed to the queue becomes null
  const uint64_t now = NowNs();
  try {
    pending.reserve(count);
    for (uint32_t i = 0; i < count; ++i) {
      pending.push_back(std::make_unique<Pending>());
      Pending& p = *pending.back();
      p.request = requests[i];
      p.arrived_ns = now;
      p.Read(model_->settings());
      if (p.error) Refuse(p, *p.error);
    }
    Enqueue(pending);
  } catch (const std::exception& e) {  // e.g. out of memory: answer what is left rather than take the server down
    BERTSERVE_LOG(ERROR, model_->settings().name + ": execute failed: " + e.what());
    for (uint32_t i = 0; i < count; ++i) {
      if (i >= pending.size()) {  // never read
        FailUnread(requests[i], e.what());
      } else if (Pending* p = pending[i].get(); p != nullptr && !p->released) {
        if (!p->responded) {
          p->error = Internal(e.what());
          p->Respond(model_->settings(), model_->metrics());
        }
        p->Finish(instance_, now, now, now, NowNs());
      }
    }
  }
}

void InstanceState::FailUnread(TRITONBACKEND_Request* request, const char* what) noexcept {
  TRITONBACKEND_Response* response = nullptr;
  if (TRITONBACKEND_ResponseNew(&response, request) == nullptr) {
    ErrorPtr error(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, what));
    ErrorPtr(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error.get()));
  }
  ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
}

void InstanceState::Refuse(Pending& p, RequestError error) {
  p.error = std::move(error);
  p.Respond(model_->settings(), model_->metrics());
  const uint64_t now = NowNs();
  p.Finish(instance_, p.arrived_ns, now, now, now);
  model_->metrics().Request(Seconds(p.arrived_ns, now));
}

void InstanceState::Serve(const std::vector<Pending*>& batch, uint64_t exec_start) {
  const ModelSettings& s = model_->settings();
  if (const tokenizer::Tokenizer* tokenizer = model_->tokenizer()) {
    for (Pending* p : batch) p->Tokenize(s, *tokenizer);  // here, on the compute thread: execute never waits on it
  }
  const uint64_t tokenized = NowNs();
  std::vector<ValidRequest> valid;
  uint64_t rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (batch[i]->error) continue;  // a text too long to keep (truncate=false)
    valid.push_back({i, &batch[i]->batch, batch[i]->lengths});
    rows += static_cast<uint64_t>(batch[i]->batch.rows());
  }
  Collated collated = Collate(valid, model_->length_buckets(), batch_buckets_, costs_ ? &*costs_ : nullptr);
  const uint64_t compute_start = NowNs();
  std::vector<float> out;
  for (const Group& g : collated.groups) {
    out.resize(g.batch * s.hidden);
    try {
      runtime_->Run(g.ids.data(), g.mask.data(), g.batch, g.seq, out.data());
    } catch (const std::exception& e) {  // one failed forward fails only the requests in it
      BERTSERVE_LOG(ERROR, s.name + ": forward failed for a batch of shape [" + std::to_string(g.batch) + ", " +
                               std::to_string(g.seq) + "]: " + e.what());
      for (const auto& [req, row] : g.rows) batch[req]->error = Internal(std::string("inference failed: ") + e.what());
      continue;
    }
    for (size_t k = 0; k < g.rows.size(); ++k) {
      Pending& p = *batch[g.rows[k].first];
      p.embedding.resize(p.rows() * s.hidden);
      std::copy_n(out.data() + k * s.hidden, s.hidden, p.embedding.data() + g.rows[k].second * s.hidden);
    }
  }
  const uint64_t compute_end = NowNs();
  for (Pending* p : batch) p->Respond(s, model_->metrics());
  const uint64_t exec_end = NowNs();
  for (Pending* p : batch) p->Finish(instance_, exec_start, compute_start, compute_end, exec_end);
  if (collated.groups.empty()) return;
  ErrorPtr(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance_, rows, exec_start, compute_start, compute_end,
                                                            exec_end));
  Metrics& m = model_->metrics();
  if (s.text()) m.StageTime(Stage::kTokenize, Seconds(exec_start, tokenized));
  m.StageTime(Stage::kCollate, Seconds(s.text() ? tokenized : exec_start, compute_start));
  m.StageTime(Stage::kInfer, Seconds(compute_start, compute_end));
  m.StageTime(Stage::kRespond, Seconds(compute_end, exec_end));
  m.Batch(static_cast<int64_t>(rows), collated.padding_ratio(), collated.real_tokens);
  for (Pending* p : batch) m.Request(Seconds(p->arrived_ns, exec_end));
}

uint64_t InstanceState::DeadlineUs(const Pending& p, bool overloaded) const {
  uint64_t client = 0;  // the client's own timeout, where it sent one: it holds whatever the load
  ErrorPtr(TRITONBACKEND_InferenceRequestTimeoutMicroseconds(p.request, &client));
  // The model's holds only while more than a batch waits: shedding is for overload, not for a request that a
  // scheduling hiccup delayed while the queue is short and about to run it.
  const uint64_t model = overloaded ? model_->settings().queue_timeout_us : 0;
  if (client == 0 || model == 0) return std::max(client, model);  // 0: none
  return std::min(client, model);
}

void InstanceState::Enqueue(std::vector<std::unique_ptr<Pending>>& pending) {
  const ModelSettings& s = model_->settings();
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& p : pending) {
      if (p->error) continue;  // refused already
      const int64_t rows = p->rows();
      if (s.max_queue_rows > 0 && !queue_.empty() && queued_rows_ + rows > s.max_queue_rows) continue;
      queued_rows_ += rows;
      queue_.push_back(std::move(p));
    }
    if (!serving_ && !queue_.empty()) serving_ = post = true;
  }
  if (post) pool_->Post([this] { ServeQueued(); });
  for (auto& p : pending) {
    if (p == nullptr || p->released) continue;
    Refuse(*p, Unavailable("queue_full", s.name + " is overloaded: " + std::to_string(s.max_queue_rows) +
                                             " sequences are already waiting; retry later"));
  }
}

void InstanceState::ServeQueued() {
  const ModelSettings& s = model_->settings();
  const uint64_t start = NowNs();
  std::vector<std::unique_ptr<Pending>> taken, expired;
  std::vector<uint64_t> deadlines_us;  // of the expired
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool overloaded = queued_rows_ > s.max_batch;
    int64_t rows = 0;
    while (!queue_.empty()) {
      Pending& p = *queue_.front();
      const int64_t r = p.rows();
      const uint64_t deadline_us = DeadlineUs(p, overloaded);
      const bool late = deadline_us > 0 && start > p.arrived_ns && start - p.arrived_ns > deadline_us * 1000;
      if (late) deadlines_us.push_back(deadline_us);
      if (!late && rows > 0 && rows + r > s.max_batch) break;
      queued_rows_ -= r;
      (late ? expired : taken).push_back(std::move(queue_.front()));
      queue_.pop_front();
      if (!late) rows += r;
    }
  }
  for (size_t i = 0; i < expired.size(); ++i) {
    const uint64_t waited_us = (start - expired[i]->arrived_ns) / 1000;
    Refuse(*expired[i], Unavailable("queue_timeout", s.name + ": the request waited " + Ms(waited_us) +
                                                         " in the queue, past its deadline of " + Ms(deadlines_us[i])));
  }
  std::vector<Pending*> batch;
  for (auto& p : taken) batch.push_back(p.get());
  try {
    if (!batch.empty()) Serve(batch, start);
  } catch (const std::exception& e) {
    BERTSERVE_LOG(ERROR, s.name + ": serving a batch failed: " + e.what());
    for (Pending* p : batch) {
      if (!p->responded) {
        p->error = Internal(e.what());
        p->Respond(s, model_->metrics());
      }
      p->Finish(instance_, start, start, start, NowNs());
    }
  }
  bool post = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty()) {
      serving_ = false;
      idle_.notify_all();
    } else {
      post = true;  // the next batch goes to the back of the pool's queue: models and instances take turns
    }
  }
  if (post) pool_->Post([this] { ServeQueued(); });
}

}  // namespace bertserve
