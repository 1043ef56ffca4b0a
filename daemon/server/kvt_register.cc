// KVT.REGISTER: a namespace descriptor from field/value pairs, validated and hashed to its id.
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "daemon/server/commands.h"
#include "daemon/server/kvt_args.h"
#include "daemon/server/wire.h"
#include "daemon/store/store.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::server {
namespace {

using hashing::NamespaceDescriptor;

// A wire field and the descriptor member it sets (exactly one of `text` and `number`). `internal`
// is the member's name as hashing::Validate spells it in its messages, so errors can be reported
// under the wire name the client sent.
struct Field {
  std::string_view wire;
  std::string_view internal;
  std::string NamespaceDescriptor::*text;
  uint32_t NamespaceDescriptor::*number;
};

constexpr Field kFields[] = {
    {"model", "model_id", &NamespaceDescriptor::model_id, nullptr},
    {"revision", "model_revision", &NamespaceDescriptor::model_revision, nullptr},
    {"dtype", "kv_dtype", &NamespaceDescriptor::kv_dtype, nullptr},
    {"layers", "num_layers", nullptr, &NamespaceDescriptor::num_layers},
    {"kv_heads", "num_kv_heads", nullptr, &NamespaceDescriptor::num_kv_heads},
    {"head_dim", "head_dim", nullptr, &NamespaceDescriptor::head_dim},
    {"block_tokens", "tokens_per_block", nullptr, &NamespaceDescriptor::tokens_per_block},
    {"layout", "layout_tag", &NamespaceDescriptor::layout_tag, nullptr},
    {"tp_rank", "tp_rank", nullptr, &NamespaceDescriptor::tp_rank},
    {"tp_size", "tp_size", nullptr, &NamespaceDescriptor::tp_size},
    {"scheme", "hash_scheme_version", nullptr, &NamespaceDescriptor::hash_scheme_version},
    {"salt", "tenant_salt", &NamespaceDescriptor::tenant_salt, nullptr},
};
constexpr std::string_view kRequired[] = {"model", "dtype", "block_tokens", "layout"};
constexpr std::string_view kBlockBytes = "block_bytes";

struct Parsed {
  NamespaceDescriptor desc;
  uint64_t block_bytes = 0;  // 0: derived from the descriptor
};

const Field* FindField(std::string_view name) {
  for (const Field& f : kFields) {
    if (resp::EqualsIgnoreCase(f.wire, name)) return &f;
  }
  return nullptr;
}

Status Invalid(std::string_view field, std::string_view why) {
  return InvalidArgument(std::string(field) + ": " + std::string(why));
}

Status SetField(Parsed& out, std::string_view name, const std::string& value) {
  if (resp::EqualsIgnoreCase(name, kBlockBytes)) {
    std::optional<uint64_t> n = ParseUint64(value);
    if (!n || *n == 0) return Invalid(kBlockBytes, "must be a positive integer");
    out.block_bytes = *n;
    return Status::Ok();
  }
  const Field* f = FindField(name);
  if (f == nullptr) return Invalid(name.substr(0, 64), "unknown field");
  if (f->text != nullptr) {
    out.desc.*(f->text) = value;
    return Status::Ok();
  }
  std::optional<uint64_t> n = ParseUint64(value);
  if (!n || *n > std::numeric_limits<uint32_t>::max()) {
    return Invalid(f->wire, "not an unsigned 32-bit integer");
  }
  out.desc.*(f->number) = static_cast<uint32_t>(*n);
  return Status::Ok();
}

// Rewrites "num_layers: must be ..." from hashing::Validate as "layers: must be ...".
Status ToWireNames(const Status& st) {
  for (const Field& f : kFields) {
    const std::string prefix = std::string(f.internal) + ":";
    if (st.message().starts_with(prefix)) {
      return InvalidArgument(std::string(f.wire) + st.message().substr(f.internal.size()));
    }
  }
  return st;
}

Result<Parsed> ParseFields(const resp::Command& cmd, size_t first) {
  Parsed out;
  for (size_t i = first; i + 1 < cmd.size(); i += 2) {
    const std::string_view name = cmd.args[i];
    for (size_t j = first; j < i; j += 2) {
      if (resp::EqualsIgnoreCase(cmd.args[j], name))
        return Invalid(name.substr(0, 64), "given twice");
    }
    KVTIER_RETURN_IF_ERROR(SetField(out, name, cmd.args[i + 1]));
  }
  for (std::string_view required : kRequired) {
    bool present = false;
    for (size_t i = first; i < cmd.size(); i += 2) {
      present |= resp::EqualsIgnoreCase(cmd.args[i], required);
    }
    if (!present) return Invalid(required, "required");
  }
  return out;
}

std::string Label(const NamespaceDescriptor& d) {
  return d.model_id + " " + d.kv_dtype + " tp" + std::to_string(d.tp_rank) + "/" +
         std::to_string(d.tp_size);
}

Result<store::NamespaceInfo> Register(CommandContext& ctx, const resp::Command& cmd) {
  KVTIER_ASSIGN_OR_RETURN(Parsed parsed, ParseFields(cmd, 1));
  Result<NamespaceId> id = hashing::ComputeNamespaceId(parsed.desc);
  if (!id.ok()) return ToWireNames(id.status());
  store::NamespaceInfo info;
  info.id = *id;
  info.tokens_per_block = parsed.desc.tokens_per_block;
  info.block_bytes =
      parsed.block_bytes != 0 ? parsed.block_bytes : hashing::BlockBytes(parsed.desc);
  info.label = Label(parsed.desc);
  info.fields = NamespaceFields(parsed.desc);
  if (Status st = ctx.server.store.RegisterNamespace(info); !st.ok()) {
    return Invalid(kBlockBytes, st.message());
  }
  return info;
}

}  // namespace

Result<hashing::NamespaceDescriptor> ParseNamespaceFields(const resp::Command& cmd, size_t first) {
  KVTIER_ASSIGN_OR_RETURN(Parsed parsed, ParseFields(cmd, first));
  if (Status st = hashing::Validate(parsed.desc); !st.ok()) return ToWireNames(st);
  return parsed.desc;
}

std::vector<std::pair<std::string, std::string>> NamespaceFields(const NamespaceDescriptor& d) {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(std::size(kFields));
  for (const Field& f : kFields) {
    out.emplace_back(f.wire, f.text != nullptr ? d.*(f.text) : std::to_string(d.*(f.number)));
  }
  return out;
}

Progress KvtRegister(CommandContext& ctx, resp::Command& cmd) {
  if (cmd.size() % 2 != 1) {
    ctx.reply.AppendError("ERR wrong number of arguments for 'kvt.register' command");
    return Progress::kDone;
  }
  Result<store::NamespaceInfo> info = Register(ctx, cmd);
  if (!info.ok()) {
    AppendStatusError(ctx.reply, info.status());
    return Progress::kDone;
  }
  ctx.reply.AppendMapHeader(2);
  ctx.reply.AppendBulk("ns");
  ctx.reply.AppendBulk(info->id.ToHex());
  ctx.reply.AppendBulk("block_bytes");
  ctx.reply.AppendInteger(static_cast<int64_t>(info->block_bytes));
  return Progress::kDone;
}

}  // namespace kvtier::server
