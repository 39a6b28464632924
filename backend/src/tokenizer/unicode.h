// Unicode data and UTF-8 for the tokenizer: one record per code point from generated tables
// (backend/tools/unicode_tables.py says which Unicode versions they reproduce and why).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace bertserve::unicode {

enum Flag : uint8_t {
  kWhitespace = 1,  // White_Space (Rust char::is_whitespace)
  kPunct = 2,       // general category P* as of Unicode 8.0, or ASCII punctuation
  kControl = 4,     // Cc, Cf or Co as of Unicode 8.0
  kNonspacing = 8,  // Mn as of Unicode 8.0
};

struct CharRecord {
  uint8_t flags;
  uint8_t ccc;     // canonical combining class as of Unicode 9.0
  uint32_t nfd;    // offset of the NFD in the pool (0: the code point itself)
  uint32_t lower;  // offset of the full lowercase mapping in the pool (0: the code point itself)
};

// The record of a code point (cp < 0x110000).
const CharRecord& Lookup(char32_t cp);
// A mapping of the pool: its code points; `cp` itself when the offset is 0.
std::span<const uint32_t> Mapping(uint32_t offset, const char32_t& cp);
const char* Version();

// The byte offset of the first ill-formed sequence (where Python's strict decoder reports its error), or npos.
size_t FirstInvalid(std::string_view bytes);
// Decodes well-formed UTF-8 (FirstInvalid returned npos) and appends the code points.
void Decode(std::string_view bytes, std::u32string* out);
void AppendUtf8(char32_t cp, std::string* out);
// Python's str.isspace() (CPython 3.11), which decides whether a text is blank.
bool IsPythonSpace(char32_t cp);

}  // namespace bertserve::unicode
