#include "common/resp/reply.h"

#include <utility>

#include "common/resp/protocol.h"

namespace kvtier::resp {
namespace {

// Rendering stops once `out` holds `limit` bytes (the caller marks the cut): an error message
// quotes the start of a reply that may hold hundreds of MiB.
void AppendQuoted(std::string_view bytes, std::string* out, size_t limit) {
  out->push_back('"');
  for (char c : bytes) {
    if (out->size() >= limit) return;
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else {
      out->append(DescribeByte(c));
    }
  }
  out->push_back('"');
}

void AppendDebug(const Reply& reply, std::string* out, size_t limit) {
  if (out->size() >= limit) return;
  switch (reply.type) {
    case ReplyType::kSimpleString:
    case ReplyType::kBulkString:
      AppendQuoted(reply.str, out, limit);
      return;
    case ReplyType::kError:
      out->append("(error) ").append(reply.str);
      return;
    case ReplyType::kInteger:
      out->append(std::to_string(reply.integer));
      return;
    case ReplyType::kNull:
      out->append("nil");
      return;
    case ReplyType::kDouble:
      out->append(reply.str);
      return;
    case ReplyType::kBoolean:
      out->append(reply.integer != 0 ? "true" : "false");
      return;
    case ReplyType::kBigNumber:
      out->append("(big) ").append(reply.str);
      return;
    case ReplyType::kVerbatim:
      out->append(reply.format).push_back(':');
      AppendQuoted(reply.str, out, limit);
      return;
    case ReplyType::kMap:
      out->push_back('{');
      for (size_t i = 0; i < reply.elements.size(); ++i) {
        if (i > 0) out->append(i % 2 == 1 ? ": " : ", ");
        AppendDebug(reply.elements[i], out, limit);
      }
      out->push_back('}');
      return;
    case ReplyType::kArray:
    case ReplyType::kSet:
    case ReplyType::kPush:
      if (reply.type == ReplyType::kSet) out->push_back('~');
      if (reply.type == ReplyType::kPush) out->push_back('>');
      out->push_back('[');
      for (size_t i = 0; i < reply.elements.size(); ++i) {
        if (i > 0) out->append(", ");
        AppendDebug(reply.elements[i], out, limit);
      }
      out->push_back(']');
      return;
  }
}

}  // namespace

std::string_view ReplyTypeName(ReplyType type) {
  switch (type) {
    case ReplyType::kSimpleString:
      return "simple-string";
    case ReplyType::kError:
      return "error";
    case ReplyType::kInteger:
      return "integer";
    case ReplyType::kBulkString:
      return "bulk-string";
    case ReplyType::kNull:
      return "null";
    case ReplyType::kArray:
      return "array";
    case ReplyType::kMap:
      return "map";
    case ReplyType::kSet:
      return "set";
    case ReplyType::kPush:
      return "push";
    case ReplyType::kDouble:
      return "double";
    case ReplyType::kBoolean:
      return "boolean";
    case ReplyType::kBigNumber:
      return "big-number";
    case ReplyType::kVerbatim:
      return "verbatim";
  }
  return "unknown";
}

std::string Reply::DebugString() const {
  std::string out;
  AppendDebug(*this, &out, std::string::npos);
  return out;
}

std::string Reply::DebugString(size_t max_bytes) const {
  std::string out;
  AppendDebug(*this, &out, max_bytes);
  if (out.size() >= max_bytes) {
    out.resize(max_bytes);
    out += "...";
  }
  return out;
}

Reply Reply::Simple(std::string text) {
  Reply r;
  r.type = ReplyType::kSimpleString;
  r.str = std::move(text);
  return r;
}

Reply Reply::Error(std::string text) {
  Reply r;
  r.type = ReplyType::kError;
  r.str = std::move(text);
  return r;
}

Reply Reply::Integer(int64_t value) {
  Reply r;
  r.type = ReplyType::kInteger;
  r.integer = value;
  return r;
}

Reply Reply::Bulk(std::string bytes) {
  Reply r;
  r.type = ReplyType::kBulkString;
  r.str = std::move(bytes);
  return r;
}

Reply Reply::Null() { return Reply{}; }

Reply Reply::Aggregate(ReplyType type, std::vector<Reply> elements) {
  Reply r;
  r.type = type;
  r.elements = std::move(elements);
  return r;
}

}  // namespace kvtier::resp
