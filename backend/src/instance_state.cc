#include "instance_state.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fault.h"
#include "triton_util.h"

namespace bertserve {
namespace {

// Batches of one CUDA instance between the feeder and the completion thread: one computing, one queued behind it.
constexpr int kBatchesInFlight = 2;
// The most answer tasks one batch is split into.
constexpr size_t kAnswerChunks = 8;
// An execute call with at most this many texts is tokenized on Triton's thread: a hop to a prepare thread would
// cost more than the tokenizing. Larger calls go to the prepare threads in tasks of about kPrepareChunk texts.
constexpr size_t kInlineTexts = 8;
constexpr size_t kPrepareChunk = 16;
// A batch of at most this many rows is answered on the completion thread when no other batch waits to land.
constexpr int64_t kInlineAnswerRows = 4;
// The next batch is taken this long, plus twice a launch's host time, before the device should be free.
constexpr double kTakeLeadS = 50e-6;

double Seconds(uint64_t from_ns, uint64_t to_ns) { return to_ns > from_ns ? static_cast<double>(to_ns - from_ns) * 1e-9 : 0.0; }

// Seconds as milliseconds with three decimals.
std::string Millis(double seconds) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", seconds * 1e3);
  return text;
}

}  // namespace

struct InstanceState::Flight {
  std::vector<std::unique_ptr<Pending>> batch;
  Collated collated;
  std::vector<std::unique_ptr<Pass>> passes;  // one per group; null where the start failed
  int64_t rows = 0;
  double work_s = 0.0;       // the scheduler's share of these requests
  double predicted_s = 0.0;  // the cost model's forward time for the groups, uncorrected
  uint64_t taken_ns = 0, launched_ns = 0, landed_ns = 0;
};

InstanceState::InstanceState(ModelState* model, TRITONBACKEND_ModelInstance* instance, std::string device)
    : model_(model), instance_(instance), device_(std::move(device)), warmup_left_(model->settings().warmup_requests) {}

std::unique_ptr<InstanceState> InstanceState::Create(ModelState* model, TRITONBACKEND_ModelInstance* instance) {
  std::unique_ptr<InstanceState> state(new InstanceState(model, instance, InstanceDevice(instance)));
  const bool gpu = state->device_ != "cpu";
  state->gpu_ = gpu;
  const ModelSettings& s = model->settings();
  state->runtime_ = Runtime::Load(s, state->device_);
  InstanceState* self = state.get();
  if (gpu) {
    model->scheduler().AddLane(state->MeasureCosts());
  } else {
    // On a compute pool thread, as every CPU forward: a forward on this loading thread would give the process
    // an OpenMP team more than it has CPUs for, and libgomp then sleeps and wakes at every parallel region.
    state->pool_ = &SharedComputePool(s.threads);
    model->scheduler().AddLane(state->pool_->Call([self] { return self->MeasureCosts(); }));
  }
  if (gpu) {
    model->PreparePool(), model->AnswerPool();  // made before the first request needs them
    state->feeder_ = std::thread([self] { self->Feed(); });
    state->completer_ = std::thread([self] { self->Complete(); });
  } else {
    EmbedScheduler& scheduler = model->scheduler();
    state->turns_ = std::make_unique<PoolTurns>(*state->pool_, s.name, [self] { self->ServeQueued(); },
                                                [&scheduler] { return !scheduler.Idle(); });
    state->waker_ = scheduler.Subscribe([self] { self->turns_->Wake(); });
  }
  BERTSERVE_LOG(INFO, s.name + ": instance loaded on " + state->device_);
  return state;
}

