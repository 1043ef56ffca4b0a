// libkvtier: the C++ client of kvtierd.
//
// A Client is one connection to one daemon, given as a URL (`unix:///path/to.sock` or
// `tcp://host:port`; client/default_url.h has the default). It hashes token blocks into chained
// block keys locally (the hashing library the daemon uses, so both agree byte for byte), asks the
// daemon for the longest cached prefix, and moves block payloads in one of two ways:
//
//   inline (any URL)        PutInline / GetInline send the bytes in the RESP stream.
//   shared memory (unix://) Attach() maps the daemon's host arena; Put copies into slots reserved
//                           with KVT.RESERVE and publishes them with KVT.COMMIT (KVT.ABORT on
//                           failure); Get leases blocks with KVT.ACQUIRE, copies them out and
//                           ends the leases with KVT.RELEASE. A block whose lease had expired
//                           before the release is reported as a miss, never as data: its slot may
//                           have been reused while it was copied.
//
// Every call that takes many keys is one round trip per batch: all of its commands (a long key
// list is split into several) are written before any reply is read; the shared-memory Put and Get
// take two (reserve/acquire, then commit/release). The calls that follow a prefix (Lookup,
// LookupMany, GetInline, Get, GetWith) are the exception when a key list takes several commands:
// the next command goes out only once the one before found all its keys, so that nothing past
// the first miss is looked up, read, leased or held. Caller memory (payloads, segments, output
// buffers) is borrowed for the duration of the call only.
//
// Errors are kvtier Status codes (common/status.h): the daemon's error replies map one to one
// (client/reply_mapping.h), a per-key outcome is a per-key Status, I/O failures are translated
// errno, and a reply the protocol does not allow is kInternal. After an I/O error, a timeout or a
// malformed reply the Client is unusable (usable() is false; every call returns the first error);
// connect a new one. A miss is never an error: Lookup reports a prefix, Get a count served.
// A get that fails part way (a later round trip's error reply such as -BUSY at the lease limit,
// a lost connection, a block it cannot copy) returns the leading blocks it had already served,
// and the failure only when it had served none; a lost connection is then what the next call
// reports.
//
// Thread safety: a Client is NOT thread-safe. Use one per thread (they are cheap: one socket), or
// hand one to an AsyncClient (client/async_client.h), which runs calls on its own thread and
// returns futures. Calls never throw; std::bad_alloc is the only exception that may escape, and
// when it interrupts a round trip the connection is given up (usable() false) as after an I/O
// error, since what was sent and read of the round trip is unknown.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/client_types.h"
#include "client/endpoint.h"
#include "client/request_buffer.h"
#include "client/shared_arena.h"
#include "common/keys.h"
#include "common/resp/reply.h"
#include "common/status.h"
#include "hashing/block_hasher.h"
#include "hashing/namespace_descriptor.h"

namespace kvtier::client {

class Connection;

struct ConnectOptions {
  // Sent as `AUTH [username] password` right after connecting when non-empty.
  std::string username;
  std::string password;
  // Longest wait for the daemon to accept or send bytes (connect included); 0 waits forever. It
  // bounds each wait, not a whole call, so a large transfer that keeps moving never times out.
  // It bounds resolving a tcp:// host name as well (on a thread of its own; an address needs
  // none), and then each address's connect.
  std::chrono::milliseconds timeout{10'000};
  // Sent as `CLIENT SETNAME` when non-empty; shows in the daemon's client list.
  std::string client_name;
};

// Commands queued for Client::Execute(), sent together and answered together.
class Pipeline {
 public:
  // Queues one command; the arguments are copied. A command needs at least its name: an empty
  // one makes Execute fail with kInvalidArgument before anything is sent (the daemon, as Redis,
  // ignores an empty array and would never answer it).
  void Add(std::initializer_list<std::string_view> args);
  void Add(std::span<const std::string_view> args);
  void Add(std::span<const std::string> args);
  // Commands queued, empty ones included.
  size_t size() const { return buffer_.commands() + empty_commands_; }
  void Clear() {
    buffer_.Clear();
    empty_commands_ = 0;
  }

