// The grammar lowered for the recognizer: rules as alternatives of flat element sequences over byte sets (UTF-8
// already expanded) and rule references, each alternative ended by kEnd. A position is an index into `elements`.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "structured/grammar.h"

namespace llmserve::structured {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool operator==(const ByteSet&) const = default;
};

struct Program {
  enum Kind : uint8_t { kEnd, kByteSet, kRuleRef };
  struct Element {
    Kind kind;
    int32_t value;  // kByteSet: index into byte_sets; kRuleRef: rule index; kEnd: the rule it ends
  };
  std::vector<Element> elements;
  std::vector<std::vector<int32_t>> rule_alternatives;  // rule -> start position of each alternative
  std::vector<std::string> rule_names;
  std::vector<ByteSet> byte_sets;
  int32_t root = -1;
};

// Lowers a validated grammar. InvalidArgument (a request error, not server load) if it would exceed max_elements
// (huge or nested {m,n} counts).
StatusOr<Program> lower_grammar(const Grammar& grammar, int64_t max_elements = 4'000'000);

// Code point ranges -> the UTF-8 byte-range sequences that encode exactly those code points (surrogates excluded).
// Each sequence is a list of inclusive byte ranges, one per byte.
std::vector<std::vector<std::pair<uint8_t, uint8_t>>> utf8_sequences(std::vector<std::pair<uint32_t, uint32_t>> ranges,
                                                                     bool negated);

}  // namespace llmserve::structured
