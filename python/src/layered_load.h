// Loads into an engine's paged KV memory that copy layer by layer, so that the engine computes
// layer l as soon as layer l of every block is in (vLLM's wait_for_layer_load) instead of after
// the whole prefix.
//
// A block of paged parts (buffers.h) is the pages of every part in order; an engine's parts are
// `parts_per_layer` consecutive parts per layer (vLLM: one per layer, or K and V apart). The copy
// out of kvtierd's arena goes layer by layer over all the blocks leased, and after each layer the
// LoadProgress says so. Layers are published only when every block was leased from the arena in
// one go; otherwise (some blocks are read inline, from NVMe) nothing is published until the load
// ends. The load's end (Finish) releases every waiter whatever it served: the caller then learns
// from the count served which blocks it must recompute.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

#include "client/client_types.h"

namespace kvtier::python {

// Thread-safe: one thread loads, others wait.
class LoadProgress {
 public:
  // Returns once `layers` layers are in or the load has ended; false when timeout_s (< 0:
  // forever) ran out first.
  bool WaitForLayers(size_t layers, double timeout_s);
  void PublishLayers(size_t layers);
  // The load ended, `served` leading blocks whole. The first call counts.
  void Finish(size_t served);
  bool finished() const;
  size_t served() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  size_t layers_ = 0;
  bool finished_ = false;
  size_t served_ = 0;
};

class LayeredCopier : public client::SlotCopier {
 public:
  // blocks: the destination of each key (Paged parts); their segments, parts_per_layer a layer.
  LayeredCopier(std::span<const client::MutableBlock> blocks, size_t parts_per_layer,
                LoadProgress& progress)
      : blocks_(blocks), parts_per_layer_(parts_per_layer), progress_(progress) {}

  // Only remembers the slot: the copies are made in Wait, layer by layer.
  Status Start(size_t index, std::span<std::byte> slot) override;
  Status Wait() override;

 private:
  std::span<const client::MutableBlock> blocks_;
  size_t parts_per_layer_;
  LoadProgress& progress_;
  std::vector<std::pair<size_t, std::span<std::byte>>> started_;
};

}  // namespace kvtier::python
