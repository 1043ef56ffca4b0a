// The C ABI over Client: argument checks, Status -> int code, and a catch-all at every entry
// point so that no exception reaches a C caller.
#include "client/kvtier_c.h"

#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/default_url.h"

struct kvtier_client {
  kvtier::client::Client client;
};

namespace {

using kvtier::BlockKey;
using kvtier::Key128;
using kvtier::NamespaceId;
using kvtier::Status;
using kvtier::StatusCode;

thread_local std::string last_error;
// The message when last_error itself could not be set (no memory left); nullptr otherwise.
thread_local const char* fixed_error = nullptr;

void SetLastError(std::string message) {
  last_error = std::move(message);
  fixed_error = nullptr;
}

// The message of an exception Guard caught, set without throwing: Guard is noexcept, so a catch
// block that threw (memory is often what ran out) would terminate the caller's process.
void SetCaughtError(const char* what) noexcept {
  try {
    SetLastError(std::string("INTERNAL: ") + what);
  } catch (...) {
    fixed_error = "INTERNAL: an exception, and no memory left to describe it";
  }
}

int CodeOf(StatusCode code) {
  // The enum order of StatusCode is the C code order (kvtier_c.h lists both).
  return -static_cast<int>(code);
}

int Fail(const Status& status) {
  SetLastError(status.ToString());
  return CodeOf(status.code());
}

int FailInvalid(const char* message) {
  SetLastError(std::string("INVALID_ARGUMENT: ") + message);
  return KVTIER_EINVAL;
}

// Runs `body` (returning an int code) and turns any exception into KVTIER_EINTERNAL. An exception
// out of a round trip has given the connection up (Client::RoundTrip), so later calls on the
// handle fail rather than read that round trip's replies.
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    SetCaughtError("out of memory");
  } catch (const std::exception& e) {
    SetCaughtError(e.what());
  } catch (...) {
    SetCaughtError("unknown exception");
  }
  return KVTIER_EINTERNAL;
}

Key128 ToKey(const kvtier_key& key) {
  return Key128::FromBytes(reinterpret_cast<const std::byte*>(key.bytes));
}

void FromKey(const Key128& key, kvtier_key* out) {
  key.ToBytes(reinterpret_cast<std::byte*>(out->bytes));
}

std::vector<BlockKey> ToKeys(const kvtier_key* keys, size_t n) {
  std::vector<BlockKey> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = BlockKey{ToKey(keys[i])};
  return out;
}

std::string Str(const char* s) { return s == nullptr ? std::string() : std::string(s); }

// KVTIER_EINVAL naming the first NULL entry of `blocks`, checked before anything is sent: a NULL
// block would otherwise fault in the copy through shared memory, or fail the socket's write and
// lose the connection.
template <typename Pointer>
int CheckBlocks(const char* call, Pointer const* blocks, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (blocks[i] == nullptr) {
      return Fail(Status(StatusCode::kInvalidArgument,
                         std::string(call) + ": blocks[" + std::to_string(i) + "] is NULL"));
    }
  }
  return KVTIER_OK;
}

}  // namespace

static_assert(-static_cast<int>(StatusCode::kInternal) == KVTIER_EINTERNAL);
static_assert(-static_cast<int>(StatusCode::kNotFound) == KVTIER_ENOTFOUND);
static_assert(-static_cast<int>(StatusCode::kInvalidArgument) == KVTIER_EINVAL);
static_assert(-static_cast<int>(StatusCode::kPermissionDenied) == KVTIER_EPERM);
// kvtier_lookup passes TierId values through as the KVTIER_TIER_* codes.
static_assert(static_cast<int>(kvtier::TierId::kGpu) == KVTIER_TIER_GPU);
static_assert(static_cast<int>(kvtier::TierId::kHost) == KVTIER_TIER_HOST);
static_assert(static_cast<int>(kvtier::TierId::kNvme) == KVTIER_TIER_NVME);
static_assert(static_cast<int>(kvtier::TierId::kRemote) == KVTIER_TIER_REMOTE);
static_assert(kvtier::kTierCount == KVTIER_TIER_REMOTE + 1, "a tier without a C code");

