#include "layered_load.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

namespace kvtier::python {

bool LoadProgress::WaitForLayers(size_t layers, double timeout_s) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return finished_ || layers_ >= layers; };
  if (timeout_s < 0) {
    cv_.wait(lock, ready);
    return true;
  }
  return cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), ready);
}

void LoadProgress::PublishLayers(size_t layers) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    layers_ = std::max(layers_, layers);
  }
  cv_.notify_all();
}

void LoadProgress::Finish(size_t served) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    served_ = served;
  }
  cv_.notify_all();
}

bool LoadProgress::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

size_t LoadProgress::served() const {
  std::lock_guard<std::mutex> lock(mu_);
  return served_;
}

Status LayeredCopier::Start(size_t index, std::span<std::byte> slot) {
  if (index >= blocks_.size()) {
    return Internal("layered copy: block " + std::to_string(index) + " of " +
                    std::to_string(blocks_.size()));
  }
  started_.emplace_back(index, slot);
  return Status::Ok();
}

Status LayeredCopier::Wait() {
  // Every key leased from the arena at once: the layers can be published as they land. (Blocks
  // read inline come in batches after the leased ones: then only the load's end is published.)
  const bool publish = started_.size() == blocks_.size();
  std::vector<size_t> offsets(started_.size(), 0);  // where the next part lies in each slot
  for (size_t first = 0, layer = 1;; first += parts_per_layer_, ++layer) {
    bool copied_any = false;
    for (size_t s = 0; s < started_.size(); ++s) {
      const auto& [index, slot] = started_[s];
      const client::MutableBlock& block = blocks_[index];
      for (size_t part = first; part < first + parts_per_layer_ && part < block.size(); ++part) {
        const client::MutableSegment& seg = block[part];
        if (offsets[s] + seg.bytes > slot.size()) {
          started_.clear();
          return Internal("layered copy: the block's parts overrun its slot");
        }
        std::memcpy(seg.data, slot.data() + offsets[s], seg.bytes);
        offsets[s] += seg.bytes;
        copied_any = true;
      }
    }
    if (!copied_any) break;
    if (publish) progress_.PublishLayers(layer);
  }
  started_.clear();
  return Status::Ok();
}

}  // namespace kvtier::python
