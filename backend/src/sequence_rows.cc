#include "sequence_rows.h"

#include <algorithm>

namespace bertserve {
namespace {

// "QUERY" for a first text shared by every row, else "TEXT element 3" (or "TEXT" for one row).
std::string FirstName(const RowTexts& t, size_t i) {
  if (t.firsts.size() == 1) return t.first_name;
  return std::string(t.first_name) + " element " + std::to_string(i);
}

std::string RowName(const RowTexts& t, size_t i) {
  if (t.seconds.empty()) return FirstName(t, i);
  return FirstName(t, i) + " and " + t.second_name + " element " + std::to_string(i);
}

}  // namespace

std::optional<RequestError> EncodeRows(const tokenizer::Tokenizer& tokenizer, const RowTexts& t, const RowOptions& o,
                                       std::vector<RowChunk>* chunks) {
  chunks->clear();
  const auto max_len = static_cast<size_t>(o.max_seq);
  const size_t n = t.rows();
  std::vector<int64_t> ids, types;
  for (size_t first = 0; first < n; first += static_cast<size_t>(o.max_rows)) {
    const size_t end = std::min(n, first + static_cast<size_t>(o.max_rows));
    std::vector<std::vector<int64_t>> row_ids, row_types;
    size_t width = 0;
    for (size_t i = first; i < end; ++i) {
      const std::string& a = t.firsts[t.firsts.size() == 1 ? 0 : i];
      bool cut = false;
      if (t.seconds.empty()) {
        cut = tokenizer.Encode(a, max_len, &ids);
        types.assign(ids.size(), 0);
      } else {
        const tokenizer::PairOutcome outcome = tokenizer.EncodePair(a, t.seconds[i], max_len, o.truncation, &ids, &types);
        if (outcome == tokenizer::PairOutcome::kFirstTooLong) {
          return RequestError{FailureReason::kTooLong, FirstName(t, i) + " fills the max length of " + std::to_string(o.max_seq) +
                                              " tokens on its own: truncation=only_second cannot cut " +
                                              t.second_name + " enough (use longest_first or a shorter " +
                                              t.first_name + ")"};
        }
        cut = outcome == tokenizer::PairOutcome::kTruncated;
      }
      if (cut && !o.truncate) {
        return RequestError{FailureReason::kTooLong, RowName(t, i) + (t.seconds.empty() ? " is" : " are") +
                                            " longer than the max length of " + std::to_string(o.max_seq) +
                                            " tokens"};
      }
      width = std::max(width, ids.size());
      row_ids.push_back(ids);
      row_types.push_back(types);
    }
    RowChunk c;
    c.first = first;
    c.rows = static_cast<int64_t>(end - first);
    c.seq = static_cast<int64_t>(width);
    c.ids.assign(row_ids.size() * width, kPadId);
    c.mask.assign(row_ids.size() * width, 0);
    c.types.assign(row_ids.size() * width, 0);
    for (size_t r = 0; r < row_ids.size(); ++r) {
      const auto at = static_cast<std::ptrdiff_t>(r * width);
      std::copy(row_ids[r].begin(), row_ids[r].end(), c.ids.begin() + at);
      std::copy(row_types[r].begin(), row_types[r].end(), c.types.begin() + at);
      std::fill_n(c.mask.begin() + at, row_ids[r].size(), 1);
    }
    chunks->push_back(std::move(c));
  }
  return std::nullopt;
}

}  // namespace bertserve