CostModel InstanceState::MeasureCosts() {
  const ModelSettings& s = model_->settings();
  const std::vector<int64_t>& lengths = model_->length_buckets();
  const auto start = std::chrono::steady_clock::now();
  std::string table;
  auto time = [&](int64_t b, int64_t l, int calls) {
    const double seconds = runtime_->Warm(b, l, calls);
    table.append(" ").append(std::to_string(b)).append("x").append(std::to_string(l)).append(" ").append(Millis(seconds));
    return seconds;
  };
  std::optional<CostModel> costs;
  if (gpu_) {
    // Every (batch, length) bucket runs once before the model reports ready: captured and timed.
    batch_buckets_ = BatchBuckets(s.max_batch);
    Costs measured;
    for (int64_t b : batch_buckets_)
      for (int64_t l : lengths) measured[{b, l}] = time(b, l, 5);
    graph_costs_ = measured;
    costs.emplace(std::move(measured), batch_buckets_, lengths);
  } else {
    // Two shapes, extended linearly in padded tokens; completed batches correct it.
    const int64_t b2 = std::min<int64_t>(8, s.max_batch), l2 = std::min<int64_t>(64, s.max_seq);
    const double small = time(1, lengths.front(), 2), large = time(b2, l2, 2);
    costs.emplace(CostModel::Fit(1, lengths.front(), small, b2, l2, large, s.max_batch, lengths));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  BERTSERVE_LOG(INFO, s.name + ": forward costs measured in " + Millis(took) +
                          " ms; median ms per call (batch x length):" + table);
  return *costs;
}

InstanceState::~InstanceState() {
  EmbedScheduler& scheduler = model_->scheduler();
  stopping_ = true;
  if (gpu_) {
    scheduler.WakeAll();
    if (feeder_.joinable()) feeder_.join();
    if (completer_.joinable()) completer_.join();
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [this] { return answering_ == 0; });
  } else {
    scheduler.Unsubscribe(waker_);
    turns_->Wake();  // what is still queued is served before the instance goes
    turns_->Drain();
  }
}

void InstanceState::Execute(TRITONBACKEND_Request** requests, uint32_t count) noexcept {
  const ModelSettings& s = model_->settings();
  const uint64_t now = NowNs();
  std::vector<std::unique_ptr<Pending>> ready;  // read and valid, each counted as Preparing
  size_t texts = 0;
  for (uint32_t i = 0; i < count; ++i) {
    std::unique_ptr<Pending> p;
    bool held = false;     // a Pending holds requests[i]: it answers for it, even when an exception unwinds it
    bool counted = false;  // and it is counted as Preparing
    try {
      p = std::make_unique<Pending>();
      p->request = requests[i];
      held = true;
      p->arrived_ns = now;
      p->Read(s);
      if (warmup_left_ > 0) p->warmup = warmup_left_-- > 0;
      fault::At(p->fault_point, "execute");
      if (p->error) {
        p->Fail(*p->error, instance_, s, model_->metrics());
        continue;
      }
      model_->scheduler().Preparing();
      counted = true;
      texts += p->texts.size();
      ready.push_back(std::move(p));
    } catch (const std::exception& e) {  // e.g. out of memory: this request fails alone, the server stays up
      FailOne(requests[i], held ? p.get() : nullptr, held, e.what());
      if (counted && p != nullptr) model_->scheduler().Abandon();
    } catch (...) {
      FailOne(requests[i], held ? p.get() : nullptr, held, "execute failed");
      if (counted && p != nullptr) model_->scheduler().Abandon();
    }
  }
  Dispatch(ready, texts);
}

void InstanceState::FailOne(TRITONBACKEND_Request* request, Pending* p, bool held, const char* what) noexcept {
  const ModelSettings& s = model_->settings();
  try {
    BERTSERVE_LOG(ERROR, s.name + ": execute failed: " + what);
  } catch (...) {
  }
  if (p != nullptr) {
    p->Fail(Internal(what), instance_, s, model_->metrics());
  } else if (!held) {  // no Pending took it: answered here
    TRITONBACKEND_Response* response = nullptr;
    if (TRITONBACKEND_ResponseNew(&response, request) == nullptr) {
      ErrorPtr error(TRITONSERVER_ErrorNew(TRITONSERVER_ERROR_INTERNAL, what));
      ErrorPtr(TRITONBACKEND_ResponseSend(response, TRITONSERVER_RESPONSE_COMPLETE_FINAL, error.get()));
    }
    ErrorPtr(TRITONBACKEND_RequestRelease(request, TRITONSERVER_REQUEST_RELEASE_ALL));
  }
}

