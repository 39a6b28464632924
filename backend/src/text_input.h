// One TEXT element checked as serving/python_backend/batching.py's decode_text checks it, with the same reasons and messages:
// over 64 KiB, not UTF-8 (naming the first bad byte as Python's strict decoder does), blank (Python's
// str.isspace()). Plain C++, no Triton types.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "batching.h"

namespace bertserve {

inline constexpr size_t kMaxTextBytes = 64 * 1024;

std::optional<RequestError> CheckText(std::string_view raw);

}  // namespace bertserve