 private:
  friend class Client;
  RequestBuffer buffer_;
  size_t empty_commands_ = 0;  // queued but not encoded: Execute refuses the pipeline
};

class Client {
 public:
  // Parses `url`, connects, and authenticates when options.password is set. Errors: ParseUrl's
  // kInvalidArgument (naming the URL); Connection::Open's errors (kNotFound / kDeviceError when
  // no daemon listens there, kTimeout); kPermissionDenied for a wrong password.
  static Result<Client> Connect(std::string_view url, const ConnectOptions& options = {});

  // A moved-from Client may only be destroyed or assigned to.
  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  ~Client();

  const Endpoint& endpoint() const;
  const ClientCounters& counters() const { return counters_; }
  // False once an I/O error, a timeout or a malformed reply has made the connection unusable.
  bool usable() const;

  // ---- Connection and raw commands ----

  // PING. OK when the daemon answered PONG.
  Status Ping();
  // Sends one command and returns its reply as it came (an error reply is a Reply of type kError,
  // not a failed Result). Errors: I/O; kInvalidArgument for no arguments at all, with nothing
  // sent and the connection still usable.
  Result<resp::Reply> Command(std::span<const std::string_view> args);
  Result<resp::Reply> Command(std::initializer_list<std::string_view> args);
  // Sends every command of `pipeline`, then reads one reply per command, in order. Errors: I/O;
  // kInvalidArgument when a command is empty (Pipeline::Add), with nothing sent.
  Result<std::vector<resp::Reply>> Execute(const Pipeline& pipeline);

  // ---- Generic key space (opaque keys, like Redis) ----

  Status Set(std::string_view key, std::string_view value);
  // The value; kNotFound on a miss.
  Result<std::string> Get(std::string_view key);

  // ---- Namespaces and keys ----

  // Registers `desc` (KVT.REGISTER) and returns its id and block size. `block_bytes` 0 takes the
  // daemon's default (hashing::BlockBytes); otherwise it sets the block size explicitly (layouts
  // that are not dense K/V per head, or test payloads). The descriptor is validated locally first
  // (kInvalidArgument naming the field), and the daemon's id is checked against the one computed
  // here: kInternal when they differ, which means the two disagree on the hash scheme.
  Result<NamespaceInfo> RegisterNamespace(const hashing::NamespaceDescriptor& desc,
                                          uint64_t block_bytes = 0);
  // Chained keys of the full blocks of `tokens` in namespace `ns` (hashing::ChainKeys with
  // ns.tokens_per_block). Pure and local: no daemon involved. Errors: hashing's kInvalidArgument.
  static Result<std::vector<BlockKey>> HashTokens(const NamespaceInfo& ns,
                                                  std::span<const uint32_t> tokens,
                                                  hashing::ByteSpans block_extras = {});
  // Removes every block of `ns` and forgets it; returns the blocks removed. kNotFound for an
  // unknown namespace.
  Result<size_t> Drop(const NamespaceId& ns);

  // ---- Lookup ----

  // The longest cached prefix of `keys` and the tier of each of its blocks. An unknown namespace
  // is a miss (prefix 0). Counts as a use: the prefix is kept warm.
  Result<LookupResult> Lookup(const NamespaceId& ns, std::span<const BlockKey> keys);
  // Puts the cached prefix of `keys` back in the order Lookup leaves it (its head the most
  // recent), without counting as a lookup or a use (KVT.REFRESH); returns the prefix's length.
  // For a client that put a request's new blocks after looking the request up: the puts left them
  // more recent than the prefix they extend, and under pressure that prefix would go first.
  // One round trip; a chain longer than one command (kMaxKeysPerCommand) takes one per whole
  // chunk and one more, so that nothing past a hole moves.
  Result<size_t> Refresh(const NamespaceId& ns, std::span<const BlockKey> keys);
  // Lookup of several chains of `ns` in one round trip (one scheduler step's new requests): one
  // answer per chain, in order, each as Lookup would give it. A `hold` above 0 keeps each prefix
  // found from eviction that long (KVT.LOOKUP ... HOLD): until the engine has loaded it; at most
  // kMaxLookupHold (the daemon's limit), kInvalidArgument above it with nothing sent. A chain
  // longer than one command (kMaxKeysPerCommand) takes a round trip per command its prefix
  // reaches: a command past a miss is not sent, so nothing beyond the prefix is counted as a hit,
  // kept warm or held.
  Result<std::vector<LookupResult>> LookupMany(const NamespaceId& ns,
                                               std::span<const std::span<const BlockKey>> chains,
                                               std::chrono::milliseconds hold = {});