void InstanceState::Dispatch(std::vector<std::unique_ptr<Pending>>& held, size_t texts) noexcept {
  // CPU instances tokenize here: a second busy thread would take a core from the forward's OpenMP team.
  if (!gpu_ || model_->tokenizer() == nullptr || texts <= kInlineTexts) {
    for (auto& p : held) Prepare(std::move(p));
    return;
  }
  using Chunk = std::vector<std::unique_ptr<Pending>>;
  std::shared_ptr<Chunk> chunk;
  try {
    size_t chunk_texts = 0;
    for (auto& p : held) {
      if (chunk == nullptr) chunk = std::make_shared<Chunk>();
      chunk_texts += p->texts.size();
      chunk->push_back(std::move(p));
      if (chunk_texts < kPrepareChunk && &p != &held.back()) continue;
      model_->PreparePool().Post([this, chunk] {
        for (auto& q : *chunk) Prepare(std::move(q));
      });
      chunk = nullptr, chunk_texts = 0;
    }
  } catch (const std::exception& e) {  // no thread to be had: what was not handed on is prepared here
    BERTSERVE_LOG(WARN, model_->settings().name + ": preparing on execute's thread: " + e.what());
    if (chunk != nullptr) {
      for (auto& q : *chunk) Prepare(std::move(q));
    }
    for (auto& p : held) {
      if (p != nullptr) Prepare(std::move(p));
    }
  }
}

void InstanceState::Prepare(std::unique_ptr<Pending> p) noexcept {
  const ModelSettings& s = model_->settings();
  EmbedScheduler& scheduler = model_->scheduler();
  try {
    if (const tokenizer::Tokenizer* tokenizer = model_->tokenizer()) {
      const uint64_t start = NowNs();
      p->Tokenize(s, *tokenizer);
      model_->metrics().StageTime(Stage::kTokenize, Seconds(start, NowNs()));
      model_->metrics().Truncated(std::count(p->truncated.begin(), p->truncated.end(), uint8_t{1}));
    }
  } catch (const std::exception& e) {
    p->error = Internal(std::string("tokenizing failed: ") + e.what());
  }
  if (p->error) {
    p->Fail(*p->error, instance_, s, model_->metrics());
    scheduler.Abandon();  // after the answer: once no request is being prepared, a draining instance may go
    return;
  }
  scheduler.Submit(std::move(p), instance_);
}

void InstanceState::Launch(Flight& flight) {
  const ModelSettings& s = model_->settings();
  Flight* f = &flight;
  std::vector<ValidRequest> valid;
  CostModel& costs = model_->scheduler().costs();
  for (size_t i = 0; i < f->batch.size(); ++i) {
    Pending& p = *f->batch[i];
    valid.push_back({i, &p.batch, p.lengths});
    f->rows += p.rows();
    p.embedding.resize(static_cast<size_t>(p.rows() * s.hidden));
  }
  f->collated = Collate(valid, model_->length_buckets(), batch_buckets_, graph_costs_ ? &*graph_costs_ : nullptr);
  f->launched_ns = NowNs();
  for (const Group& g : f->collated.groups) {
    f->predicted_s += costs.Measured(g.batch, g.seq);
    try {
      f->passes.push_back(runtime_->Start(g.ids.data(), g.mask.data(), g.batch, g.seq));
    } catch (const std::exception& e) {  // one failed forward fails only the requests in it
      BERTSERVE_LOG(ERROR, s.name + ": forward failed for a batch of shape [" + std::to_string(g.batch) + ", " +
                               std::to_string(g.seq) + "]: " + e.what());
      f->passes.push_back(nullptr);
      for (const auto& [req, row] : g.rows) f->batch[req]->error = Internal(std::string("inference failed: ") + e.what());
    }
  }
}

