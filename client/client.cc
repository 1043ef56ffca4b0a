// Client: connection set-up, raw and generic commands, namespaces, lookup, pins and statistics.
// The payload paths live in client_inline.cc and client_shm.cc.
#include "client/client.h"

#include <algorithm>
#include <string>
#include <utility>

#include "client/connection.h"
#include "client/reply_mapping.h"

namespace kvtier::client {

void Pipeline::Add(std::initializer_list<std::string_view> args) {
  Add(std::span<const std::string_view>(args.begin(), args.size()));
}

void Pipeline::Add(std::span<const std::string_view> args) {
  if (args.empty()) {
    ++empty_commands_;
    return;
  }
  buffer_.BeginCommand(args.size());
  for (std::string_view arg : args) buffer_.AppendArg(arg);
}

void Pipeline::Add(std::span<const std::string> args) {
  if (args.empty()) {
    ++empty_commands_;
    return;
  }
  buffer_.BeginCommand(args.size());
  for (const std::string& arg : args) buffer_.AppendArg(std::string_view(arg));
}

std::string PackKeys(std::span<const BlockKey> keys) {
  std::string packed(keys.size() * 16, '\0');
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i].ToBytes(reinterpret_cast<std::byte*>(packed.data() + i * 16));
  }
  return packed;
}

Result<Client> Client::Connect(std::string_view url, const ConnectOptions& options) {
  KVTIER_ASSIGN_OR_RETURN(Endpoint endpoint, ParseUrl(url));
  Connection::Options connection_options;
  connection_options.timeout = options.timeout;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Connection> connection,
                          Connection::Open(endpoint, connection_options));
  Client client(std::move(connection));
  KVTIER_RETURN_IF_ERROR(client.Authenticate(options));
  return client;
}

Client::Client(std::unique_ptr<Connection> connection) : connection_(std::move(connection)) {}
Client::Client(Client&& other) noexcept = default;
Client& Client::operator=(Client&& other) noexcept = default;
Client::~Client() = default;

const Endpoint& Client::endpoint() const { return connection_->endpoint(); }
bool Client::usable() const { return connection_->usable(); }

Status Client::Authenticate(const ConnectOptions& options) {
  Pipeline pipeline;
  if (!options.password.empty()) {
    if (options.username.empty()) {
      pipeline.Add({"AUTH", options.password});
    } else {
      pipeline.Add({"AUTH", options.username, options.password});
    }
  }
  if (!options.client_name.empty()) pipeline.Add({"CLIENT", "SETNAME", options.client_name});
  if (pipeline.size() == 0) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, Execute(pipeline));
  for (const resp::Reply& reply : replies) {
    Status status = DecodeOk(reply, "connect to " + endpoint().url);
    // Whatever code the daemon uses for a refused password, the caller sees an auth failure.
    if (!status.ok() && reply.is_error() && reply.str.starts_with("WRONGPASS")) {
      return PermissionDenied(status.message());
    }
    KVTIER_RETURN_IF_ERROR(status);
  }
  return Status::Ok();
}

Result<std::vector<resp::Reply>> Client::RoundTrip(const RequestBuffer& request) {
  try {
    KVTIER_RETURN_IF_ERROR(connection_->Send(request));
    std::vector<resp::Reply> replies;
    replies.reserve(request.commands());
    for (size_t i = 0; i < request.commands(); ++i) {
      KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, connection_->ReadReply());
      replies.push_back(std::move(reply));
    }
    ++counters_.round_trips;
    counters_.commands += request.commands();
    return replies;
  } catch (...) {
    // std::bad_alloc (the replies, the parser's buffers) part way leaves the stream position
    // unknown, as an I/O error does: the connection is given up before the exception goes on.
    connection_->AbandonAfterException();
    throw;
  }
}

Status Client::AbandonIfMalformed(Status failure) {
  if (failure.code() == StatusCode::kInternal) return connection_->Abandon(std::move(failure));
  return failure;
}

