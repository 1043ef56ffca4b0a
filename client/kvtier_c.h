/* kvtier C ABI: the client of kvtierd for C and for languages that bind to C.
 *
 * A kvtier_client is an opaque handle over one libkvtier Client (client/client.h): one connection
 * to one daemon. It is NOT thread-safe: use one handle per thread. Every function returns an int
 * code (below): 0 on success, a negative KVTIER_E* code on failure, whose message
 * kvtier_last_error() returns. No C++ exception ever crosses this interface (an allocation failure
 * becomes KVTIER_EINTERNAL).
 *
 * Keys and namespace ids are 16-byte values in the canonical big-endian form of docs/hashing.md.
 * The caller owns every buffer it passes; nothing is retained after a call returns.
 *
 * Codes map the kvtier Status codes one to one:
 *   KVTIER_OK                 0   success
 *   KVTIER_ENOTFOUND         -1   a miss: key, namespace, lease or reservation absent
 *   KVTIER_EEXISTS           -2   already stored; nothing to do
 *   KVTIER_EREJECTED         -3   can never succeed as asked (too large, refused by policy)
 *   KVTIER_EBUSY             -4   no room or resource now: retry later
 *   KVTIER_EDEVICE           -5   I/O or device failure (a lost connection, EIO)
 *   KVTIER_ECHECKSUM         -6   stored bytes failed their checksum
 *   KVTIER_ECORRUPTION       -7   malformed on-disk metadata
 *   KVTIER_EINVAL            -8   a bad argument (URL, descriptor, sizes, NULL pointer)
 *   KVTIER_ETIMEOUT          -9   a deadline passed
 *   KVTIER_ESHUTDOWN        -10   the daemon is stopping
 *   KVTIER_EPERM            -11   authentication failed or not allowed
 *   KVTIER_EINTERNAL        -12   a bug, a protocol mismatch, or out of memory
 */
#ifndef KVTIER_C_H_
#define KVTIER_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KVTIER_OK = 0,
  KVTIER_ENOTFOUND = -1,
  KVTIER_EEXISTS = -2,
  KVTIER_EREJECTED = -3,
  KVTIER_EBUSY = -4,
  KVTIER_EDEVICE = -5,
  KVTIER_ECHECKSUM = -6,
  KVTIER_ECORRUPTION = -7,
  KVTIER_EINVAL = -8,
  KVTIER_ETIMEOUT = -9,
  KVTIER_ESHUTDOWN = -10,
  KVTIER_EPERM = -11,
  KVTIER_EINTERNAL = -12
};

/* Tier codes reported by kvtier_lookup. KVTIER_TIER_REMOTE is the fleet's shared tier
 * (docs/scale-out.md): a block another node published, fetched into host memory when it is read;
 * kvtier_get serves it like any other. */
enum { KVTIER_TIER_GPU = 0, KVTIER_TIER_HOST = 1, KVTIER_TIER_NVME = 2, KVTIER_TIER_REMOTE = 3 };

typedef struct kvtier_client kvtier_client;

/* A block key or namespace id: 16 bytes, big-endian, high half first. */
typedef struct kvtier_key {
  uint8_t bytes[16];
} kvtier_key;

/* The fields of a namespace (hashing/namespace_descriptor.h). Strings are NUL-terminated; NULL
 * reads as "". */
typedef struct kvtier_namespace_desc {
  const char* model_id;        /* required */
  const char* model_revision;
  const char* kv_dtype;        /* "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2", "int8" */
  uint32_t num_layers;
  uint32_t num_kv_heads;
  uint32_t head_dim;
  uint32_t tokens_per_block;
  const char* layout_tag;      /* required, e.g. "vllm_nhd" */
  uint32_t tp_rank;
  uint32_t tp_size;            /* 0 reads as 1 */
  uint32_t hash_scheme_version; /* 0 reads as the current version */
  const char* tenant_salt;
} kvtier_namespace_desc;

/* The message of the last failed kvtier_* call on this thread ("" when none failed yet). Valid
 * until the next kvtier_* call on this thread. */
const char* kvtier_last_error(void);

/* Connects to `url` ("unix:///path/to.sock" or "tcp://host:port"; NULL for the default socket)
 * and authenticates with `password` when it is non-NULL and non-empty. `timeout_ms` bounds each
 * wait for the daemon, the resolution of a tcp:// host name included (0: wait forever; negative:
 * the default, 10 s). On success *out is a new handle to free with kvtier_close. */
int kvtier_connect(const char* url, const char* password, int timeout_ms, kvtier_client** out);

/* Closes the connection and frees the handle. NULL is ignored. */
void kvtier_close(kvtier_client* client);

/* Maps the daemon's shared arena (Unix sockets only); afterwards kvtier_put and kvtier_get copy
 * through shared memory instead of the socket. KVTIER_EINVAL over TCP. */
int kvtier_attach(kvtier_client* client);

/* Registers a namespace. `block_bytes` 0 takes the size derived from the descriptor. On success
 * *ns_out is the id and *block_bytes_out (if non-NULL) the block size. */
int kvtier_register_namespace(kvtier_client* client, const kvtier_namespace_desc* desc,
                              uint64_t block_bytes, kvtier_key* ns_out, uint64_t* block_bytes_out);

/* Chained keys of the full blocks of `tokens` (no daemon involved): writes
 * min(n_tokens / tokens_per_block, keys_capacity) keys and stores their number in *n_keys_out. */
int kvtier_hash_tokens(const kvtier_key* ns, const uint32_t* tokens, size_t n_tokens,
                       uint32_t tokens_per_block, kvtier_key* keys_out, size_t keys_capacity,
                       size_t* n_keys_out);

/* The longest cached prefix of `keys`: *prefix_out blocks. `tiers_out`, when non-NULL, must hold
 * n_keys bytes and receives the tier code (KVTIER_TIER_*, 0..3) of each block of the prefix. */
int kvtier_lookup(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys,
                  size_t n_keys, size_t* prefix_out, uint8_t* tiers_out);

/* Puts the cached prefix of `keys` back in the order kvtier_lookup leaves it (head most recent)
 * without counting as a lookup or a use (KVT.REFRESH): call it after putting a request's missing
 * blocks, which left them more recent than their prefix. *prefix_out: the prefix's length. */
int kvtier_refresh(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys,
                   size_t n_keys, size_t* prefix_out);

/* Stores n_keys blocks of block_bytes each; blocks[i] points at block i (a NULL one is
 * KVTIER_EINVAL, and nothing is stored). `statuses_out`, when
 * non-NULL, holds n_keys ints and receives each key's code (KVTIER_OK stored, KVTIER_EEXISTS
 * already there, KVTIER_EBUSY, ...). *stored_out (if non-NULL) is the number stored or already
 * present. The call's own return is an error only when nothing could be said per key. */
int kvtier_put(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys, size_t n_keys,
               const void* const* blocks, size_t block_bytes, int* statuses_out,
               size_t* stored_out);

/* Fetches the leading cached blocks into blocks[0..n) (block_bytes each), stopping at the first
 * miss; *served_out is n. A miss is not an error. A failure after some blocks were fetched (the
 * daemon busy, the connection lost) ends the prefix there: KVTIER_OK with *served_out the blocks
 * fetched, and the failure only when there were none (then *served_out is 0); a lost connection
 * is what the next call reports. A NULL blocks[i] is KVTIER_EINVAL, with nothing fetched. */
int kvtier_get(kvtier_client* client, const kvtier_key* ns, const kvtier_key* keys, size_t n_keys,
               void* const* blocks, size_t block_bytes, size_t* served_out);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* KVTIER_C_H_ */