void InstanceState::Land(Flight& f) {
  const ModelSettings& s = model_->settings();
  std::vector<float> out;
  for (size_t k = 0; k < f.collated.groups.size(); ++k) {
    const Group& g = f.collated.groups[k];
    if (f.passes[k] == nullptr) continue;
    out.resize(static_cast<size_t>(g.batch * s.hidden));
    try {
      f.passes[k]->Finish(out.data());
    } catch (const std::exception& e) {
      BERTSERVE_LOG(ERROR, s.name + ": forward failed: " + e.what());
      for (const auto& [req, row] : g.rows) f.batch[req]->error = Internal(std::string("inference failed: ") + e.what());
      continue;
    }
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const auto& [req, row] = g.rows[i];
      std::copy_n(out.data() + i * s.hidden, s.hidden, f.batch[req]->embedding.data() + row * s.hidden);
    }
  }
  f.passes.clear();
  f.landed_ns = NowNs();
}

void InstanceState::Respond(Flight& f, size_t begin, size_t end) noexcept {
  const ModelSettings& s = model_->settings();
  for (size_t i = begin; i < end; ++i) {
    Pending& p = *f.batch[i];
    try {
      p.Respond(s, model_->metrics());
    } catch (const std::exception& e) {
      BERTSERVE_LOG(ERROR, s.name + ": responding failed: " + e.what());
    }
    p.Finish(instance_, f.taken_ns, f.launched_ns, f.landed_ns, NowNs());
  }
}

void InstanceState::Close(Flight& f) noexcept {
  Metrics& m = model_->metrics();
  const uint64_t end = NowNs();
  if (f.collated.groups.empty()) return;
  ErrorPtr(TRITONBACKEND_ModelInstanceReportBatchStatistics(instance_, static_cast<uint64_t>(f.rows), f.taken_ns,
                                                            f.launched_ns, f.landed_ns, end));
  m.StageTime(Stage::kCollate, Seconds(f.taken_ns, f.launched_ns));
  m.StageTime(Stage::kInfer, Seconds(f.launched_ns, f.landed_ns));
  m.StageTime(Stage::kRespond, Seconds(f.landed_ns, end));
  m.Batch(f.rows, f.collated.padding_ratio(), f.collated.real_tokens);
  for (auto& p : f.batch) {
    if (!p->warmup) m.Request(Seconds(p->arrived_ns, end));
  }
}

void InstanceState::Answer(std::shared_ptr<Flight> f) {
  // In chunks across the answer threads: a frontend formats each response inside ResponseSend (HTTP's JSON
  // takes about a millisecond per 768 floats), and one thread for a whole batch would serialise them.
  const size_t n = f->batch.size(), chunks = std::min<size_t>(n, kAnswerChunks), per = (n + chunks - 1) / chunks;
  auto left = std::make_shared<std::atomic<size_t>>(chunks);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++answering_;
  }
  for (size_t begin = 0; begin < n; begin += per) {
    auto task = [this, f, left, begin, end = std::min(n, begin + per)] {
      Respond(*f, begin, end);
      if (left->fetch_sub(1) != 1) return;
      Close(*f);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        --answering_;
      }
      changed_.notify_all();
    };
    try {
      model_->AnswerPool().Post(task);
    } catch (const std::exception&) {
      task();  // no thread to be had: answer here
    }
  }
}

void InstanceState::Fail(Flight& f, const std::string& what) noexcept {
  BERTSERVE_LOG(ERROR, model_->settings().name + ": serving a batch failed: " + what);
  for (auto& p : f.batch) {
    if (!p->released) p->Fail(Internal(what), instance_, model_->settings(), model_->metrics());
  }
}

