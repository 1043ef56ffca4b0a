// CommandBatch: Redis commands (arrays of bulk strings) encoded for one gathered write.
//
// A batch holds the commands that one round sends to one node, pipelined: they go out in one
// write, and the node answers them in order. Small arguments are copied into the batch; large
// ones (a block's payload) are only referenced, so a value goes from the caller's memory to the
// socket without a copy. Referenced bytes must stay valid and unchanged until the batch has been
// sent or discarded. Headers are written with the project's RESP writer (common/resp), the same
// framing the daemon speaks. Not synchronised; one owner.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvtier::tiers::remote {

class CommandBatch {
 public:
  // Arguments shorter than this are copied: a small copy is cheaper than one more iovec.
  static constexpr size_t kBorrowThresholdBytes = 4096;

  // Starts a command of `argc` arguments; exactly that many Arg/ArgParts calls must follow.
  void Begin(size_t argc);
  // One argument.
  void Arg(std::string_view bytes);
  // One argument made of `parts` sent back to back (a record header and its payload).
  void ArgParts(std::span<const std::string_view> parts);
  // A whole command of short arguments: Begin(args.size()) then Arg() for each.
  void Command(std::initializer_list<std::string_view> args);

  size_t commands() const { return commands_; }
  size_t size_bytes() const { return size_bytes_; }
  // The bytes to write, in order; they point into the batch and the borrowed arguments and stay
  // valid while neither changes.
  std::vector<std::string_view> Pieces() const;

 private:
  struct Piece {
    bool owned = false;
    size_t offset = 0;           // owned: where in owned_
    const char* data = nullptr;  // borrowed: the caller's bytes
    size_t length = 0;
  };

  void AppendOwned(std::string_view bytes);
  void AppendPart(std::string_view part);

  std::string owned_;
  std::vector<Piece> pieces_;
  size_t commands_ = 0;
  size_t size_bytes_ = 0;
};

}  // namespace kvtier::tiers::remote
