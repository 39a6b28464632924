#include "batching.h"

#include <algorithm>
#include <limits>
#include <sstream>

namespace bertserve {

const char* FailureName(FailureReason reason) {
  switch (reason) {
    case FailureReason::kTooLong:
      return "too_long";
    case FailureReason::kBadTokenId:
      return "bad_token_id";
    case FailureReason::kBadAttentionMask:
      return "bad_attention_mask";
    case FailureReason::kBadShape:
      return "bad_shape";
    case FailureReason::kQueueFull:
      return "queue_full";
    case FailureReason::kQueueTimeout:
      return "queue_timeout";
    case FailureReason::kInternal:
      return "internal";
    case FailureReason::kTextTooLarge:
      return "text_too_large";
    case FailureReason::kInvalidUtf8:
      return "invalid_utf8";
    case FailureReason::kEmptyText:
      return "empty_text";
    case FailureReason::kBadParameter:
      return "bad_parameter";
    case FailureReason::kBadOutput:
      return "bad_output";
  }
  return "internal";
}

RequestError::Kind RequestError::kind() const {
  switch (reason) {
    case FailureReason::kQueueFull:
    case FailureReason::kQueueTimeout:
      return Kind::kRefused;
    case FailureReason::kInternal:
      return Kind::kInternal;
    case FailureReason::kTooLong:
    case FailureReason::kBadTokenId:
    case FailureReason::kBadAttentionMask:
    case FailureReason::kBadShape:
    case FailureReason::kTextTooLarge:
    case FailureReason::kInvalidUtf8:
    case FailureReason::kEmptyText:
    case FailureReason::kBadParameter:
    case FailureReason::kBadOutput:
      break;
  }
  return Kind::kBadInput;
}
namespace {

std::vector<int64_t> Doubling(int64_t start, int64_t limit) {
  std::vector<int64_t> out;
  for (int64_t b = start; b < limit; b *= 2) out.push_back(b);
  out.push_back(limit);
  return out;
}

// A shape as Python prints a list ("[1, 3]") or a numpy shape ("(3,)", "(1, 3)").
std::string Format(const std::vector<int64_t>& shape, bool as_tuple) {
  std::ostringstream s;
  s << (as_tuple ? "(" : "[");
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  if (as_tuple && shape.size() == 1) s << ",";
  s << (as_tuple ? ")" : "]");
  return s.str();
}

RequestError Error(FailureReason reason, std::string message) { return {reason, std::move(message)}; }

}  // namespace

std::vector<int64_t> LengthBuckets(int64_t max_seq) {
  std::vector<int64_t> out;
  for (int64_t b = 16; b < max_seq; b *= 2) {
    out.push_back(b);
    if (b >= 32 && b + b / 2 < max_seq) out.push_back(b + b / 2);
  }
  out.push_back(max_seq);
  return out;
}
std::vector<int64_t> BatchBuckets(int64_t max_batch) { return Doubling(1, max_batch); }

int64_t BucketFor(int64_t value, const std::vector<int64_t>& buckets) {
  auto it = std::lower_bound(buckets.begin(), buckets.end(), value);
  return it == buckets.end() ? value : *it;
}

std::optional<RequestError> Validate(
    const TokenBatch& batch, int64_t vocab_size, int64_t max_seq, std::vector<int64_t>* lengths) {
  const auto& shape = batch.ids_shape;
  if (shape.size() != 2 || batch.mask_shape.size() != 2) {
    return Error(FailureReason::kBadShape, "input_ids and attention_mask must be [batch, seq], got " + Format(shape, true));
  }
  if (shape != batch.mask_shape) {
    return Error(FailureReason::kBadShape, "attention_mask shape " + Format(batch.mask_shape, false) + " differs from input_ids shape " +
                         Format(shape, false));
  }
  const int64_t rows = shape[0], seq = shape[1];
  if (rows == 0 || seq == 0) {
    return Error(FailureReason::kBadShape, "input_ids " + Format(shape, false) + " is empty: a request needs a row of tokens");
  }
  if (seq > max_seq) {
    return Error(FailureReason::kTooLong, "sequence of " + std::to_string(seq) + " tokens is longer than the max length " +
                        std::to_string(max_seq));
  }
  for (int64_t i = 0; i < rows * seq; ++i) {
    const int64_t id = batch.ids[i];
    if (id < 0 || id >= vocab_size) {
      return Error(FailureReason::kBadTokenId, "input_ids[" + std::to_string(i / seq) + "][" + std::to_string(i % seq) +
                              "] = " + std::to_string(id) + " is outside the vocabulary [0, " +
                              std::to_string(vocab_size) + ")");
    }
  }
  for (int64_t i = 0; i < rows * seq; ++i) {
    if (batch.mask[i] & ~int64_t{1}) return Error(FailureReason::kBadAttentionMask, "attention_mask values must be 0 or 1");
  }
  lengths->assign(rows, 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = seq; c > 0; --c) {
      if (batch.mask[r * seq + c - 1]) {
        (*lengths)[r] = c;
        break;
      }
    }
    if ((*lengths)[r] == 0) {
      return Error(FailureReason::kBadAttentionMask, "attention_mask row " + std::to_string(r) + " selects no token");
    }
  }
  return std::nullopt;
}

