// FakeTier: a Tier backed by a plain byte vector, for store and placement tests.
//
// Allocation is first-fit over a sorted free list: slow and simple on purpose, so that tests of
// the store do not depend on the slab allocator they are not about. It can pretend not to be
// memory (Address() returns nullptr, like NVMe or a real GPU pool), so both store code paths run,
// and it injects faults on demand: failing Write/Read with kDeviceError. Like a durable tier, it
// remembers what WriteBlock stored at each extent (identity and a hash of the bytes) and ReadBlock
// answers kChecksumMismatch when either no longer matches, e.g. after FlipByte. It records the size
// of every WriteBlocks/ReadBlocks batch, and can fail the blocks of one key only (FailBlocksOf), so
// that a batch with one bad block can be tested. HoldReads(true) makes ReadBlock wait until
// HoldReads(false): a disk that has not answered yet, for tests of who waits for it.
//
// Thread safety: all methods may be called from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "common/thread_annotations.h"
#include "tiers/room_window.h"
#include "tiers/tier.h"

namespace kvtier::testing {

class FakeTier final : public tiers::Tier {
 public:
  FakeTier(TierId id, uint64_t capacity_bytes, bool addressable = true)
      : id_(id), capacity_(capacity_bytes), addressable_(addressable), bytes_(capacity_bytes) {
    free_[0] = capacity_bytes;
  }

  TierId id() const override { return id_; }

  // Space every block takes beyond its bytes, as the NVMe tier's record header: set before the
  // first allocation.
  void set_block_overhead(uint64_t bytes) { overhead_ = bytes; }
  uint64_t FootprintOf(uint64_t bytes) const override { return bytes + overhead_; }
  // ReclaimUnit answers as the NVMe tier's does (tiers/room_window.h) rather than the victim
  // alone: set before the store evicts.
  void set_room_windows(bool on) { room_windows_ = on; }
  Extent ReclaimUnit(const Extent& victim, uint64_t room_bytes) const override {
    if (!room_windows_) return victim;
    MutexLock lock(mu_);
    return tiers::RoomWindow(free_, victim.offset, FootprintOf(room_bytes), 0, capacity_)
        .value_or(victim);
  }

  // BlocksStartingIn names the blocks written with WriteBlock(s), as the NVMe tier does, rather
  // than leaving the store to scan its index: set before the store evicts.
  void set_names_blocks(bool on) { names_blocks_ = on; }
  std::optional<std::vector<tiers::BlockIdentity>> BlocksStartingIn(
      const Extent& range) const override {
    if (!names_blocks_) return std::nullopt;
    std::vector<tiers::BlockIdentity> found;
    MutexLock lock(mu_);
    for (auto it = allocated_.lower_bound(range.offset);
         it != allocated_.end() && it->first - range.offset < range.length; ++it) {
      if (auto w = written_.find(it->first); w != written_.end())
        found.push_back(w->second.identity);
    }
    return found;
  }

