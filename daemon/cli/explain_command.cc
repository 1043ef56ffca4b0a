#include "daemon/cli/explain_command.h"

#include <charconv>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "common/json_text.h"
#include "daemon/cli/explain_format.h"
#include "daemon/cli/replayer.h"
#include "daemon/cli/trace_reader.h"

namespace kvtier::cli {
namespace {

// KVT.REGISTER's field names and the descriptor's values, for KVT.EXPLAIN ... TOKENS.
std::vector<std::string> FieldArgs(const hashing::NamespaceDescriptor& d) {
  auto n = [](uint32_t v) { return std::to_string(v); };
  return {"model",        d.model_id,
          "revision",     d.model_revision,
          "dtype",        d.kv_dtype,
          "layers",       n(d.num_layers),
          "kv_heads",     n(d.num_kv_heads),
          "head_dim",     n(d.head_dim),
          "block_tokens", n(d.tokens_per_block),
          "layout",       d.layout_tag,
          "tp_rank",      n(d.tp_rank),
          "tp_size",      n(d.tp_size),
          "scheme",       n(d.hash_scheme_version),
          "salt",         d.tenant_salt};
}

std::string PackTokens(const std::vector<uint32_t>& tokens) {
  std::string out;
  out.reserve(4 * tokens.size());
  for (uint32_t t : tokens) {
    for (int b = 0; b < 4; ++b) out.push_back(static_cast<char>((t >> (8 * b)) & 0xff));
  }
  return out;
}

std::string PackKeys(const std::vector<BlockKey>& keys) {
  std::string out(16 * keys.size(), '\0');
  for (size_t i = 0; i < keys.size(); ++i)
    keys[i].ToBytes(reinterpret_cast<std::byte*>(&out[16 * i]));
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The command's arguments: TOKENS with the namespace's fields, or KEYS for a trace request.
Result<std::vector<std::string>> BuildCommand(const ExplainFlags& flags) {
  if (!flags.trace_path.empty()) {
    if (flags.request < 0) return InvalidArgument("--trace needs --request N");
    KVTIER_ASSIGN_OR_RETURN(std::vector<TraceRequest> trace,
                            ReadTrace(flags.trace_path, static_cast<size_t>(flags.request) + 1));
    if (trace.size() <= static_cast<size_t>(flags.request)) {
      return InvalidArgument(flags.trace_path + " has only " + std::to_string(trace.size()) +
                             " requests");
    }
    const hashing::NamespaceDescriptor d =
        TraceNamespace(flags.ns.tokens_per_block, flags.ns.tenant_salt);
    KVTIER_ASSIGN_OR_RETURN(NamespaceId ns, hashing::ComputeNamespaceId(d));
    return std::vector<std::string>{"KVT.EXPLAIN", ns.ToHex(), "KEYS",
                                    PackKeys(TraceKeys(ns, trace[flags.request].hash_ids))};
  }
  std::vector<uint32_t> tokens = flags.tokens;
  if (!flags.tokens_file.empty()) {
    KVTIER_ASSIGN_OR_RETURN(std::string text, ReadFile(flags.tokens_file));
    Result<std::vector<uint32_t>> parsed = ParseTokenIds(text);
    if (!parsed.ok()) return InvalidArgument(flags.tokens_file + ": " + parsed.status().message());
    tokens.insert(tokens.end(), parsed->begin(), parsed->end());
  }
  if (tokens.empty()) return InvalidArgument("no tokens: give them as arguments or --tokens-file");
  KVTIER_ASSIGN_OR_RETURN(NamespaceId ns, hashing::ComputeNamespaceId(flags.ns));
  std::vector<std::string> cmd = {"KVT.EXPLAIN", ns.ToHex(), "TOKENS", PackTokens(tokens)};
  for (std::string& f : FieldArgs(flags.ns)) cmd.push_back(std::move(f));
  return cmd;
}

}  // namespace

Result<std::vector<uint32_t>> ParseTokenIds(std::string_view text) {
  std::vector<uint32_t> tokens;
  size_t i = 0;
  auto separator = [](char c) {
    return c == ',' || c == ' ' || c == '\n' || c == '\t' || c == '\r';
  };
  const size_t open = text.find_first_not_of(" \t\r\n");
  const bool bracketed = open != std::string_view::npos && text[open] == '[';
  if (bracketed) {
    const size_t close = text.find_last_not_of(" \t\r\n");
    if (text[close] != ']') return InvalidArgument("'[' without a closing ']'");
    text = text.substr(open + 1, close - open - 1);
  }
  while (i < text.size()) {
    if (separator(text[i])) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && !separator(text[end])) ++end;
    const std::string_view word = text.substr(i, end - i);
    uint32_t value = 0;
    auto [ptr, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
    if (ec != std::errc() || ptr != word.data() + word.size()) {
      return InvalidArgument("'" + std::string(word.substr(0, 32)) +
                             "' is not a token id (an unsigned 32-bit integer)");
    }
    tokens.push_back(value);
    i = end;
  }
  return tokens;
}

int RunExplain(const ExplainFlags& flags, std::ostream& out, std::ostream& err) {
  Result<std::vector<std::string>> cmd = BuildCommand(flags);
  if (!cmd.ok()) {
    err << "kvtier explain: " << cmd.status().message() << "\n";
    return 1;
  }
  Result<client::Client> client = ConnectWithFlags(flags.client);
  if (!client.ok()) {
    err << "kvtier explain: " << client.status().ToString() << "\n";
    return 1;
  }
  std::vector<std::string_view> args(cmd->begin(), cmd->end());
  Result<resp::Reply> reply = client->Command(args);
  if (!reply.ok() || reply->is_error()) {
    err << "kvtier explain: " << (reply.ok() ? reply->str : reply.status().ToString()) << "\n";
    return 1;
  }
  const nlohmann::json explained = ExplainToJson(*reply);
  if (flags.json) {
    out << JsonText(explained) << "\n";
  } else {
    out << FormatExplainTable(explained);
  }
  return 0;
}

Command AddExplainCommand(CLI::App& app) {
  auto flags = std::make_shared<ExplainFlags>();
  flags->ns.tokens_per_block = 0;
  CLI::App* sub = app.add_subcommand(
      "explain", "Say block by block whether a prompt is cached, and why each missing block is");
  AddClientFlags(sub, &flags->client);
  hashing::NamespaceDescriptor& ns = flags->ns;
  sub->add_option("tokens", flags->tokens, "Token ids of the prompt");
  sub->add_option("--tokens-file", flags->tokens_file,
                  "File of token ids (separated by spaces, commas or newlines; or a JSON array)");
  sub->add_option("--trace", flags->trace_path, "Explain a request of a trace `kvtier replay` ran");
  sub->add_option("--request", flags->request, "With --trace: the request's line, from 0");
  sub->add_option("--model", ns.model_id, "Namespace: model id");
  sub->add_option("--revision", ns.model_revision, "Namespace: model revision");
  sub->add_option("--dtype", ns.kv_dtype, "Namespace: KV dtype (fp16, bf16, ...)");
  sub->add_option("--layers", ns.num_layers, "Namespace: layers");
  sub->add_option("--kv-heads", ns.num_kv_heads, "Namespace: KV heads per rank");
  sub->add_option("--head-dim", ns.head_dim, "Namespace: head dimension");
  sub->add_option("--block-tokens", ns.tokens_per_block,
                  "Namespace: tokens per block (with --trace: as given to replay, default 512)");
  sub->add_option("--layout", ns.layout_tag, "Namespace: the engine's layout tag");
  sub->add_option("--tp-rank", ns.tp_rank, "Namespace: tensor-parallel rank")
      ->capture_default_str();
  sub->add_option("--tp-size", ns.tp_size, "Namespace: tensor-parallel size")
      ->capture_default_str();
  sub->add_option("--salt", ns.tenant_salt, "Namespace: tenant salt")->envname("KVTIER_SALT");
  sub->add_flag("--json", flags->json, "Print the daemon's answer as one JSON object");
  sub->callback([flags] {
    if (!flags->trace_path.empty() && flags->ns.tokens_per_block == 0) {
      flags->ns.tokens_per_block = 512;  // kvtier replay's default
    }
  });
  return Command{sub, [flags] { return RunExplain(*flags, std::cout, std::cerr); }};
}

}  // namespace kvtier::cli
