#include "rerank_pairs.h"

#include <algorithm>

namespace bertserve {

std::optional<RequestError> EncodePairs(const tokenizer::Tokenizer& tokenizer, const std::string& query,
                                        const std::vector<std::string>& documents, const PairOptions& o,
                                        std::vector<PairChunk>* chunks) {
  chunks->clear();
  const auto max_len = static_cast<size_t>(o.max_seq);
  std::vector<int64_t> ids, types;
  for (size_t first = 0; first < documents.size(); first += static_cast<size_t>(o.max_rows)) {
    const size_t end = std::min(documents.size(), first + static_cast<size_t>(o.max_rows));
    std::vector<std::vector<int64_t>> row_ids, row_types;
    size_t width = 0;
    for (size_t i = first; i < end; ++i) {
      const tokenizer::PairOutcome outcome = tokenizer.EncodePair(query, documents[i], max_len, o.truncation, &ids, &types);
      if (outcome == tokenizer::PairOutcome::kFirstTooLong) {
        return RequestError{"too_long", "QUERY fills the max length of " + std::to_string(o.max_seq) +
                                            " tokens on its own: truncation=only_second cannot cut the document " +
                                            "enough (use longest_first or a shorter query)"};
      }
      if (outcome == tokenizer::PairOutcome::kTruncated && !o.truncate) {
        return RequestError{"too_long", "QUERY and DOCUMENTS element " + std::to_string(i) +
                                            " are longer than the max length of " + std::to_string(o.max_seq) +
                                            " tokens"};
      }
      width = std::max(width, ids.size());
      row_ids.push_back(ids);
      row_types.push_back(types);
    }
    PairChunk c;
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
