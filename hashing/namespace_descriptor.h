// NamespaceDescriptor: everything that makes two engines' KV bytes incompatible; its 128-bit id.
//
// A namespace is the unit of compatibility: blocks are only ever matched within one. Two engines
// that agree on every field here (model and revision, KV dtype and shape, tokens per block, memory
// layout, tensor-parallel slice, hash scheme and tenant salt) can share blocks; any difference
// gives a different NamespaceId, and since the id is the parent of the first block key of every
// chain, every block key differs too. The tenant salt is what keeps one tenant from probing another
// tenant's prompts: without the salt, no key of the other namespace can be computed.
//
// The id is XXH3-128 (seed 0) of CanonicalEncoding(), a tagged, length-prefixed byte string that
// docs/hashing.md specifies byte for byte so that the Python and C++ clients and the daemon agree.
// Changing that encoding changes every key ever stored: it needs a new hash_scheme_version.
//
// All functions here are pure and may be called from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/keys.h"
#include "common/status.h"

namespace kvtier::hashing {

// The hash scheme this code implements. Version 1: the encodings in docs/hashing.md.
inline constexpr uint32_t kCurrentHashSchemeVersion = 1;

// Limits beyond which a descriptor is a mistake rather than a model. They exist so that a typo
// (or an unset field read as garbage) is rejected at registration instead of producing a namespace
// whose blocks are terabytes; they are generous enough for any model in sight.
inline constexpr uint32_t kMaxLayers = 1024;
inline constexpr uint32_t kMaxKvHeads = 1024;
inline constexpr uint32_t kMaxHeadDim = 4096;
inline constexpr uint32_t kMaxTokensPerBlock = 65536;
inline constexpr uint32_t kMaxTpSize = 1024;
// Longest accepted string field (model id, revision, layout tag, tenant salt), in bytes.
inline constexpr size_t kMaxStringFieldBytes = 4096;

struct NamespaceDescriptor {
  std::string model_id;  // e.g. "meta-llama/Llama-3.1-8B-Instruct"; required
  // e.g. a commit hash; may be empty ("unspecified"), which is then a value like any other.
  std::string model_revision;
  std::string kv_dtype;  // "fp32", "fp16", "bf16", "fp8_e4m3", "fp8_e5m2" or "int8"
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;  // per tensor-parallel rank, as stored in this rank's blocks
  uint32_t head_dim = 0;
  uint32_t tokens_per_block = 0;
  std::string layout_tag;  // the engine's memory layout, e.g. "vllm_nhd"; required
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  uint32_t hash_scheme_version = kCurrentHashSchemeVersion;
  std::string tenant_salt;  // opaque bytes; may be empty (no tenant isolation)
};

// Bytes of one element of `kv_dtype`, or 0 when the dtype is unknown. Names are matched exactly
// (lower case): accepting "BF16" as an alias would still give it a different namespace id than
// "bf16", so two engines would silently fail to share; rejecting it is kinder.
uint32_t BytesPerElement(std::string_view kv_dtype);

// OK when every field is present and plausible. Otherwise kInvalidArgument whose message starts
// with the offending field's name ("num_layers: must be in [1, 1024], got 0"); the caller should
// fix the descriptor, retrying cannot help. Checks, in field order: model_id non-empty; every
// string at most kMaxStringFieldBytes; model_id, model_revision and layout_tag valid UTF-8
// ("model_id: not valid UTF-8"; tenant_salt may be any bytes); kv_dtype known; num_layers,
// num_kv_heads, head_dim, tokens_per_block in [1, kMax...]; layout_tag non-empty; tp_size in
// [1, kMaxTpSize] and tp_rank < tp_size; hash_scheme_version supported (only
// kCurrentHashSchemeVersion today).
Status Validate(const NamespaceDescriptor& desc);

// Payload bytes of one full block: 2 (K and V) x layers x kv_heads x head_dim x tokens_per_block x
// BytesPerElement(kv_dtype). Returns 0 when Validate(desc) fails; within the limits above the
// product cannot overflow (it is below 2^52). This is the dense per-head layout that vLLM, SGLang
// and transformers use for MHA/GQA; layouts that do not fit it (MLA's compressed latent, hybrid or
// sliding-window models) will pass an explicit block size when they are supported.
uint64_t BlockBytes(const NamespaceDescriptor& desc);

// The canonical byte encoding: the 9-byte magic "kvtier-ns", then the twelve fields in a fixed
// order, each as [1-byte tag][u32 LE length][value], integers as u64 LE (length 8). The tag and
// length make it injective: no two different descriptors encode the same. Defined for any
// descriptor, valid or not (it does not validate). docs/hashing.md lists the tags.
std::string CanonicalEncoding(const NamespaceDescriptor& desc);

// Validate(desc), then XXH3-128 (seed 0) of CanonicalEncoding(desc), the digest's high64 and low64
// becoming Key128::high and Key128::low. Errors: Validate's kInvalidArgument.
Result<NamespaceId> ComputeNamespaceId(const NamespaceDescriptor& desc);

// A namespace's name in statistics (INFO, KVT.STATS, /stats, /metrics, the dashboard): 16 hex
// digits of XXH3-64 (seed kNamespaceRefSeed) of the id's 16 bytes, high half first, big-endian.
// The id itself is a capability: with it a client can read, explain and drop the namespace's
// blocks, so statistics any client may read show this instead. It tells namespaces apart, the
// same on every node and across restarts (a fleet's series line up), and does not give the id
// back; like the id, it lets whoever can guess the salt confirm the guess, which is why the salt
// should be random (docs/protocol.md, "Probing another tenant").
inline constexpr uint64_t kNamespaceRefSeed = 0x6b76746965722d6eULL;  // "kvtier-n"
std::string NamespaceRef(const NamespaceId& id);

}  // namespace kvtier::hashing
