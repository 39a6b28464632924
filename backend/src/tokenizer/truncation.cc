#include "tokenizer/truncation.h"

#include <algorithm>
#include <utility>

namespace bertserve::tokenizer {

std::optional<PairCut> CutPair(size_t first, size_t second, size_t budget, PairTruncation strategy) {
  if (budget == 0) return PairCut{0, 0, first + second > 0};  // the crate empties both, whatever the strategy
  if (first + second <= budget) return PairCut{first, second, false};
  if (strategy == PairTruncation::kOnlySecond) {
    const size_t excess = first + second - budget;
    if (second <= excess) return std::nullopt;  // the crate's SequenceTooShort
    return PairCut{first, second - excess, true};
  }
  // longest_first: with n1 the shorter, keep n1 and give the longer the rest, unless n1 passes half the budget;
  // then the first gets budget / 2 and the second the other half (the odd token goes to the longer).
  size_t n1 = first, n2 = second;
  const bool swapped = n1 > n2;
  if (swapped) std::swap(n1, n2);
  n2 = n1 > budget ? n1 : std::max(n1, budget - n1);
  if (n1 + n2 > budget) {
    n1 = budget / 2;
    n2 = n1 + budget % 2;
  }
  if (swapped) std::swap(n1, n2);
  return PairCut{std::min(first, n1), std::min(second, n2), true};
}

}  // namespace bertserve::tokenizer
