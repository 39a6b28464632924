// The BERT pre-tokenizer and the WordPiece model, as tokenizers/src/pre_tokenizers/bert.rs and
// models/wordpiece/mod.rs apply them: words split on whitespace (dropped) and punctuation (one word each), then
// greedy longest-match subwords with a continuation prefix, the unknown token for a word with no split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/unicode.h"

namespace bertserve::tokenizer {

// Calls word(view) for each pre-token of normalized text, in order.
template <typename Word>
void PreTokenize(std::u32string_view text, Word&& word) {
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const uint8_t flags = unicode::Lookup(text[i]).flags;
    if (!(flags & (unicode::kWhitespace | unicode::kPunct))) continue;
    if (i > start) word(text.substr(start, i - start));
    if (!(flags & unicode::kWhitespace)) word(text.substr(i, 1));
    start = i + 1;
  }
  if (text.size() > start) word(text.substr(start));
}

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

class WordPiece {
 public:
  // Throws std::invalid_argument when the unknown token is not in the vocabulary.
  WordPiece(Vocab vocab, std::string unk_token, std::string prefix, size_t max_chars_per_word);

  // Appends the ids of one word; `scratch` is working memory the caller may reuse.
  void Tokenize(std::u32string_view word, std::vector<int64_t>* ids, std::string* scratch) const;

  const Vocab& vocab() const { return vocab_; }

 private:
  Vocab vocab_;
  int64_t unk_id_;
  std::string prefix_;
  size_t max_chars_;
  size_t longest_ = 0;               // the longest vocabulary entry in bytes: no first piece can be longer
  size_t longest_continuation_ = 0;  // the longest entry after the prefix, of those that start with it
};

}  // namespace bertserve::tokenizer
