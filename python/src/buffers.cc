#include "buffers.h"

#include <cstring>
#include <string>

#include "status_error.h"

namespace kvtier::python {
namespace {

[[noreturn]] void Invalid(const std::string& message) {
  throw StatusError(InvalidArgument(message));
}

// a * b and a + b, or InvalidArgument naming `what` when the result does not fit: the sizes come
// from the caller (a Namespace built by hand may claim any block size), and a wrapped result
// would pass the size checks and point past the buffer.
size_t Product(size_t a, size_t b, const std::string& what) {
  size_t out;
  if (__builtin_mul_overflow(a, b, &out)) Invalid(what + ": the size overflows");
  return out;
}
size_t Sum(size_t a, size_t b, const std::string& what) {
  size_t out;
  if (__builtin_add_overflow(a, b, &out)) Invalid(what + ": the size overflows");
  return out;
}

// A view of `obj` through the buffer protocol; InvalidArgument naming `what` when `obj` has none
// (a torch tensor must be converted first: kvtier.client does that) or refuses to be written.
py::buffer_info View(const py::handle& obj, bool writable, const std::string& what) {
  if (!PyObject_CheckBuffer(obj.ptr())) {
    Invalid(what + ": a " + std::string(py::str(py::type::of(obj).attr("__name__"))) +
            " does not expose the buffer protocol (pass a numpy array, bytes, bytearray, "
            "memoryview or CPU torch tensor)");
  }
  try {
    return py::reinterpret_borrow<py::buffer>(obj).request(writable);
  } catch (py::error_already_set& e) {
    Invalid(what + ": " + (writable ? "not a writable buffer: " : "not a readable buffer: ") +
            std::string(py::str(e.value())));
  }
}

bool IsCContiguous(const py::buffer_info& info) {
  py::ssize_t expected = info.itemsize;
  for (py::ssize_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] != 1 && info.strides[d] != expected) return false;
    expected *= info.shape[d];
  }
  return true;
}

size_t ByteSize(const py::buffer_info& info) {
  return static_cast<size_t>(info.size) * static_cast<size_t>(info.itemsize);
}

// The geometry of one token-strided part in bytes: [outer, tokens, row].
struct PartGeometry {
  std::byte* base = nullptr;
  size_t outer = 1;
  size_t tokens = 0;
  size_t row_bytes = 0;
  py::ssize_t outer_stride = 0;
  py::ssize_t token_stride = 0;
};

PartGeometry Geometry(const py::buffer_info& info, const std::string& what) {
  if (info.ndim != 2 && info.ndim != 3) {
    Invalid(what + ": expected a 2-D [tokens, inner] or 3-D [outer, tokens, inner] array, got " +
            std::to_string(info.ndim) + " dimensions");
  }
  const py::ssize_t n = info.ndim;
  for (py::ssize_t d = 0; d < n; ++d) {
    if (info.strides[d] < 0) Invalid(what + ": negative strides are not supported");
  }
  if (info.shape[n - 1] > 1 && info.strides[n - 1] != info.itemsize) {
    Invalid(what + ": the last dimension must be contiguous (stride " +
            std::to_string(info.strides[n - 1]) + " bytes, item " + std::to_string(info.itemsize) +
            " bytes)");
  }
  PartGeometry g;
  g.base = static_cast<std::byte*>(info.ptr);
  g.row_bytes = static_cast<size_t>(info.shape[n - 1] * info.itemsize);
  g.tokens = static_cast<size_t>(info.shape[n - 2]);
  g.token_stride = info.strides[n - 2];
  if (n == 3) {
    g.outer = static_cast<size_t>(info.shape[0]);
    g.outer_stride = info.strides[0];
  }
  return g;
}

}  // namespace

Key128 KeyFromBytes(const py::handle& obj, const char* what) {
  py::buffer_info info = View(obj, false, what);
  if (ByteSize(info) != 16 || !IsCContiguous(info)) {
    Invalid(std::string(what) + ": a key is 16 contiguous bytes, got " +
            std::to_string(ByteSize(info)));
  }
  return Key128::FromBytes(static_cast<const std::byte*>(info.ptr));
}