  // ---- Inline payloads (any URL) ----

  // Stores one payload per key. Per key: OK (stored), kAlreadyExists (already cached; nothing to
  // do), kBusy (being written by another client, or no room now: retry later), kRejected (larger
  // than any tier), kInvalidArgument (not the namespace's block size). With the daemon's
  // nvme.write_through, OK means the block is on NVMe too, and kBusy, kRejected, kDeviceError or
  // kTimeout may also mean it is stored in memory only (its NVMe copy was not made:
  // docs/protocol.md). A command the daemon
  // refuses as a whole (an unknown namespace: kNotFound) gives each of its keys that status. The
  // Result itself fails only on I/O or a malformed reply, or with kInvalidArgument when keys and
  // payloads differ in number; then nothing can be said per key.
  Result<std::vector<Status>> PutInline(const NamespaceId& ns, std::span<const BlockKey> keys,
                                        std::span<const std::span<const std::byte>> payloads);
  Result<std::vector<Status>> PutInline(const NamespaceId& ns, std::span<const BlockKey> keys,
                                        std::span<const ConstBlock> blocks);
  // Fetches the leading blocks of `keys` into the outputs, stopping at the first miss; returns how
  // many were served (outputs past that count are unspecified). Each output must be exactly the
  // block's size: kInvalidArgument otherwise. A failure after some blocks were served ends the
  // prefix there and returns their count (see the top of this file); errors only when none were.
  Result<size_t> GetInline(const NamespaceId& ns, std::span<const BlockKey> keys,
                           std::span<const std::span<std::byte>> outputs);
  Result<size_t> GetInline(const NamespaceId& ns, std::span<const BlockKey> keys,
                           std::span<const MutableBlock> blocks);
  // As above into new strings: one per block served. The block size is not known in advance, so
  // a first round trip asks for a few keys only (a reply of any block size stays small), and the
  // rest, as long as the prefix runs on, in commands of up to kMaxInlineCommandBytes each.
  Result<std::vector<std::string>> GetInline(const NamespaceId& ns, std::span<const BlockKey> keys);

  // ---- Shared memory (unix:// only) ----

  // Receives the daemon's host arena (KVT.ATTACH, the descriptor passed with SCM_RIGHTS) and maps
  // it. Calling it again remaps. Errors: kInvalidArgument on a tcp:// connection (use the inline
  // calls) or when no descriptor came with the reply; the daemon's error; mmap's errno.
  Result<ArenaInfo> Attach();
  bool attached() const { return arena_.mapped(); }
  const SharedArena& arena() const { return arena_; }

  // Asks for the daemon's GPU pool (KVT.GPUATTACH) and returns what it handed out, without
  // mapping it: client/gpu/gpu_pool_import.h (AttachGpuPool) does that, since the client library
  // itself links no CUDA. From then on the connection's KVT.ACQUIRE also leases blocks in the
  // pool; GetWith hands them to a copier that reads the pool, and Get and other copiers release
  // them and read the blocks inline, so nothing breaks for a caller that never maps the pool.
  // Errors: kInvalidArgument on a tcp:// connection or when a memfd pool came without its
  // descriptor; the daemon's error (kNotFound "no GPU tier: ..." when it shares none).
  Result<GpuPoolExport> AttachGpuPool();
  // Undoes AttachGpuPool on this connection (KVT.GPUDETACH), for a caller that could not map the
  // export: later KVT.ACQUIREs lease host blocks only, and its reads no longer count toward
  // promoting blocks into a pool it cannot read. Leases already granted stay valid.
  Status DetachGpuPool();