extern "C" {

const char* kvtier_last_error(void) {
  return fixed_error != nullptr ? fixed_error : last_error.c_str();
}

int kvtier_connect(const char* url, const char* password, int timeout_ms, kvtier_client** out) {
  return Guard([&] {
    if (out == nullptr) return FailInvalid("kvtier_connect: out is NULL");
    *out = nullptr;
    kvtier::client::ConnectOptions options;
    options.password = Str(password);
    if (timeout_ms >= 0) options.timeout = std::chrono::milliseconds(timeout_ms);
    const std::string where = url == nullptr ? kvtier::client::DefaultUrl() : std::string(url);
    kvtier::Result<kvtier::client::Client> client = kvtier::client::Client::Connect(where, options);
    if (!client.ok()) return Fail(client.status());
    *out = new kvtier_client{std::move(client).value()};
    return int{KVTIER_OK};
  });
}

void kvtier_close(kvtier_client* client) { delete client; }

int kvtier_attach(kvtier_client* client) {
  return Guard([&] {
    if (client == nullptr) return FailInvalid("kvtier_attach: client is NULL");
    auto info = client->client.Attach();
    return info.ok() ? int{KVTIER_OK} : Fail(info.status());
  });
}

int kvtier_register_namespace(kvtier_client* client, const kvtier_namespace_desc* desc,
                              uint64_t block_bytes, kvtier_key* ns_out, uint64_t* block_bytes_out) {
  return Guard([&] {
    if (client == nullptr || desc == nullptr || ns_out == nullptr) {
      return FailInvalid("kvtier_register_namespace: client, desc and ns_out must not be NULL");
    }
    kvtier::hashing::NamespaceDescriptor d;
    d.model_id = Str(desc->model_id);
    d.model_revision = Str(desc->model_revision);
    d.kv_dtype = Str(desc->kv_dtype);
    d.num_layers = desc->num_layers;
    d.num_kv_heads = desc->num_kv_heads;
    d.head_dim = desc->head_dim;
    d.tokens_per_block = desc->tokens_per_block;
    d.layout_tag = Str(desc->layout_tag);
    d.tp_rank = desc->tp_rank;
    d.tp_size = desc->tp_size == 0 ? 1 : desc->tp_size;
    if (desc->hash_scheme_version != 0) d.hash_scheme_version = desc->hash_scheme_version;
    d.tenant_salt = Str(desc->tenant_salt);
    auto info = client->client.RegisterNamespace(d, block_bytes);
    if (!info.ok()) return Fail(info.status());
    FromKey(info->id, ns_out);
    if (block_bytes_out != nullptr) *block_bytes_out = info->block_bytes;
    return int{KVTIER_OK};
  });
}

int kvtier_hash_tokens(const kvtier_key* ns, const uint32_t* tokens, size_t n_tokens,
                       uint32_t tokens_per_block, kvtier_key* keys_out, size_t keys_capacity,
                       size_t* n_keys_out) {
  return Guard([&] {
    if (ns == nullptr || n_keys_out == nullptr || (tokens == nullptr && n_tokens > 0) ||
        (keys_out == nullptr && keys_capacity > 0)) {
      return FailInvalid("kvtier_hash_tokens: NULL pointer");
    }
    std::vector<BlockKey> keys(keys_capacity);
    auto n = kvtier::hashing::ChainKeysInto(NamespaceId{ToKey(*ns)},
                                            std::span<const uint32_t>(tokens, n_tokens),
                                            tokens_per_block, keys);
    if (!n.ok()) return Fail(n.status());
    for (size_t i = 0; i < *n; ++i) FromKey(keys[i], &keys_out[i]);
    *n_keys_out = *n;
    return int{KVTIER_OK};
  });
}

int kvtier_lookup(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys,
                  size_t n_keys, size_t* prefix_out, uint8_t* tiers_out) {
  return Guard([&] {
    if (client == nullptr || ns == nullptr || prefix_out == nullptr ||
        (keys == nullptr && n_keys > 0)) {
      return FailInvalid("kvtier_lookup: NULL pointer");
    }
    auto result = client->client.Lookup(NamespaceId{ToKey(*ns)}, ToKeys(keys, n_keys));
    if (!result.ok()) return Fail(result.status());
    *prefix_out = result->prefix;
    if (tiers_out != nullptr) {
      for (size_t i = 0; i < result->prefix; ++i) tiers_out[i] = static_cast<uint8_t>(result->tiers[i]);
    }
    return int{KVTIER_OK};
  });
}

int kvtier_refresh(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys,
                   size_t n_keys, size_t* prefix_out) {
  return Guard([&] {
    if (client == nullptr || ns == nullptr || prefix_out == nullptr ||
        (keys == nullptr && n_keys > 0)) {
      return FailInvalid("kvtier_refresh: NULL pointer");
    }
    auto prefix = client->client.Refresh(NamespaceId{ToKey(*ns)}, ToKeys(keys, n_keys));
    if (!prefix.ok()) return Fail(prefix.status());
    *prefix_out = *prefix;
    return int{KVTIER_OK};
  });
}

int kvtier_put(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys, size_t n_keys,
               const void* const* blocks, size_t block_bytes, int* statuses_out,
               size_t* stored_out) {
  return Guard([&] {
    if (client == nullptr || ns == nullptr || ((keys == nullptr || blocks == nullptr) && n_keys > 0)) {
      return FailInvalid("kvtier_put: NULL pointer");
    }
    if (int rc = CheckBlocks("kvtier_put", blocks, n_keys); rc != KVTIER_OK) return rc;
    const std::vector<BlockKey> key_list = ToKeys(keys, n_keys);
    const NamespaceId id{ToKey(*ns)};
    kvtier::client::Client& c = client->client;
    std::vector<kvtier::client::ConstSegment> segments(n_keys);
    std::vector<kvtier::client::ConstBlock> lists(n_keys);
    for (size_t i = 0; i < n_keys; ++i) {
      segments[i] = {blocks[i], block_bytes};
      lists[i] = kvtier::client::ConstBlock(&segments[i], 1);
    }
    auto statuses = c.attached() ? c.Put(id, key_list, lists) : c.PutInline(id, key_list, lists);
    if (!statuses.ok()) return Fail(statuses.status());
    size_t stored = 0;
    for (size_t i = 0; i < n_keys; ++i) {
      const Status& s = (*statuses)[i];
      if (s.ok() || s.code() == StatusCode::kAlreadyExists) ++stored;
      if (statuses_out != nullptr) statuses_out[i] = CodeOf(s.code());
      if (!s.ok() && s.code() != StatusCode::kAlreadyExists) SetLastError(s.ToString());
    }
    if (stored_out != nullptr) *stored_out = stored;
    return int{KVTIER_OK};
  });
}

int kvtier_get(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys, size_t n_keys,
               void* const* blocks, size_t block_bytes, size_t* served_out) {
  return Guard([&] {
    if (client == nullptr || ns == nullptr || served_out == nullptr ||
        ((keys == nullptr || blocks == nullptr) && n_keys > 0)) {
      return FailInvalid("kvtier_get: NULL pointer");
    }
    *served_out = 0;  // what a failed call leaves
    if (int rc = CheckBlocks("kvtier_get", blocks, n_keys); rc != KVTIER_OK) return rc;
    const std::vector<BlockKey> key_list = ToKeys(keys, n_keys);
    const NamespaceId id{ToKey(*ns)};
    kvtier::client::Client& c = client->client;
    std::vector<kvtier::client::MutableSegment> segments(n_keys);
    std::vector<kvtier::client::MutableBlock> lists(n_keys);
    for (size_t i = 0; i < n_keys; ++i) {
      segments[i] = {blocks[i], block_bytes};
      lists[i] = kvtier::client::MutableBlock(&segments[i], 1);
    }
    auto served = c.attached() ? c.Get(id, key_list, lists) : c.GetInline(id, key_list, lists);
    if (!served.ok()) return Fail(served.status());
    *served_out = *served;
    return int{KVTIER_OK};
  });
}

}  // extern "C"
