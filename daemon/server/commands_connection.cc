// Connection commands: PING, HELLO, AUTH, CLIENT, QUIT, SELECT, and the COMMAND and CONFIG stubs
// that redis-cli and redis-benchmark send at start-up.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "common/version.h"
#include "daemon/server/commands.h"
#include "daemon/server/wire.h"

namespace kvtier::server {
namespace {

using resp::Command;

constexpr std::string_view kNoAuthHello =
    "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO "
    "<proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP "
    "protocol version at the same time";
constexpr std::string_view kWrongPass = "WRONGPASS invalid username-password pair";

// Compares in time independent of where the strings differ, so the reply time does not reveal
// how much of a guessed password was right.
bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const auto x = static_cast<unsigned char>(i < a.size() ? a[i] : 0);
    const auto y = static_cast<unsigned char>(i < b.size() ? b[i] : 0);
    diff |= x ^ y;
  }
  return diff == 0;
}

// Checks a username/password pair against the configured password; the only user is "default".
// Without a password that user takes any (Redis' default user is "nopass"): clients configured
// with one, as for a Redis that has one, still connect.
bool CheckPassword(const CommandContext& ctx, std::string_view user, std::string_view password) {
  const bool user_ok = ConstantTimeEquals(user, "default");
  if (ctx.server.options.password.empty()) return user_ok;
  const bool password_ok = ConstantTimeEquals(password, ctx.server.options.password);
  return user_ok && password_ok;
}

// Redis refuses names that would break CLIENT LIST's one-line-per-client format.
bool ValidClientName(std::string_view name) {
  return std::all_of(name.begin(), name.end(), [](char c) { return c > ' ' && c <= '~'; });
}

constexpr std::string_view kBadClientName =
    "ERR Client names cannot contain spaces, newlines or special characters.";

Progress Ping(CommandContext& ctx, Command& cmd) {
  if (cmd.size() > 2) {
    ctx.reply.AppendError("ERR wrong number of arguments for 'ping' command");
  } else if (cmd.size() == 2) {
    ctx.reply.AppendBulk(cmd.args[1]);
  } else {
    ctx.reply.AppendSimpleString("PONG");
  }
  return Progress::kDone;
}

// ECHO: redis-cli --pipe ends its stream with one and waits for the echo to know every reply is in.
Progress Echo(CommandContext& ctx, Command& cmd) {
  ctx.reply.AppendBulk(cmd.args[1]);
  return Progress::kDone;
}

Progress Auth(CommandContext& ctx, Command& cmd) {
  if (cmd.size() > 3) {
    ctx.reply.AppendError("ERR syntax error");
  } else if (ctx.server.options.password.empty() && cmd.size() == 2) {
    ctx.reply.AppendError(
        "ERR AUTH <password> called without any password configured for the default user. Are "
        "you sure your configuration is correct?");
  } else if (!CheckPassword(ctx, cmd.size() == 3 ? cmd.args[1] : "default", cmd.args.back())) {
    ctx.reply.AppendError(kWrongPass);
  } else {
    ctx.session.set_authenticated();
    ctx.reply.AppendSimpleString("OK");
  }
  return Progress::kDone;
}

void AppendHelloMap(CommandContext& ctx) {
  resp::ReplyWriter& r = ctx.reply;
  r.AppendMapHeader(7);
  r.AppendBulk("server");
  r.AppendBulk("kvtier");
  r.AppendBulk("version");
  r.AppendBulk(kVersion);
  r.AppendBulk("proto");
  r.AppendInteger(static_cast<int64_t>(ctx.session.protocol()));
  r.AppendBulk("id");
  r.AppendInteger(static_cast<int64_t>(ctx.session.id()));
  r.AppendBulk("mode");
  r.AppendBulk("standalone");
  r.AppendBulk("role");
  r.AppendBulk("master");
  r.AppendBulk("modules");
  r.AppendArrayHeader(0);
}

struct HelloOptions {
  const std::string* user = nullptr;
  const std::string* password = nullptr;
  const std::string* name = nullptr;
};

// Parses `[AUTH user pass] [SETNAME name]` from args[2...]; false after writing the error.
bool ParseHelloOptions(CommandContext& ctx, const Command& cmd, HelloOptions& out) {
  for (size_t i = 2; i < cmd.size(); ++i) {
    const size_t more = cmd.size() - i - 1;
    if (resp::EqualsIgnoreCase(cmd.args[i], "AUTH") && more >= 2) {
      out.user = &cmd.args[i + 1];
      out.password = &cmd.args[i + 2];
      i += 2;
    } else if (resp::EqualsIgnoreCase(cmd.args[i], "SETNAME") && more >= 1) {
      out.name = &cmd.args[++i];
    } else {
      ctx.reply.AppendError("ERR Syntax error in HELLO option '" + cmd.args[i] + "'");
      return false;
    }
  }
  return true;
}