  // Stores one block per key through the arena: RESERVE, copy (gathering each block's segments),
  // COMMIT; reservations that cannot be filled are ABORTed. Every block must have the same size
  // (the namespace's block size). Per-key statuses as PutInline, plus kTimeout when a reservation
  // expired before its commit. kInvalidArgument when not attached or the sizes disagree.
  Result<std::vector<Status>> Put(const NamespaceId& ns, std::span<const BlockKey> keys,
                                  std::span<const ConstBlock> blocks);
  // Contiguous blocks of `block_bytes` each.
  Result<std::vector<Status>> Put(const NamespaceId& ns, std::span<const BlockKey> keys,
                                  std::span<const void* const> blocks, size_t block_bytes);
  // Copies the leading cached blocks of `keys` out of the arena into `blocks` (scattering each
  // into its segments); returns how many were served: blocks [0, n) hold their payloads. Stops at
  // the first miss (keys past it are not leased: with more than kMaxKeysPerCommand keys, a
  // KVT.ACQUIRE per command while the prefix runs on). A block whose lease had expired before its
  // release counts as a miss (and ends the prefix there); counters().torn_reads counts them.
  // Blocks the arena does not hold (on
  // NVMe, in the GPU pool) are fetched inline after the leased ones, in one more round trip that
  // a true miss also costs (GPU blocks leased after AttachGpuPool included: memcpy cannot read
  // device memory). kInvalidArgument when not attached or a block's destination size
  // differs from the stored size. As for GetInline, a failure after some blocks were served
  // (the inline round trip's, say) returns their count; errors only when none were.
  Result<size_t> Get(const NamespaceId& ns, std::span<const BlockKey> keys,
                     std::span<const MutableBlock> blocks);
  Result<size_t> Get(const NamespaceId& ns, std::span<const BlockKey> keys,
                     std::span<void* const> blocks, size_t block_bytes);

  // The same two calls with the copy step supplied by the caller, for blocks in memory the client
  // cannot memcpy (GPU forms: client/gpu/device_transfer.h). Every block is `block_bytes` long;
  // `copier` moves block i into (put) or out of (get) its slot; see SlotCopier. Results and
  // errors as Put and Get; a block whose copy failed gets the copy's error (put) or ends the
  // served prefix (get; the first failed copy's error is returned when nothing was served, as
  // any other failure of a get).
  // Leases in the GPU pool go to copier.StartFromGpuPool when the copier reads the pool. Blocks
  // that neither mapping serves are fetched inline into host memory and handed to the copier
  // from there.
  Result<std::vector<Status>> PutWith(const NamespaceId& ns, std::span<const BlockKey> keys,
                                      size_t block_bytes, SlotCopier& copier);
  Result<size_t> GetWith(const NamespaceId& ns, std::span<const BlockKey> keys, size_t block_bytes,
                         SlotCopier& copier);

  // ---- Pins, removal, statistics ----

  // Keeps the ready blocks among `keys` from eviction for `ttl` (0 unpins); returns how many.
  Result<size_t> Pin(const NamespaceId& ns, std::span<const BlockKey> keys,
                     std::chrono::milliseconds ttl);
  // Removes the blocks; returns how many were present.
  Result<size_t> Del(const NamespaceId& ns, std::span<const BlockKey> keys);
  // KVT.STATS: the daemon's statistics as a JSON document (the same as its HTTP /stats).
  Result<std::string> Stats();

 private:
  explicit Client(std::unique_ptr<Connection> connection);

