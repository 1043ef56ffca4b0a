// Block keys: chained 128-bit names of full token blocks, and engine hashes folded into them.
//
// A block key names a block together with its whole prefix and namespace:
//
//   key[-1] = namespace id
//   key[i]  = XXH3-128( key[i-1] as 16 big-endian bytes
//                       || 0x01 || u32 LE token count || tokens of block i as u32 LE
//                       || 0x02 || u32 LE extra length || extra bytes of block i )
//
// Because each key covers its parent, "the longest cached prefix" is "how many leading keys are
// present", and a tenant without the namespace id (which covers the tenant salt) cannot compute any
// key of that namespace. Only full blocks get keys: a trailing partial block is never stored, since
// its key would change as soon as the block fills. The extra field carries per-block inputs that
// change the KV bytes without changing the token ids (a LoRA adapter id, a multimodal input hash,
// a cache salt); it is encoded even when empty so that "no extra" is one well-defined value.
//
// Engines that already hash their blocks (vLLM's block hash, SGLang's page hash) may hand those
// bytes in instead of tokens: FoldForeignKey() chains them the same way under tag 0x03, which no
// token block uses at that offset, so a folded key never equals a token block key (short of a
// 128-bit collision). docs/hashing.md specifies every byte, with golden vectors.
//
// Everything here is a pure function, safe from any thread. The span forms allocate nothing, so the
// client's lookup path can hash a 128K-token prompt without touching the heap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/keys.h"
#include "common/status.h"

namespace kvtier::hashing {

// Record tags that follow the 16 parent bytes. Part of the hash scheme: never renumber.
inline constexpr uint8_t kTokensTag = 0x01;
inline constexpr uint8_t kExtraTag = 0x02;
inline constexpr uint8_t kForeignTag = 0x03;

// A list of byte strings without copying them: per-block extras, or engine hashes.
using ByteSpans = std::span<const std::span<const std::byte>>;

// Number of full blocks in `num_tokens` tokens; 0 when tokens_per_block is 0.
size_t NumFullBlocks(size_t num_tokens, uint32_t tokens_per_block);

// The key of one block whose parent key is `parent` (the namespace id for the first block).
// `extra` is the block's extra bytes, empty for none. Preconditions: block_tokens and extra each
// hold fewer than 2^32 elements (the encoding's length fields are u32). Never allocates.
BlockKey ChainKey(const Key128& parent, std::span<const uint32_t> block_tokens,
                  std::span<const std::byte> extra = {});

// Keys of the full blocks of `tokens`, chained from `ns`, written to out[0..n) where
// n = min(NumFullBlocks(tokens.size(), tokens_per_block), out.size()); returns n. A short `out`
// therefore computes the keys of a leading prefix, which are exactly the first keys of the whole
// chain. `block_extras` is either empty (no extra on any block) or holds one entry per block:
// per full block, or per full block plus one for the trailing partial block (which is ignored), so
// that an engine's per-block list can be passed as it is. Never allocates; uses about 4 KiB of
// stack for two encoding buffers. Errors: kInvalidArgument when tokens_per_block is 0 or
// block_extras has any other size.
Result<size_t> ChainKeysInto(const NamespaceId& ns, std::span<const uint32_t> tokens,
                             uint32_t tokens_per_block, std::span<BlockKey> out,
                             ByteSpans block_extras = {});

// As ChainKeysInto(), returning the keys of all full blocks in a new vector.
Result<std::vector<BlockKey>> ChainKeys(const NamespaceId& ns, std::span<const uint32_t> tokens,
                                        uint32_t tokens_per_block, ByteSpans block_extras = {});

// Folds an engine's own block hash (any length; vLLM's 32-byte sha256 block hash, an SGLang page
// hash as its bytes) under `parent`: XXH3-128(parent as 16 big-endian bytes || 0x03 ||
// u32 LE length || bytes). Precondition: fewer than 2^32 bytes. Never allocates.
BlockKey FoldForeignKey(const Key128& parent, std::span<const std::byte> engine_hash_bytes);

// Folds a chain of engine hashes, one per full block in order: key[i] = FoldForeignKey(key[i-1],
// engine_hashes[i]) with key[-1] = ns. Foreign keys chain on the previous kvtier key even though an
// engine hash usually covers its own prefix already: chaining puts the namespace (and so the tenant
// salt) into every key, and keeps "longest prefix = leading keys present" true for engines whose
// hashes do not chain (a page hash of the page's tokens alone).
std::vector<BlockKey> FoldForeignKeys(const NamespaceId& ns, ByteSpans engine_hashes);
std::vector<BlockKey> FoldForeignKeys(const NamespaceId& ns,
                                      std::span<const std::string> engine_hashes);

}  // namespace kvtier::hashing
