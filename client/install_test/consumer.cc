// Uses the installed C++ API without a daemon: hashing, URL parsing and a refused connection.
// Includes every installed client header, so that one that names a header not installed fails.
#include <cstdio>
#include <vector>

#include "client/async_client.h"
#include "client/client.h"
#include "client/client_types.h"
#include "client/default_url.h"
#include "client/endpoint.h"
#include "client/kvtier_c.h"
#include "client/reply_mapping.h"
#include "client/request_buffer.h"
#include "client/shared_arena.h"
#include "client/unique_fd.h"

int main() {
  kvtier::hashing::NamespaceDescriptor d;
  d.model_id = "consumer";
  d.kv_dtype = "bf16";
  d.num_layers = d.num_kv_heads = d.head_dim = 1;
  d.tokens_per_block = 2;
  d.layout_tag = "test";
  auto id = kvtier::hashing::ComputeNamespaceId(d);
  if (!id.ok()) return 1;
  const kvtier::client::NamespaceInfo ns{*id, 8, 2};
  const std::vector<uint32_t> tokens = {1, 2, 3, 4};
  auto keys = kvtier::client::Client::HashTokens(ns, tokens);
  if (!keys.ok() || keys->size() != 2) return 2;
  auto client = kvtier::client::Client::Connect("unix:///nonexistent/kvtierd.sock");
  if (client.ok()) return 3;
  std::printf("%s %s\n", keys->front().ToHex().c_str(), client.status().ToString().c_str());
  return kvtier::client::DefaultUrl().rfind("unix://", 0) == 0 ? 0 : 4;
}