double Collated::padding_ratio() const {
  const int64_t total = real_tokens + padded_tokens;
  return total ? static_cast<double>(padded_tokens) / static_cast<double>(total) : 0.0;
}

std::vector<std::vector<int64_t>> MergeBuckets(
    const std::map<int64_t, int64_t>& rows, const std::vector<int64_t>& batch_buckets, const Costs& costs) {
  std::vector<int64_t> lens;
  for (const auto& [len, _] : rows) lens.push_back(len);
  // best[j]: the cheapest partition of the first j buckets and its cost.
  std::vector<std::pair<double, std::vector<std::vector<int64_t>>>> best{{0.0, {}}};
  for (size_t j = 1; j <= lens.size(); ++j) {
    double best_cost = std::numeric_limits<double>::infinity();
    size_t best_i = j - 1;
    int64_t count = 0;
    for (size_t i = j; i-- > 0;) {  // the run lens[i:j], shortest first; on a tie the shorter run wins
      count += rows.at(lens[i]);
      if (count > batch_buckets.back()) break;  // longer runs only hold more rows
      auto cost = costs.find({BucketFor(count, batch_buckets), lens[j - 1]});
      const double total = best[i].first + (cost == costs.end() ? 0.0 : cost->second);
      if (total < best_cost) best_cost = total, best_i = i;
    }
    auto partition = best[best_i].second;
    partition.emplace_back(lens.begin() + static_cast<std::ptrdiff_t>(best_i), lens.begin() + static_cast<std::ptrdiff_t>(j));
    best.emplace_back(best_cost, std::move(partition));
  }
  return best.back().second;
}

Collated Collate(
    const std::vector<ValidRequest>& requests, const std::vector<int64_t>& len_buckets,
    const std::vector<int64_t>& batch_buckets, const Costs* costs) {
  struct Member {
    size_t request;  // position in `requests`
    int64_t row, length;
  };
  std::map<int64_t, std::vector<Member>> by_bucket;
  for (size_t k = 0; k < requests.size(); ++k) {
    const auto& lengths = requests[k].lengths;
    for (size_t row = 0; row < lengths.size(); ++row) {
      by_bucket[BucketFor(lengths[row], len_buckets)].push_back({k, static_cast<int64_t>(row), lengths[row]});
    }
  }
  std::vector<std::vector<int64_t>> runs;
  if (costs != nullptr && !batch_buckets.empty() && by_bucket.size() > 1) {
    std::map<int64_t, int64_t> rows;
    for (const auto& [len, members] : by_bucket) rows[len] = static_cast<int64_t>(members.size());
    runs = MergeBuckets(rows, batch_buckets, *costs);
  } else {
    for (const auto& [len, _] : by_bucket) runs.push_back({len});
  }
  Collated out;
  int64_t total = 0;
  for (const auto& run : runs) {
    Group g;
    g.seq = run.back();
    std::vector<Member> members;
    for (int64_t len : run) members.insert(members.end(), by_bucket[len].begin(), by_bucket[len].end());
    const auto n = static_cast<int64_t>(members.size());
    g.batch = batch_buckets.empty() ? n : BucketFor(n, batch_buckets);
    g.ids.assign(g.batch * g.seq, kPadId);
    g.mask.assign(g.batch * g.seq, 0);
    for (int64_t i = 0; i < n; ++i) {
      const Member& m = members[i];
      const TokenBatch& src = *requests[m.request].batch;
      const int64_t offset = m.row * src.seq();
      std::copy_n(src.ids.begin() + offset, m.length, g.ids.begin() + i * g.seq);
      std::copy_n(src.mask.begin() + offset, m.length, g.mask.begin() + i * g.seq);
      out.real_tokens += std::count_if(src.mask.begin() + offset, src.mask.begin() + offset + m.length,
                                       [](int64_t v) { return v != 0; });
      g.rows.emplace_back(requests[m.request].index, m.row);
    }
    for (int64_t i = n; i < g.batch; ++i) g.mask[i * g.seq] = 1;  // batch padding attends to one token
    total += g.batch * g.seq;
    out.groups.push_back(std::move(g));
  }
  out.padded_tokens = total - out.real_tokens;
  return out;
}

}  // namespace bertserve