Progress Hello(CommandContext& ctx, Command& cmd) {
  resp::Protocol protocol = ctx.session.protocol();
  if (cmd.size() >= 2) {
    std::optional<int64_t> version = resp::ParseInt64(cmd.args[1]);
    if (!version) {
      ctx.reply.AppendError("ERR Protocol version is not an integer or out of range");
      return Progress::kDone;
    }
    if (*version != 2 && *version != 3) {
      ctx.reply.AppendError("NOPROTO unsupported protocol version");
      return Progress::kDone;
    }
    protocol = *version == 3 ? resp::Protocol::kResp3 : resp::Protocol::kResp2;
  }
  HelloOptions opts;
  if (!ParseHelloOptions(ctx, cmd, opts)) return Progress::kDone;
  if (opts.password != nullptr) {
    if (!CheckPassword(ctx, *opts.user, *opts.password)) {
      ctx.reply.AppendError(kWrongPass);
      return Progress::kDone;
    }
    ctx.session.set_authenticated();
  }
  if (!ctx.session.authenticated()) {
    ctx.reply.AppendError(kNoAuthHello);
    return Progress::kDone;
  }
  if (opts.name != nullptr) {
    if (!ValidClientName(*opts.name)) {
      ctx.reply.AppendError(kBadClientName);
      return Progress::kDone;
    }
    ctx.session.set_name(*opts.name);
  }
  ctx.session.set_protocol(protocol);
  ctx.reply.set_protocol(protocol);
  AppendHelloMap(ctx);
  return Progress::kDone;
}

Progress Client(CommandContext& ctx, Command& cmd) {
  const std::string sub = resp::ToUpperAscii(cmd.args[1]);
  if (sub == "SETNAME" && cmd.size() == 3) {
    if (!ValidClientName(cmd.args[2])) {
      ctx.reply.AppendError(kBadClientName);
    } else {
      ctx.session.set_name(std::move(cmd.args[2]));
      ctx.reply.AppendSimpleString("OK");
    }
  } else if (sub == "GETNAME" && cmd.size() == 2) {
    if (ctx.session.name().empty()) {
      ctx.reply.AppendNull();
    } else {
      ctx.reply.AppendBulk(ctx.session.name());
    }
  } else if (sub == "ID" && cmd.size() == 2) {
    ctx.reply.AppendInteger(static_cast<int64_t>(ctx.session.id()));
  } else if (sub == "SETINFO" && cmd.size() == 4) {
    // redis-py and other clients announce their library name and version; accepted and unused.
    ctx.reply.AppendSimpleString("OK");
  } else {
    ctx.reply.AppendError("ERR unknown subcommand or wrong number of arguments for 'client|" +
                          resp::ToUpperAscii(cmd.args[1]).substr(0, 64) + "'");
  }
  return Progress::kDone;
}

Progress Quit(CommandContext& ctx, Command&) {
  ctx.reply.AppendSimpleString("OK");
  ctx.close_after_reply = true;
  return Progress::kDone;
}

Progress CommandCmd(CommandContext& ctx, Command& cmd) {
  if (cmd.size() >= 2 && resp::EqualsIgnoreCase(cmd.args[1], "COUNT")) {
    ctx.reply.AppendInteger(0);
  } else if (cmd.size() >= 2 && resp::EqualsIgnoreCase(cmd.args[1], "DOCS")) {
    ctx.reply.AppendMapHeader(0);  // Redis answers COMMAND DOCS with a map
  } else {
    ctx.reply.AppendArrayHeader(0);
  }
  return Progress::kDone;
}

// The Redis parameters tools ask about: redis-benchmark prints save and appendonly at start-up
// and warns when it cannot read them. kvtierd persists nothing, which these values say.
constexpr std::pair<std::string_view, std::string_view> kConfigParameters[] = {
    {"save", ""},
    {"appendonly", "no"},
};

// CONFIG GET parameter [parameter ...]: the known parameters named (or all for "*"), as a map.
void ConfigGet(CommandContext& ctx, const Command& cmd) {
  std::vector<std::pair<std::string_view, std::string_view>> found;
  for (const auto& parameter : kConfigParameters) {
    for (size_t i = 2; i < cmd.size(); ++i) {
      if (cmd.args[i] == "*" || resp::EqualsIgnoreCase(cmd.args[i], parameter.first)) {
        found.push_back(parameter);
        break;
      }
    }
  }
  ctx.reply.AppendMapHeader(found.size());
  for (const auto& [name, value] : found) {
    ctx.reply.AppendBulk(name);
    ctx.reply.AppendBulk(value);
  }
}

Progress Config(CommandContext& ctx, Command& cmd) {
  if (resp::EqualsIgnoreCase(cmd.args[1], "GET") && cmd.size() >= 3) {
    ConfigGet(ctx, cmd);
  } else {
    ctx.reply.AppendError("ERR CONFIG " + resp::ToUpperAscii(cmd.args[1]).substr(0, 64) +
                          " is not supported");
  }
  return Progress::kDone;
}

Progress Select(CommandContext& ctx, Command& cmd) {
  if (cmd.args[1] == "0") {
    ctx.reply.AppendSimpleString("OK");
  } else if (!resp::ParseInt64(cmd.args[1])) {
    ctx.reply.AppendError(kNotAnInteger);
  } else {
    ctx.reply.AppendError("ERR DB index is out of range");
  }
  return Progress::kDone;
}

constexpr CommandSpec kCommands[] = {
    {"PING", -1, true, Ping},      {"HELLO", -1, true, Hello},
    {"AUTH", -2, true, Auth},      {"QUIT", -1, true, Quit, true},
    {"CLIENT", -2, false, Client}, {"COMMAND", -1, false, CommandCmd},
    {"CONFIG", -2, false, Config}, {"SELECT", 2, false, Select},
    {"ECHO", 2, false, Echo},
};

}  // namespace

std::span<const CommandSpec> ConnectionCommands() { return kCommands; }

}  // namespace kvtier::server