Result<size_t> Client::ServedOr(size_t served, Status failure) {
  if (served > 0 && failure.code() != StatusCode::kInvalidArgument) return served;
  return failure;
}

void Client::AppendKeyCommands(RequestBuffer& request, std::string_view name,
                               const NamespaceId& ns, std::span<const BlockKey> keys,
                               size_t chunk_keys, std::span<const std::string> tail_args) {
  const std::string ns_hex = ns.ToHex();
  size_t start = 0;
  do {
    const size_t count = std::min(chunk_keys, keys.size() - start);
    request.BeginCommand(3 + tail_args.size());
    request.AppendArg(name);
    request.AppendArg(std::string_view(ns_hex));
    request.AppendArg(std::string_view(PackKeys(keys.subspan(start, count))));
    for (const std::string& arg : tail_args) request.AppendArg(std::string_view(arg));
    start += count;
  } while (start < keys.size());
}

void Client::AppendIdCommands(RequestBuffer& request, std::string_view name,
                              std::span<const uint64_t> ids) {
  for (size_t start = 0; start < ids.size(); start += kMaxKeysPerCommand) {
    const size_t count = std::min(kMaxKeysPerCommand, ids.size() - start);
    request.BeginCommand(1 + count);
    request.AppendArg(name);
    for (size_t i = start; i < start + count; ++i) request.AppendArg(ids[i]);
  }
}

Result<size_t> Client::SumIntegers(std::span<const resp::Reply> replies, std::string_view command) {
  size_t total = 0;
  for (const resp::Reply& reply : replies) {
    KVTIER_ASSIGN_OR_RETURN(int64_t n, DecodeInteger(reply, command));
    total += static_cast<size_t>(std::max<int64_t>(n, 0));
  }
  return total;
}

Status Client::Ping() {
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"PING"}));
  return DecodeOk(reply, "PING", "PONG");
}

Result<resp::Reply> Client::Command(std::initializer_list<std::string_view> args) {
  return Command(std::span<const std::string_view>(args.begin(), args.size()));
}

Result<resp::Reply> Client::Command(std::span<const std::string_view> args) {
  Pipeline pipeline;
  pipeline.Add(args);
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, Execute(pipeline));
  return std::move(replies.front());
}

Result<std::vector<resp::Reply>> Client::Execute(const Pipeline& pipeline) {
  if (pipeline.empty_commands_ > 0) {
    return InvalidArgument(
        "a command needs at least its name: " + std::to_string(pipeline.empty_commands_) +
        " empty command(s) in the pipeline, nothing sent");
  }
  if (pipeline.size() == 0) return std::vector<resp::Reply>{};
  return RoundTrip(pipeline.buffer_);
}

Status Client::Set(std::string_view key, std::string_view value) {
  RequestBuffer request;
  request.BeginCommand(3);
  request.AppendArg("SET");
  request.AppendArg(key);
  request.AppendArgView(value);
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(request));
  return DecodeOk(replies.front(), "SET");
}

Result<std::string> Client::Get(std::string_view key) {
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"GET", key}));
  return DecodeString(reply, "GET");
}

