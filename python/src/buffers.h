// Python objects -> the C++ client's value types: block keys, and the caller memory that Put and
// Get gather from and scatter into.
//
// Memory is never copied here. A BlockSet holds the Python buffer views (Py_buffer, through
// pybind11::buffer_info) of the caller's arrays for as long as the segments that point into them
// are in use, so an array cannot be freed or resized while the client copies; the caller drops the
// BlockSet only with the GIL held. Three shapes of caller memory are understood:
//
//   one contiguous buffer of N x block_bytes bytes (a 2-D numpy array, a bytearray, ...);
//   a sequence of N contiguous buffers of block_bytes each;
//   "token-strided parts" (the KV layout of transformers and most engines): a list of arrays,
//   each [outer, tokens, inner] (or [tokens, inner]) with contiguous inner rows, of which block i
//   takes tokens [start + i*T, start + (i+1)*T) of every outer row of every part, in order;
//   "paged parts" (an engine's paged KV memory, e.g. one tensor per layer): a list of arrays
//   whose first dimension is the page (block) id and whose pages are contiguous, of which block i
//   takes page block_ids[i] of every part, in order.
//
// Every function here runs with the GIL held (it touches Python objects). Errors are thrown as
// StatusError(kInvalidArgument), naming what is wrong with which argument.
#pragma once

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "client/client_types.h"
#include "common/keys.h"

namespace kvtier::python {

namespace py = pybind11;

// Keys from a list/tuple of 16-byte bytes-like objects, or from one buffer of N x 16 bytes (a
// bytes object, a numpy uint8 array of shape (N, 16)). Bytes are big-endian, high half first
// (Key128::ToBytes), the same as the hex form.
std::vector<BlockKey> KeysFromPython(const py::handle& keys);
// 16 bytes per key.
py::list KeysToPython(const std::vector<BlockKey>& keys);
py::bytes KeyToBytes(const Key128& key);
Key128 KeyFromBytes(const py::handle& obj, const char* what);

// Caller memory for `count` blocks, as segments the client reads from or writes to.
template <typename Segment>
class BlockSet {
 public:
  using Block = std::span<const Segment>;

  // Contiguous blocks: `obj` is one buffer of count x block_bytes bytes or a sequence of `count`
  // buffers of block_bytes bytes each.
  static BlockSet Contiguous(const py::handle& obj, size_t count, size_t block_bytes);
  // Token-strided parts (see the header comment); `tokens_per_block` tokens per block, the first
  // block starting at token `start_token` of every part.
  static BlockSet TokenStrided(const py::handle& parts, size_t count, size_t block_bytes,
                               size_t tokens_per_block, size_t start_token);

  // Paged parts (see the header comment): block i is page block_ids[i] of each part.
  static BlockSet Paged(const py::handle& parts, const std::vector<int64_t>& block_ids,
                        size_t block_bytes);

  std::span<const Block> blocks() const { return blocks_; }
  size_t segment_count() const { return segments_.size(); }

 private:
  static constexpr bool kWritable = std::is_same_v<Segment, client::MutableSegment>;
  void Seal();

  std::vector<py::buffer_info> views_;
  std::vector<Segment> segments_;
  std::vector<size_t> block_starts_;  // index of each block's first segment
  std::vector<Block> blocks_;
};

using ConstBlockSet = BlockSet<client::ConstSegment>;
using MutableBlockSet = BlockSet<client::MutableSegment>;

}  // namespace kvtier::python