std::vector<BlockKey> KeysFromPython(const py::handle& keys) {
  std::vector<BlockKey> out;
  if (py::isinstance<py::list>(keys) || py::isinstance<py::tuple>(keys)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(keys);
    out.reserve(seq.size());
    for (size_t i = 0; i < seq.size(); ++i) {
      const std::string what = "keys[" + std::to_string(i) + "]";
      out.push_back(BlockKey{KeyFromBytes(seq[i], what.c_str())});
    }
    return out;
  }
  py::buffer_info info = View(keys, false, "keys");
  if (!IsCContiguous(info) || ByteSize(info) % 16 != 0) {
    Invalid("keys: expected a list of 16-byte keys or one contiguous buffer of N x 16 bytes, got " +
            std::to_string(ByteSize(info)) + " bytes");
  }
  const auto* p = static_cast<const std::byte*>(info.ptr);
  out.reserve(ByteSize(info) / 16);
  for (size_t at = 0; at < ByteSize(info); at += 16)
    out.push_back(BlockKey{Key128::FromBytes(p + at)});
  return out;
}

py::bytes KeyToBytes(const Key128& key) {
  std::byte raw[16];
  key.ToBytes(raw);
  return py::bytes(reinterpret_cast<const char*>(raw), sizeof(raw));
}

py::list KeysToPython(const std::vector<BlockKey>& keys) {
  py::list out(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) out[i] = KeyToBytes(keys[i]);
  return out;
}

template <typename Segment>
void BlockSet<Segment>::Seal() {
  blocks_.reserve(block_starts_.size());
  for (size_t i = 0; i < block_starts_.size(); ++i) {
    const size_t end = i + 1 < block_starts_.size() ? block_starts_[i + 1] : segments_.size();
    blocks_.emplace_back(segments_.data() + block_starts_[i], end - block_starts_[i]);
  }
}

template <typename Segment>
BlockSet<Segment> BlockSet<Segment>::Contiguous(const py::handle& obj, size_t count,
                                                size_t block_bytes) {
  BlockSet set;
  const bool sequence = py::isinstance<py::list>(obj) || py::isinstance<py::tuple>(obj);
  if (!sequence) {
    set.views_.push_back(View(obj, kWritable, "blocks"));
    const py::buffer_info& info = set.views_.back();
    if (!IsCContiguous(info)) Invalid("blocks: the buffer is not C-contiguous");
    const size_t need = Product(count, block_bytes, "blocks");
    if (ByteSize(info) != need) {
      Invalid("blocks: " + std::to_string(count) + " blocks of " + std::to_string(block_bytes) +
              " bytes need " + std::to_string(need) + " bytes, the buffer has " +
              std::to_string(ByteSize(info)));
    }
    auto* base = static_cast<std::byte*>(info.ptr);
    for (size_t i = 0; i < count; ++i) {
      set.block_starts_.push_back(i);
      set.segments_.push_back(Segment{base + i * block_bytes, block_bytes});
    }
    set.Seal();
    return set;
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(obj);
  if (seq.size() != count) {
    Invalid("blocks: " + std::to_string(count) + " keys but " + std::to_string(seq.size()) +
            " buffers");
  }
  set.views_.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    const std::string what = "blocks[" + std::to_string(i) + "]";
    set.views_.push_back(View(seq[i], kWritable, what));
    const py::buffer_info& info = set.views_.back();
    if (!IsCContiguous(info)) Invalid(what + ": the buffer is not C-contiguous");
    if (ByteSize(info) != block_bytes) {
      Invalid(what + ": " + std::to_string(ByteSize(info)) + " bytes, the namespace's blocks are " +
              std::to_string(block_bytes));
    }
    set.block_starts_.push_back(i);
    set.segments_.push_back(Segment{static_cast<std::byte*>(info.ptr), block_bytes});
  }
  set.Seal();
  return set;
}