Result<NamespaceInfo> Client::RegisterNamespace(const hashing::NamespaceDescriptor& desc,
                                                uint64_t block_bytes) {
  KVTIER_ASSIGN_OR_RETURN(NamespaceId local_id, hashing::ComputeNamespaceId(desc));
  std::vector<std::string> args = {
      "KVT.REGISTER",
      "model", desc.model_id,
      "revision", desc.model_revision,
      "dtype", desc.kv_dtype,
      "layers", std::to_string(desc.num_layers),
      "kv_heads", std::to_string(desc.num_kv_heads),
      "head_dim", std::to_string(desc.head_dim),
      "block_tokens", std::to_string(desc.tokens_per_block),
      "layout", desc.layout_tag,
      "tp_rank", std::to_string(desc.tp_rank),
      "tp_size", std::to_string(desc.tp_size),
      "scheme", std::to_string(desc.hash_scheme_version),
      "salt", desc.tenant_salt,
  };
  if (block_bytes != 0) {
    args.push_back("block_bytes");
    args.push_back(std::to_string(block_bytes));
  }
  Pipeline pipeline;
  pipeline.Add(std::span<const std::string>(args));
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, Execute(pipeline));
  KVTIER_ASSIGN_OR_RETURN(NamespaceInfo info, DecodeRegister(replies.front()));
  if (info.id != local_id) {
    return Internal("KVT.REGISTER: the daemon's namespace id " + info.id.ToHex() +
                    " differs from the client's " + local_id.ToHex() +
                    ": client and daemon disagree on the hash scheme");
  }
  info.tokens_per_block = desc.tokens_per_block;
  return info;
}

Result<std::vector<BlockKey>> Client::HashTokens(const NamespaceInfo& ns,
                                                 std::span<const uint32_t> tokens,
                                                 hashing::ByteSpans block_extras) {
  return hashing::ChainKeys(ns.id, tokens, ns.tokens_per_block, block_extras);
}

Result<size_t> Client::Drop(const NamespaceId& ns) {
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"KVT.DROP", ns.ToHex()}));
  KVTIER_ASSIGN_OR_RETURN(int64_t removed, DecodeInteger(reply, "KVT.DROP"));
  return static_cast<size_t>(std::max<int64_t>(removed, 0));
}

Result<LookupResult> Client::Lookup(const NamespaceId& ns, std::span<const BlockKey> keys) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<LookupResult> results, LookupMany(ns, {&keys, 1}));
  return std::move(results.front());
}

Result<std::vector<LookupResult>> Client::LookupMany(
    const NamespaceId& ns, std::span<const std::span<const BlockKey>> chains,
    std::chrono::milliseconds hold) {
  if (hold > kMaxLookupHold) {
    return InvalidArgument("KVT.LOOKUP: hold of " + std::to_string(hold.count()) +
                           " ms is above the daemon's limit of " +
                           std::to_string(kMaxLookupHold.count()) + " ms");
  }
  const std::string hold_args[] = {"HOLD", std::to_string(std::max<int64_t>(hold.count(), 0))};
  const std::span<const std::string> tail =
      hold.count() > 0 ? std::span<const std::string>(hold_args) : std::span<const std::string>();
  std::vector<LookupResult> results(chains.size());
  // Round r asks chunk r of every chain whose chunks so far all hit. The daemon sees each command
  // on its own, and a chunk past a miss must not be asked: its blocks would be counted as hits,
  // kept warm and held, though no prefix reaches them. Chains of one chunk, the common case, take
  // the one round trip; a longer one takes one per chunk it reaches.
  std::vector<size_t> open;  // chains with a chunk to ask in this round
  for (size_t i = 0; i < chains.size(); ++i) {
    if (!chains[i].empty()) open.push_back(i);
  }
  for (size_t done = 0; !open.empty(); done += kMaxKeysPerCommand) {
    const auto chunk_of = [&](size_t i) {
      return chains[i].subspan(done, std::min(kMaxKeysPerCommand, chains[i].size() - done));
    };
    RequestBuffer request;
    for (size_t i : open) {
      AppendKeyCommands(request, "KVT.LOOKUP", ns, chunk_of(i), kMaxKeysPerCommand, tail);
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(request));
    std::vector<size_t> next;
    for (size_t j = 0; j < open.size(); ++j) {
      const size_t i = open[j];
      const size_t chunk = chunk_of(i).size();
      // A held prefix left with the daemon could not be let go: a malformed reply to a HOLD
      // gives the connection up (OrAbandon); a plain lookup leaves nothing behind.
      Result<LookupResult> decoded = DecodeLookup(replies[j], chunk);
      KVTIER_ASSIGN_OR_RETURN(LookupResult part,
                              tail.empty() ? std::move(decoded) : OrAbandon(std::move(decoded)));
      results[i].prefix += part.prefix;
      results[i].tiers.insert(results[i].tiers.end(), part.tiers.begin(), part.tiers.end());
      if (part.prefix == chunk && done + chunk < chains[i].size()) next.push_back(i);
    }
    open = std::move(next);
  }
  return results;
}

