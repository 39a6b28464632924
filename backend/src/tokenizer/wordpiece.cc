#include "tokenizer/wordpiece.h"

#include <algorithm>
#include <stdexcept>

namespace bertserve::tokenizer {

WordPiece::WordPiece(Vocab vocab, std::string unk_token, std::string prefix, size_t max_chars_per_word)
    : vocab_(std::move(vocab)), prefix_(std::move(prefix)), max_chars_(max_chars_per_word) {
  auto unk = vocab_.find(unk_token);
  if (unk == vocab_.end()) throw std::invalid_argument("the unknown token " + unk_token + " is not in the vocabulary");
  unk_id_ = unk->second;
  for (const auto& [token, _] : vocab_) {
    longest_ = std::max(longest_, token.size());
    if (token.starts_with(prefix_)) {
      longest_continuation_ = std::max(longest_continuation_, token.size() - prefix_.size());
    }
  }
}

void WordPiece::Tokenize(std::u32string_view word, std::vector<int64_t>* ids, std::string* scratch) const {
  if (word.size() > max_chars_) {
    ids->push_back(unk_id_);
    return;
  }
  std::string& bytes = *scratch;
  bytes.clear();
  std::vector<size_t> bounds{0};  // byte offset of each code point boundary
  for (char32_t c : word) {
    unicode::AppendUtf8(c, &bytes);
    bounds.push_back(bytes.size());
  }
  const size_t first = ids->size();
  std::string key;
  size_t start = 0;  // index into bounds
  while (start + 1 < bounds.size()) {
    size_t end = bounds.size() - 1;
    const size_t room = start > 0 ? longest_continuation_ : longest_;
    while (end > start && bounds[end] - bounds[start] > room) --end;
    int64_t id = -1;
    for (; end > start; --end) {
      std::string_view piece(bytes.data() + bounds[start], bounds[end] - bounds[start]);
      Vocab::const_iterator it;
      if (start > 0) {
        key.assign(prefix_).append(piece);
        it = vocab_.find(std::string_view(key));
      } else {
        it = vocab_.find(piece);
      }
      if (it != vocab_.end()) {
        id = it->second;
        break;
      }
    }
    if (id < 0) {
      ids->resize(first);
      ids->push_back(unk_id_);
      return;
    }
    ids->push_back(id);
    start = end;
  }
}

}  // namespace bertserve::tokenizer