  // Sends `request` and reads one reply per command in it.
  Result<std::vector<resp::Reply>> RoundTrip(const RequestBuffer& request);
  // One command per chunk of at most `chunk_keys` keys: `<name> <ns> <packed keys> <tail args>`.
  void AppendKeyCommands(RequestBuffer& request, std::string_view name, const NamespaceId& ns,
                         std::span<const BlockKey> keys, size_t chunk_keys,
                         std::span<const std::string> tail_args = {});
  // One `<name> <id> [<id> ...]` command per chunk of ids.
  void AppendIdCommands(RequestBuffer& request, std::string_view name,
                        std::span<const uint64_t> ids);
  Result<size_t> SumIntegers(std::span<const resp::Reply> replies, std::string_view command);
  // KVT.ACQUIRE of `keys`, a command at a time when they take several: the next goes out only when
  // every key of the one before was leased in memory the caller can read (the arena, or the GPU
  // pool when `reads_gpu_pool`), so that nothing past the prefix's end is leased. One grant per
  // key; the keys of commands not sent are misses (kNotFound) without a lease.
  Result<std::vector<SlotGrant>> AcquirePrefix(const NamespaceId& ns,
                                               std::span<const BlockKey> keys, bool reads_gpu_pool);
  // `decoded`, after giving the connection up when it says the reply broke the protocol
  // (kInternal): for replies to commands that leave state with the daemon (grants, holds,
  // commits, releases), which could then be neither used nor returned; closing makes the
  // daemon end them at once rather than at their timeouts.
  template <typename T>
  Result<T> OrAbandon(Result<T> decoded) {
    if (!decoded.ok()) return AbandonIfMalformed(decoded.status());
    return decoded;
  }
  // `failure`, after giving the connection up if it is kInternal.
  Status AbandonIfMalformed(Status failure);
  // Slot grants of a KVT.RESERVE or KVT.ACQUIRE batch, through OrAbandon.
  Result<std::vector<SlotGrant>> DecodeGrantsOrAbandon(std::span<const resp::Reply> replies,
                                                       size_t keys, std::string_view command);
  Status Authenticate(const ConnectOptions& options);

  // The shared-memory Put in steps: copy into the granted slots, then commit them (and abort the
  // ones that could not be filled), writing each key's outcome into `statuses`.
  struct FilledSlots {
    std::vector<uint64_t> commit_ids;
    std::vector<size_t> commit_index;  // key index of each commit id
    std::vector<uint64_t> abort_ids;
  };
  FilledSlots FillSlots(std::span<const SlotGrant> grants, std::span<const ConstBlock> blocks,
                        size_t block_bytes, std::vector<Status>& statuses);
  Status FinishReservations(const FilledSlots& filled, std::vector<Status>& statuses);

  // The shared-memory Get in steps: copy what ACQUIRE granted, then release every lease.
  struct LeasedCopy {
    size_t copied = 0;      // leading blocks copied
    size_t first_miss = 0;  // first key ACQUIRE did not grant (keys.size() when none)
    Status error;           // a lease that cannot be copied (size, offset): the call fails
    std::vector<uint64_t> release_ids;
    std::vector<size_t> release_index;  // key index of each lease
  };
  LeasedCopy CopyLeased(std::span<const SlotGrant> grants, std::span<const MutableBlock> blocks);
  // Releases the leases; returns the blocks served: `copied` cut at the first torn copy. A
  // failure here serves nothing: without the release's answer no copy is known to be whole.
  Result<size_t> ReleaseLeases(const LeasedCopy& copy);
  // What a get stopped by `failure` returns: the `served` leading blocks when there are any (they
  // are in the caller's buffers, and the result is a prefix), else the failure. A caller's error
  // (kInvalidArgument: an output of the wrong size, say) is returned whatever was served: it is a
  // bug to fix, and a short prefix would pass it off as a miss.
  static Result<size_t> ServedOr(size_t served, Status failure);

  std::unique_ptr<Connection> connection_;
  SharedArena arena_;
  ClientCounters counters_;
};

// Keys per command for commands that take packed keys: the daemon's default max_lookup_keys.
inline constexpr size_t kMaxKeysPerCommand = 65536;
// The longest hold KVT.LOOKUP takes (docs/protocol.md): one hour.
inline constexpr std::chrono::milliseconds kMaxLookupHold{3'600'000};
// Payload bytes per inline command: well under the daemon's 512 MiB bulk and 1 GiB command
// limits, so an inline batch of any size is split into commands the daemon accepts. A single
// block above it still travels alone.
inline constexpr size_t kMaxInlineCommandBytes = size_t{256} << 20;

// The canonical packed form of `keys` (16 big-endian bytes each, docs/protocol.md).
std::string PackKeys(std::span<const BlockKey> keys);

}  // namespace kvtier::client
