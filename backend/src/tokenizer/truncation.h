// How a text pair is cut to fit max_len, as the Hugging Face `tokenizers` crate does it
// (`truncate_encodings`, right truncation, no stride). Pure arithmetic on the two contents' lengths.
#pragma once

#include <cstddef>
#include <optional>

namespace bertserve::tokenizer {

enum class PairTruncation {
  kLongestFirst,  // cut the longer of the two first; both to about half when each passes half the budget
  kOnlySecond,    // cut only the second; refused when the first alone fills the budget
};

// What each content keeps.
struct PairCut {
  size_t first = 0, second = 0;
  bool truncated = false;  // whether either was cut
};

// The lengths `first` and `second` (content ids, special tokens excluded) cut to `budget` (max_len less the pair
// template's special tokens). nullopt: kOnlySecond cannot fit, the first alone holds `budget` or more.
std::optional<PairCut> CutPair(size_t first, size_t second, size_t budget, PairTruncation strategy);

}  // namespace bertserve::tokenizer
