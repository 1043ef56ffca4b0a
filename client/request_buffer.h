// RequestBuffer: RESP commands (arrays of bulk strings) queued for one write, without copying
// large payloads.
//
// The client encodes every command of a batch into one buffer and sends it with a single gathered
// write, then reads the replies: one round trip per batch. Small arguments (command names, packed
// keys, numbers) are copied into the buffer; payloads of AppendArgView() at or above
// kBorrowThresholdBytes, and every AppendBorrowed() range, are only referenced, so a 64 MiB block
// goes from the caller's memory to the socket with no intermediate copy. Borrowed bytes must stay
// valid and unchanged until the buffer has been sent or discarded.
//
// The buffer does not check that a command's declared argument count matches the arguments that
// follow; the Client's encoders do. Not thread-safe; one buffer is filled and sent by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::client {

class RequestBuffer {
 public:
  // Views shorter than this are copied: a small copy is cheaper than an extra iovec.
  static constexpr size_t kBorrowThresholdBytes = 4096;

  // One contiguous range to write, either inside the owned bytes or borrowed from the caller.
  struct Piece {
    bool owned = false;
    size_t offset = 0;              // owned: offset into the owned bytes
    const char* data = nullptr;     // borrowed: the caller's bytes
    size_t length = 0;
  };

  // `*<argc>\r\n`: starts a command of `argc` arguments.
  void BeginCommand(size_t argc);
  // A whole argument, copied.
  void AppendArg(std::string_view bytes);
  // A whole argument, borrowed when large (see the class comment).
  void AppendArgView(std::string_view bytes);
  // A decimal integer argument.
  void AppendArg(uint64_t value);
  // An argument written in parts: its header, then borrowed or copied parts whose lengths add up
  // to `length`, then its end.
  void AppendBulkHeader(size_t length);
  void AppendBorrowed(const void* data, size_t length);
  void AppendCopied(const void* data, size_t length);
  void EndBulk();

  size_t commands() const { return command_starts_.size(); }
  // The index of the command that byte `offset` of the request belongs to; commands() for an
  // offset at or past the end. For a write that failed part way: which command it was writing.
  size_t CommandAt(size_t offset) const;
  size_t size_bytes() const { return size_bytes_; }
  bool empty() const { return pieces_.empty(); }
  void Clear();

  const std::vector<Piece>& pieces() const { return pieces_; }
  // The bytes a piece covers.
  const char* PieceData(const Piece& piece) const {
    return piece.owned ? owned_.data() + piece.offset : piece.data;
  }
  // Every byte, concatenated: for tests and small commands.
  std::string Flatten() const;

 private:
  void AppendOwned(std::string_view bytes);
  void AppendLength(char type, size_t value);

  std::string owned_;
  std::vector<Piece> pieces_;
  std::vector<size_t> command_starts_;  // byte offset of each command's `*<argc>` header
  size_t size_bytes_ = 0;
};

}  // namespace kvtier::client