Result<size_t> Client::Refresh(const NamespaceId& ns, std::span<const BlockKey> keys) {
  if (keys.empty()) return size_t{0};
  const size_t chunks = (keys.size() + kMaxKeysPerCommand - 1) / kMaxKeysPerCommand;
  const auto chunk_of = [&](size_t c) {
    const size_t start = c * kMaxKeysPerCommand;
    return keys.subspan(start, std::min(kMaxKeysPerCommand, keys.size() - start));
  };
  // Refreshes chunks [first, last) in one round trip, last first: the daemon refreshes each
  // command's keys tail first, so the first chunk, refreshed last, ends up the most recent, as
  // one command would leave it. Answers the prefix found in chunk `first` alone.
  const auto refresh = [&](size_t first, size_t last) -> Result<size_t> {
    RequestBuffer request;
    for (size_t c = last; c-- > first;) {
      AppendKeyCommands(request, "KVT.REFRESH", ns, chunk_of(c), kMaxKeysPerCommand);
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(request));
    int64_t found = 0;
    for (const resp::Reply& reply : replies) {  // every reply is decoded: an error in any is one
      KVTIER_ASSIGN_OR_RETURN(found, DecodeInteger(reply, "KVT.REFRESH"));
    }
    return static_cast<size_t>(std::max<int64_t>(found, 0));  // the last reply: chunk `first`
  };
  if (chunks == 1) return refresh(0, 1);
  // A chain longer than one command: the daemon sees each chunk on its own, and a chunk past a
  // hole must not move (its blocks are unreachable, and would push out reachable ones). So the
  // chunks go one at a time, head first, until one is not whole; then the whole ones again, last
  // first, so that the order is the one a single command would leave.
  size_t prefix = 0;
  size_t whole = 0;
  while (whole < chunks) {
    KVTIER_ASSIGN_OR_RETURN(size_t n, refresh(whole, whole + 1));
    prefix += n;
    if (n != chunk_of(whole).size()) break;
    ++whole;
  }
  if (whole > 0) KVTIER_RETURN_IF_ERROR(refresh(0, whole).status());
  return prefix;
}

Result<size_t> Client::Pin(const NamespaceId& ns, std::span<const BlockKey> keys,
                           std::chrono::milliseconds ttl) {
  if (keys.empty()) return size_t{0};
  const std::string ttl_arg = std::to_string(std::max<int64_t>(ttl.count(), 0));
  RequestBuffer request;
  AppendKeyCommands(request, "KVT.PIN", ns, keys, kMaxKeysPerCommand,
                    std::span<const std::string>(&ttl_arg, 1));
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(request));
  return SumIntegers(replies, "KVT.PIN");
}

Result<size_t> Client::Del(const NamespaceId& ns, std::span<const BlockKey> keys) {
  if (keys.empty()) return size_t{0};
  RequestBuffer request;
  AppendKeyCommands(request, "KVT.DEL", ns, keys, kMaxKeysPerCommand);
  KVTIER_ASSIGN_OR_RETURN(std::vector<resp::Reply> replies, RoundTrip(request));
  return SumIntegers(replies, "KVT.DEL");
}

Result<std::string> Client::Stats() {
  KVTIER_ASSIGN_OR_RETURN(resp::Reply reply, Command({"KVT.STATS"}));
  return DecodeString(reply, "KVT.STATS");
}

}  // namespace kvtier::client
