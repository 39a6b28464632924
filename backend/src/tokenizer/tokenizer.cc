#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "tokenizer/unicode.h"

namespace bertserve::tokenizer {
namespace {

using nlohmann::json;

std::invalid_argument Unsupported(const std::string& what) {
  return std::invalid_argument("the native tokenizer cannot reproduce this tokenizer.json: " + what);
}

std::string TypeOf(const json& j) {
  if (j.is_null()) return "null";
  auto t = j.find("type");
  return t != j.end() && t->is_string() ? t->get<std::string>() : "?";
}

NormalizerSettings ReadNormalizer(const json& n) {
  if (TypeOf(n) != "BertNormalizer") throw Unsupported("normalizer " + TypeOf(n) + " (only BertNormalizer)");
  NormalizerSettings s;
  s.clean_text = n.value("clean_text", true);
  s.handle_chinese_chars = n.value("handle_chinese_chars", true);
  if (n.contains("strip_accents") && !n["strip_accents"].is_null()) s.strip_accents = n["strip_accents"].get<bool>();
  s.lowercase = n.value("lowercase", true);
  return s;
}

int64_t SpecialId(const json& specials, const std::string& name) {
  auto it = specials.find(name);
  if (it == specials.end() || !(*it)["ids"].is_array() || (*it)["ids"].size() != 1) {
    throw Unsupported("special token " + name + " must have exactly one id");
  }
  return (*it)["ids"][0].get<int64_t>();
}

// The ids the post-processor puts before and after a single sequence.
void ReadPostProcessor(const json& p, std::vector<int64_t>* prefix, std::vector<int64_t>* suffix) {
  const std::string type = TypeOf(p);
  if (type == "null") return;
  if (type == "BertProcessing") {
    prefix->push_back(p.at("cls").at(1).get<int64_t>());
    suffix->push_back(p.at("sep").at(1).get<int64_t>());
    return;
  }
  if (type != "TemplateProcessing") throw Unsupported("post-processor " + type);
  bool seen = false;
  for (const json& piece : p.at("single")) {
    if (piece.contains("Sequence")) {
      if (seen || piece["Sequence"].value("id", "") != "A") throw Unsupported("a single template other than one $A");
      seen = true;
    } else if (piece.contains("SpecialToken")) {
      (seen ? suffix : prefix)->push_back(SpecialId(p.at("special_tokens"), piece["SpecialToken"].at("id")));
    } else {
      throw Unsupported("a template piece other than a special token or the sequence");
    }
  }
  if (!seen) throw Unsupported("a single template without its sequence");
}

// The pair template; throws Unsupported for one that is not special tokens around $A then $B.
PairTemplate ReadPairTemplate(const json& p) {
  PairTemplate t;
  const std::string type = TypeOf(p);
  if (type == "BertProcessing") {  // [CLS] A [SEP] B [SEP], the second sequence and its [SEP] of type 1
    const int64_t cls = p.at("cls").at(1).get<int64_t>(), sep = p.at("sep").at(1).get<int64_t>();
    t.ids[0] = {cls};
    t.types[0] = {0};
    t.ids[1] = {sep};
    t.types[1] = {0};
    t.ids[2] = {sep};
    t.types[2] = {1};
    return t;
  }
  if (type != "TemplateProcessing") throw Unsupported("pairs with post-processor " + type);
  size_t segment = 0;  // 0: before $A, 1: between, 2: after $B
  for (const json& piece : p.at("pair")) {
    if (piece.contains("Sequence")) {
      const std::string id = piece["Sequence"].value("id", "");
      if (id != (segment == 0 ? "A" : "B")) throw Unsupported("a pair template other than $A then $B");
      (segment == 0 ? t.type_a : t.type_b) = piece["Sequence"].value("type_id", int64_t{0});
      ++segment;
    } else if (piece.contains("SpecialToken")) {
      t.ids[segment].push_back(SpecialId(p.at("special_tokens"), piece["SpecialToken"].at("id")));
      t.types[segment].push_back(piece["SpecialToken"].value("type_id", int64_t{0}));
    } else {
      throw Unsupported("a pair template piece other than a special token or a sequence");
    }
  }
  if (segment != 2) throw Unsupported("a pair template without both sequences");
  return t;
}

// Where a chunk of raw text may end: before a space or an ASCII punctuation mark. Either normalizes to
// itself under every setting (ASCII, combining class 0, neither removed nor decomposed) and ends a
// pre-token, so chunks cut there tokenize to what the whole text does.
bool IsChunkBoundary(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u == ' ' || (u < 0x80 && (unicode::Lookup(u).flags & unicode::kPunct) != 0);
}

// Raw bytes per chunk before the next boundary; a chunk holds at most a few hundred tokens.
constexpr size_t kChunkBytes = 1024;

}  // namespace

Tokenizer::Tokenizer(WordPiece model, NormalizerSettings normalizer, std::vector<AddedToken> added,
                     std::vector<int64_t> prefix, std::vector<int64_t> suffix, PairTemplate pair,
                     std::string pair_unsupported)
    : model_(std::move(model)),
      normalizer_(normalizer),
      added_(std::move(added)),
      prefix_(std::move(prefix)),
      suffix_(std::move(suffix)),
      pair_(std::move(pair)),
      pair_unsupported_(std::move(pair_unsupported)) {}

std::unique_ptr<Tokenizer> Tokenizer::FromJson(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("tokenizer.json is not valid JSON: ") + e.what());
  }
  try {
    const json& m = j.at("model");
    if (TypeOf(m) != "WordPiece") throw Unsupported("model " + TypeOf(m) + " (only WordPiece)");
    if (TypeOf(j.value("pre_tokenizer", json())) != "BertPreTokenizer") {
      throw Unsupported("pre-tokenizer " + TypeOf(j.value("pre_tokenizer", json())) + " (only BertPreTokenizer)");
    }
    NormalizerSettings normalizer = ReadNormalizer(j.value("normalizer", json()));
    std::vector<int64_t> prefix, suffix;
    ReadPostProcessor(j.value("post_processor", json()), &prefix, &suffix);
    PairTemplate pair;
    std::string pair_unsupported;
    try {
      pair = ReadPairTemplate(j.value("post_processor", json()));
    } catch (const std::invalid_argument& e) {
      pair_unsupported = e.what();
    }
    const json& trunc = j.value("truncation", json());
    if (!trunc.is_null() && trunc.value("direction", "Right") != "Right") throw Unsupported("left truncation");
    std::vector<AddedToken> added;
    for (const json& a : j.value("added_tokens", json::array())) {
      if (a.value("normalized", false) || a.value("lstrip", false) || a.value("rstrip", false) ||
          a.value("single_word", false)) {
        throw Unsupported("added token " + a.value("content", "") + " is normalized, stripped or single-word");
      }
      if (a.at("content").get<std::string>().empty()) throw Unsupported("an empty added token");
      added.push_back({a.at("content").get<std::string>(), a.at("id").get<int64_t>()});
    }
    Vocab vocab;
    for (const auto& [token, id] : m.at("vocab").items()) vocab.emplace(token, id.get<int64_t>());
    WordPiece model(std::move(vocab), m.value("unk_token", "[UNK]"), m.value("continuing_subword_prefix", "##"),
                    m.value("max_input_chars_per_word", size_t{100}));
    return std::unique_ptr<Tokenizer>(
        new Tokenizer(std::move(model), normalizer, std::move(added), std::move(prefix), std::move(suffix),
                      std::move(pair), std::move(pair_unsupported)));
  } catch (const json::exception& e) {
    throw std::invalid_argument(std::string("tokenizer.json: ") + e.what());
  }
}