template <typename Segment>
BlockSet<Segment> BlockSet<Segment>::TokenStrided(const py::handle& parts, size_t count,
                                                  size_t block_bytes, size_t tokens_per_block,
                                                  size_t start_token) {
  if (!py::isinstance<py::list>(parts) && !py::isinstance<py::tuple>(parts)) {
    Invalid("parts: expected a list of arrays shaped [outer, tokens, inner]");
  }
  BlockSet set;
  py::sequence seq = py::reinterpret_borrow<py::sequence>(parts);
  std::vector<PartGeometry> geometry;
  size_t per_block = 0;
  const size_t end_token = Sum(start_token, Product(count, tokens_per_block, "parts"), "parts");
  for (size_t p = 0; p < seq.size(); ++p) {
    const std::string what = "parts[" + std::to_string(p) + "]";
    set.views_.push_back(View(seq[p], kWritable, what));
    geometry.push_back(Geometry(set.views_.back(), what));
    const PartGeometry& g = geometry.back();
    if (g.tokens < end_token) {
      Invalid(what + ": has " + std::to_string(g.tokens) + " tokens, blocks need tokens up to " +
              std::to_string(end_token));
    }
    per_block =
        Sum(per_block, Product(Product(g.outer, tokens_per_block, what), g.row_bytes, what), what);
  }
  if (count > 0 && per_block != block_bytes) {
    Invalid("parts: one block of " + std::to_string(tokens_per_block) + " tokens takes " +
            std::to_string(per_block) + " bytes from the parts, the namespace's blocks are " +
            std::to_string(block_bytes));
  }
  for (size_t i = 0; i < count; ++i) {
    set.block_starts_.push_back(set.segments_.size());
    const size_t first = start_token + i * tokens_per_block;
    for (const PartGeometry& g : geometry) {
      const bool dense = g.token_stride == static_cast<py::ssize_t>(g.row_bytes);
      for (size_t o = 0; o < g.outer; ++o) {
        std::byte* row = g.base + o * g.outer_stride + first * g.token_stride;
        if (dense) {
          set.segments_.push_back(Segment{row, tokens_per_block * g.row_bytes});
          continue;
        }
        for (size_t t = 0; t < tokens_per_block; ++t) {
          set.segments_.push_back(Segment{row + t * g.token_stride, g.row_bytes});
        }
      }
    }
  }
  set.Seal();
  return set;
}

template <typename Segment>
BlockSet<Segment> BlockSet<Segment>::Paged(const py::handle& parts,
                                           const std::vector<int64_t>& block_ids,
                                           size_t block_bytes) {
  if (!py::isinstance<py::list>(parts) && !py::isinstance<py::tuple>(parts)) {
    Invalid("pages: expected a list of arrays shaped [num_pages, ...]");
  }
  BlockSet set;
  py::sequence seq = py::reinterpret_borrow<py::sequence>(parts);
  struct Pages {
    std::byte* base;
    size_t count;
    py::ssize_t stride;
    size_t page_bytes;
  };
  std::vector<Pages> pages;
  size_t per_block = 0;
  for (size_t p = 0; p < seq.size(); ++p) {
    const std::string what = "pages[" + std::to_string(p) + "]";
    set.views_.push_back(View(seq[p], kWritable, what));
    const py::buffer_info& info = set.views_.back();
    if (info.ndim < 1 || info.strides[0] < 0) {
      Invalid(what + ": expected an array whose first dimension (non-negative stride) is the page");
    }
    // One page must be C-contiguous: check the dimensions after the first.
    py::ssize_t expected = info.itemsize;
    for (py::ssize_t d = info.ndim - 1; d >= 1; --d) {
      if (info.shape[d] != 1 && info.strides[d] != expected) {
        Invalid(what + ": a page (all dimensions after the first) is not C-contiguous");
      }
      expected *= info.shape[d];
    }
    pages.push_back(Pages{static_cast<std::byte*>(info.ptr), static_cast<size_t>(info.shape[0]),
                          info.strides[0], static_cast<size_t>(expected)});
    per_block += static_cast<size_t>(expected);
  }
  if (!block_ids.empty() && per_block != block_bytes) {
    Invalid("pages: one page of every part is " + std::to_string(per_block) +
            " bytes, the namespace's blocks are " + std::to_string(block_bytes));
  }
  for (size_t i = 0; i < block_ids.size(); ++i) {
    set.block_starts_.push_back(set.segments_.size());
    for (const Pages& p : pages) {
      if (block_ids[i] < 0 || static_cast<size_t>(block_ids[i]) >= p.count) {
        Invalid("block_ids[" + std::to_string(i) + "]: page " + std::to_string(block_ids[i]) +
                " is outside [0, " + std::to_string(p.count) + ")");
      }
      set.segments_.push_back(Segment{p.base + block_ids[i] * p.stride, p.page_bytes});
    }
  }
  set.Seal();
  return set;
}

template class BlockSet<client::ConstSegment>;
template class BlockSet<client::MutableSegment>;

}  // namespace kvtier::python