void InstanceState::Feed() {
  NameThisThread("bs-feed");
  EmbedScheduler& scheduler = model_->scheduler();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return in_flight_ < kBatchesInFlight; });
      // With a batch still on the device the next is taken just before the device is free: what arrives until
      // then joins it, rather than waiting behind a smaller batch taken now.
      const auto lead_ns = static_cast<uint64_t>((kTakeLeadS + 2 * launch_s_) * 1e9);
      take_after_ns_ = in_flight_ > 0 && device_free_ns_ > lead_ns ? device_free_ns_ - lead_ns : 0;
    }
    auto f = std::make_unique<Flight>();
    try {
      f->batch = scheduler.Take(instance_, /*block=*/true, stopping_, &f->work_s, &take_after_ns_);
    } catch (const std::exception& e) {  // what it took is unwound: each request answers as it goes
      BERTSERVE_LOG(ERROR, model_->settings().name + ": taking a batch failed: " + e.what());
      continue;
    }
    if (f->batch.empty()) {
      if (stopping_ && scheduler.Idle()) break;
      continue;  // what was taken had all expired
    }
    f->taken_ns = NowNs();
    try {
      Launch(*f);
    } catch (const std::exception& e) {
      scheduler.Done(f->work_s);
      Fail(*f, e.what());
      continue;
    }
    const uint64_t launched = NowNs();
    launch_s_ += 0.1 * (Seconds(f->taken_ns, launched) - launch_s_);
    const double predicted_s = f->predicted_s * scheduler.costs().correction();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      device_free_ns_ = std::max(device_free_ns_, launched) + static_cast<uint64_t>(predicted_s * 1e9);
      flights_.push_back(std::move(f));
      ++in_flight_;
    }
    changed_.notify_all();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    fed_ = true;
  }
  changed_.notify_all();
}

void InstanceState::Complete() {
  NameThisThread("bs-land");
  EmbedScheduler& scheduler = model_->scheduler();
  for (;;) {
    std::shared_ptr<Flight> f;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [this] { return !flights_.empty() || fed_; });
      if (flights_.empty()) return;
      f = std::move(flights_.front());
      flights_.pop_front();
    }
    try {
      Land(*f);
    } catch (const std::exception& e) {
      for (auto& p : f->batch) p->error = Internal(e.what());
    }
    // Service time: from when the device could start it (launch, or the previous batch's landing) to landing.
    const uint64_t began = std::max(f->launched_ns, last_landed_ns_);
    last_landed_ns_ = f->landed_ns;
    scheduler.costs().Observe(f->predicted_s, Seconds(began, f->landed_ns));
    scheduler.Done(f->work_s);
    bool idle = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      idle = --in_flight_ == 0;
      if (idle) take_after_ns_ = 0;  // the device is free: a waiting feeder takes what is queued now
    }
    changed_.notify_all();
    if (idle) scheduler.WakeAll();
    // A small batch with nothing on the device and nothing waiting is answered here, without a hop to an answer
    // thread: no other batch's landing (and its timing, which corrects the cost model) waits behind it.
    bool answer_here = idle && f->rows <= kInlineAnswerRows && scheduler.Idle();
    if (answer_here) {
      std::lock_guard<std::mutex> lock(mutex_);
      answer_here = in_flight_ == 0;
    }
    if (answer_here) {
      Respond(*f, 0, f->batch.size());
      Close(*f);
    } else {
      Answer(std::move(f));
    }
  }
}

void InstanceState::ServeQueued() noexcept {
  EmbedScheduler& scheduler = model_->scheduler();
  Flight f;
  bool taken = false, done = false;
  try {
    f.batch = scheduler.Take(instance_, /*block=*/false, stopping_, &f.work_s);
    taken = true;
    if (!f.batch.empty()) {
      f.taken_ns = NowNs();
      for (const auto& p : f.batch) fault::At(p->fault_point, "serve");
      Launch(f);
      Land(f);
      scheduler.costs().Observe(f.predicted_s, Seconds(f.launched_ns, f.landed_ns));
      scheduler.Done(f.work_s);
      done = true;
      Respond(f, 0, f.batch.size());
      Close(f);
    }
  } catch (const std::exception& e) {
    if (taken && !done) scheduler.Done(f.work_s);
    Fail(f, e.what());
  } catch (...) {
    if (taken && !done) scheduler.Done(f.work_s);
    Fail(f, "unknown exception");
  }
}

}  // namespace bertserve