void Tokenizer::EncodeChunk(std::string_view text, size_t limit, std::vector<int64_t>* ids) const {
  thread_local std::u32string raw, normalized, scratch;
  thread_local std::string bytes;
  raw.clear();
  unicode::Decode(text, &raw);
  Normalize(normalizer_, raw, &normalized, &scratch);
  PreTokenize(normalized, [&](std::u32string_view word) {
    if (ids->size() < limit) model_.Tokenize(word, ids, &bytes);
  });
}

void Tokenizer::EncodeSegment(std::string_view text, size_t limit, std::vector<int64_t>* ids) const {
  size_t start = 0;
  while (start < text.size() && ids->size() < limit) {
    size_t end = std::min(text.size(), start + kChunkBytes);
    while (end < text.size() && !IsChunkBoundary(text[end])) ++end;  // ASCII bytes never sit inside a sequence
    EncodeChunk(text.substr(start, end - start), limit, ids);
    start = end;
  }
}

std::pair<int64_t, int64_t> Tokenizer::id_range() const {
  int64_t low = INT64_MAX, high = INT64_MIN;
  auto see = [&](int64_t id) { low = std::min(low, id), high = std::max(high, id); };
  for (const auto& [token, id] : model_.vocab()) see(id);
  for (const AddedToken& a : added_) see(a.id);
  for (int64_t id : prefix_) see(id);
  for (int64_t id : suffix_) see(id);
  for (const auto& part : pair_.ids) {
    for (int64_t id : part) see(id);
  }
  return {low, high};
}

