// UTF-8 validity as RFC 3629 defines it, for text that crosses into JSON or Prometheus labels.
//
// Names that clients send (a namespace's model id, revision, layout tag) end up as JSON strings
// in /stats and as label values in /metrics; both formats require valid UTF-8, so such names are
// checked where they enter, and text that predates the check is repaired where it leaves.
//
// Pure functions; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace kvtier {

// True when `text` is well-formed UTF-8: no overlong form, no UTF-16 surrogate (U+D800..U+DFFF),
// nothing above U+10FFFF and no sequence cut short. The empty string is valid.
bool IsValidUtf8(std::string_view text);

// `text` with each maximal ill-formed subsequence replaced by U+FFFD, as the Unicode standard
// recommends (and as browsers decode); valid text comes back unchanged.
std::string ReplaceInvalidUtf8(std::string_view text);

}  // namespace kvtier