  Result<Extent> Allocate(uint64_t bytes) override {
    if (std::function<void()> hook = std::exchange(on_allocate_, nullptr)) hook();
    if (bytes == 0) return InvalidArgument("empty allocation");
    const uint64_t footprint = FootprintOf(bytes);
    if (footprint > capacity_) return Rejected("larger than the fake tier");
    MutexLock lock(mu_);
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second < footprint) continue;
      Extent e{it->first, bytes};
      uint64_t rest = it->second - footprint;
      uint64_t rest_offset = it->first + footprint;
      free_.erase(it);
      if (rest > 0) free_[rest_offset] = rest;
      used_ += footprint;
      ++blocks_;
      allocated_[e.offset] = bytes;
      return e;
    }
    return Busy("fake tier is full");
  }

  void Free(const Extent& e) override {
    MutexLock lock(mu_);
    auto it = allocated_.find(e.offset);
    if (it == allocated_.end() || it->second != e.length) {
      ++bad_frees_;
      return;
    }
    allocated_.erase(it);
    must_survive_.erase(e.offset);
    used_ -= FootprintOf(e.length);
    --blocks_;
    auto [pos, inserted] = free_.emplace(e.offset, FootprintOf(e.length));
    // Merge with the neighbours so the space can hold larger blocks again.
    auto next = std::next(pos);
    if (next != free_.end() && pos->first + pos->second == next->first) {
      pos->second += next->second;
      free_.erase(next);
    }
    if (pos != free_.begin()) {
      auto prev = std::prev(pos);
      if (prev->first + prev->second == pos->first) {
        prev->second += pos->second;
        free_.erase(pos);
      }
    }
  }

  Status Write(const Extent& e, std::span<const std::byte> src) override {
    if (fail_io_) return DeviceError("injected write failure");
    if (src.size() > e.length) return InvalidArgument("write larger than extent");
    std::memcpy(bytes_.data() + e.offset, src.data(), src.size());
    return Status::Ok();
  }

  Status Read(const Extent& e, std::span<std::byte> dst) override {
    if (fail_io_) return DeviceError("injected read failure");
    if (dst.size() > e.length) return InvalidArgument("read larger than extent");
    std::memcpy(dst.data(), bytes_.data() + e.offset, dst.size());
    return Status::Ok();
  }

  Status WriteBlock(const Extent& e, const tiers::BlockIdentity& identity,
                    std::span<const std::byte> src) override {
    if (Fails(identity)) return DeviceError("injected write failure of one block");
    KVTIER_RETURN_IF_ERROR(Write(e, src));
    MutexLock lock(mu_);
    written_[e.offset] = Written{identity, Hash(src)};
    ++block_writes_;
    return Status::Ok();
  }

  Status ReadBlock(const Extent& e, const tiers::BlockIdentity& identity,
                   std::span<std::byte> dst) override {
    if (Fails(identity)) return DeviceError("injected read failure of one block");
    reads_started_.fetch_add(1);
    while (hold_reads_.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    KVTIER_RETURN_IF_ERROR(Read(e, dst));
    MutexLock lock(mu_);
    auto it = written_.find(e.offset);
    if (it == written_.end()) return Status::Ok();  // stored with plain Write: nothing to check
    if (it->second.identity.key != identity.key || it->second.identity.ns != identity.ns ||
        (dst.size() == e.length && it->second.hash != Hash(dst))) {
      ++checksum_failures_;
      return ChecksumMismatch("fake tier: stored bytes do not match the block");
    }
    return Status::Ok();
  }

  void WriteBlocks(std::span<tiers::BlockWrite> writes) override {
    {
      MutexLock lock(mu_);
      write_batches_.push_back(writes.size());
    }
    Tier::WriteBlocks(writes);
    MutexLock lock(mu_);
    for (const tiers::BlockWrite& w : writes) {
      if (w.status.ok() && w.must_survive_restart) must_survive_.insert(w.extent.offset);
    }
  }
  Status MustSurviveRestart(const Extent& e) override {
    MutexLock lock(mu_);
    if (!written_.contains(e.offset)) return NotFound("fake tier: no block there");
    must_survive_.insert(e.offset);
    return Status::Ok();
  }
  // Blocks written with must_survive_restart or made so by MustSurviveRestart (and not freed).
  size_t must_survive_count() const {
    MutexLock lock(mu_);
    return must_survive_.size();
  }
  void ReadBlocks(std::span<tiers::BlockRead> reads) override {
    {
      MutexLock lock(mu_);
      read_batches_.push_back(reads.size());
    }
    Tier::ReadBlocks(reads);
  }
  // The sizes of the WriteBlocks / ReadBlocks batches so far, in order.
  std::vector<size_t> write_batches() const {
    MutexLock lock(mu_);
    return write_batches_;
  }
  std::vector<size_t> read_batches() const {
    MutexLock lock(mu_);
    return read_batches_;
  }
  // Runs `hook` at the start of the next Allocate (once), on the allocating thread: something
  // that happens while a move waits for its room here. Not thread-safe: set it before the call.
  void OnNextAllocate(std::function<void()> hook) { on_allocate_ = std::move(hook); }
  // WriteBlock/ReadBlock of a block with this key answer kDeviceError from now on.
  void FailBlocksOf(const BlockKey& key) {
    MutexLock lock(mu_);
    failing_keys_.push_back(key);
  }

  void RecordUse(const Extent& e) override {
    MutexLock lock(mu_);
    uses_.push_back(e.offset);
  }
  // The offsets RecordUse was called with, in order.
  std::vector<uint64_t> uses() const {
    MutexLock lock(mu_);
    return uses_;
  }

  void DropRecoveredCopies(const NamespaceId& ns, const std::optional<BlockKey>& key) override {
    MutexLock lock(mu_);
    dropped_recovered_.push_back(key.value_or(kWholeNamespace));
  }
  // A whole namespace's drop, in dropped_recovered().
  static constexpr BlockKey kWholeNamespace{{~uint64_t{0}, ~uint64_t{0}}};
  // The keys DropRecoveredCopies was called with, in order.
  std::vector<BlockKey> dropped_recovered() const {
    MutexLock lock(mu_);
    return dropped_recovered_;
  }

  // WriteBlock calls that stored a block.
  uint64_t block_writes() const {
    MutexLock lock(mu_);
    return block_writes_;
  }
  // Damages the stored bytes at `offset` (as a failing device would).
  void FlipByte(uint64_t offset) { bytes_[offset] ^= std::byte{0x40}; }
  uint64_t checksum_failures() const {
    MutexLock lock(mu_);
    return checksum_failures_;
  }

  std::byte* Address(const Extent& e) override {
    return addressable_ ? bytes_.data() + e.offset : nullptr;
  }

  tiers::TierStats Stats() const override {
    MutexLock lock(mu_);
    tiers::TierStats s;
    s.capacity_bytes = capacity_;
    s.used_bytes = used_;
    s.reserved_bytes = used_;
    s.block_count = blocks_;
    return s;
  }

  void set_fail_io(bool fail) { fail_io_ = fail; }
  void HoldReads(bool hold) { hold_reads_ = hold; }
  // ReadBlock calls so far, held ones included.
  uint64_t reads_started() const { return reads_started_.load(); }
  uint64_t bad_frees() const {
    MutexLock lock(mu_);
    return bad_frees_;
  }

 private:
  struct Written {
    tiers::BlockIdentity identity;
    size_t hash;
  };
  bool Fails(const tiers::BlockIdentity& identity) const {
    MutexLock lock(mu_);
    return std::find(failing_keys_.begin(), failing_keys_.end(), identity.key) !=
           failing_keys_.end();
  }
  static size_t Hash(std::span<const std::byte> bytes) {
    return std::hash<std::string_view>()(
        std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  }

  const TierId id_;
  const uint64_t capacity_;
  uint64_t overhead_ = 0;
  bool room_windows_ = false;
  bool names_blocks_ = false;
  const bool addressable_;
  std::vector<std::byte> bytes_;
  std::atomic<bool> fail_io_{false};
  std::function<void()> on_allocate_;
  std::atomic<bool> hold_reads_{false};
  std::atomic<uint64_t> reads_started_{0};
  mutable Mutex mu_;
  std::map<uint64_t, uint64_t> free_ GUARDED_BY(mu_);       // offset -> length
  std::map<uint64_t, uint64_t> allocated_ GUARDED_BY(mu_);  // offset -> length
  uint64_t used_ GUARDED_BY(mu_) = 0;
  uint64_t blocks_ GUARDED_BY(mu_) = 0;
  uint64_t bad_frees_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, Written> written_ GUARDED_BY(mu_);  // offset -> what WriteBlock stored
  uint64_t checksum_failures_ GUARDED_BY(mu_) = 0;
  uint64_t block_writes_ GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> uses_ GUARDED_BY(mu_);
  std::vector<BlockKey> dropped_recovered_ GUARDED_BY(mu_);
  std::vector<size_t> write_batches_ GUARDED_BY(mu_);
  std::vector<size_t> read_batches_ GUARDED_BY(mu_);
  std::vector<BlockKey> failing_keys_ GUARDED_BY(mu_);
  std::set<uint64_t> must_survive_ GUARDED_BY(mu_);  // offsets
};

}  // namespace kvtier::testing