void Tokenizer::EncodeContent(std::string_view text, size_t limit, std::vector<int64_t>* ids) const {
  // Added tokens split the raw text, leftmost then longest; next[k]: where added token k occurs next.
  std::vector<size_t> next(added_.size());
  for (size_t k = 0; k < added_.size(); ++k) next[k] = text.find(added_[k].content);
  size_t segment = 0;
  while (segment < text.size() && ids->size() < limit) {
    const AddedToken* best = nullptr;
    size_t at = text.size();
    for (size_t k = 0; k < added_.size(); ++k) {
      if (next[k] < segment) next[k] = text.find(added_[k].content, segment);
      if (next[k] < at || (next[k] == at && best && added_[k].content.size() > best->content.size())) {
        best = &added_[k];
        at = next[k];
      }
    }
    EncodeSegment(text.substr(segment, at - segment), limit, ids);
    if (best == nullptr) break;
    if (ids->size() < limit) ids->push_back(best->id);
    segment = at + best->content.size();
  }
}

bool Tokenizer::Encode(std::string_view text, size_t max_len, std::vector<int64_t>* ids) const {
  ids->assign(prefix_.begin(), prefix_.end());
  const size_t budget = max_len > special_count() ? max_len - special_count() : 0;
  EncodeContent(text, prefix_.size() + budget + 1, ids);  // one id past the budget says the text was cut
  const bool truncated = ids->size() - prefix_.size() > budget;
  if (truncated) ids->resize(prefix_.size() + budget);
  ids->insert(ids->end(), suffix_.begin(), suffix_.end());
  return truncated;
}

PairOutcome Tokenizer::EncodePair(std::string_view first, std::string_view second, size_t max_len,
                                  PairTruncation strategy, std::vector<int64_t>* ids,
                                  std::vector<int64_t>* type_ids) const {
  if (!pair_unsupported_.empty()) throw std::logic_error(pair_unsupported_);
  thread_local std::vector<int64_t> a, b;
  const size_t budget = max_len > pair_.special_count() ? max_len - pair_.special_count() : 0;
  a.clear();
  b.clear();
  EncodeContent(first, budget + 1, &a);
  EncodeContent(second, budget + 1, &b);
  if (a.size() > budget && b.size() > budget && budget % 2 == 1 && strategy == PairTruncation::kLongestFirst) {
    a.clear();  // which is longer decides who keeps the odd token
    b.clear();
    EncodeContent(first, SIZE_MAX, &a);
    EncodeContent(second, SIZE_MAX, &b);
  }
  const std::optional<PairCut> cut = CutPair(a.size(), b.size(), budget, strategy);
  if (!cut) return PairOutcome::kFirstTooLong;
  ids->clear();
  type_ids->clear();
  auto put = [&](const int64_t* from, size_t n, const int64_t* types, int64_t type) {
    ids->insert(ids->end(), from, from + n);
    if (types != nullptr) type_ids->insert(type_ids->end(), types, types + n);
    else type_ids->insert(type_ids->end(), n, type);
  };
  put(pair_.ids[0].data(), pair_.ids[0].size(), pair_.types[0].data(), 0);
  put(a.data(), cut->first, nullptr, pair_.type_a);
  put(pair_.ids[1].data(), pair_.ids[1].size(), pair_.types[1].data(), 0);
  put(b.data(), cut->second, nullptr, pair_.type_b);
  put(pair_.ids[2].data(), pair_.ids[2].size(), pair_.types[2].data(), 0);
  return cut->truncated ? PairOutcome::kTruncated : PairOutcome::kKept;
}

}  // namespace bertserve::tokenizer
