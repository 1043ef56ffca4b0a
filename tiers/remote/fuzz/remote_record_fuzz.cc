// remote_record_fuzz: libFuzzer target for the decoder of values fetched from a remote store,
// which may hold anything: another program's value, a truncated record, damaged bytes.
//
// Input: the value itself. It is decoded as the record of the block its own header names (so a
// valid record gets past the identity check and the payload checks are reached) and as the record
// of a fixed other block (which must then fail). Besides "no crash, no sanitizer report", a
// successful decode must re-encode to exactly the input: the decoder accepts only what the encoder
// writes, and never hands out a payload that is not the value's tail.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "tiers/remote/remote_record.h"

using namespace kvtier;
using namespace kvtier::tiers::remote;

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> value(reinterpret_cast<const std::byte*>(data), size);
  const Result<RecordHeader> header = DecodeRecordHeader(value);
  if (!header.ok()) {
    Check(header.status().code() == StatusCode::kCorruption ||
          header.status().code() == StatusCode::kChecksumMismatch);
    return 0;
  }
  const Result<RecordView> view = DecodeRecord(value, header->ns, header->key);
  if (view.ok()) {
    Check(view->payload.data() == value.data() + kRecordHeaderBytes);
    const std::string again = EncodeRecord(header->ns, header->key, view->payload);
    Check(again.size() == size && std::memcmp(again.data(), data, size) == 0);
  }
  BlockKey other = header->key;
  other.low ^= 1;
  Check(!DecodeRecord(value, header->ns, other).ok());
  return 0;
}
