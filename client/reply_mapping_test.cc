#include "client/reply_mapping.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/resp/reply_writer.h"

namespace kvtier::client {
namespace {

using resp::Reply;
using resp::ReplyType;

Reply Array(std::vector<Reply> elements) {
  return Reply::Aggregate(ReplyType::kArray, std::move(elements));
}

// The word table itself (and that every code reads back) is tested in common/resp.

TEST(ReplyMappingTest, ProtocolDocWordsMap) {
  EXPECT_EQ(StatusCodeFromWord("OK"), StatusCode::kOk);
  EXPECT_EQ(StatusCodeFromWord("EXISTS"), StatusCode::kAlreadyExists);
  EXPECT_EQ(StatusCodeFromWord("NOTFOUND"), StatusCode::kNotFound);
  EXPECT_EQ(StatusCodeFromWord("BUSY"), StatusCode::kBusy);
  EXPECT_EQ(StatusCodeFromWord("REJECTED"), StatusCode::kRejected);
  EXPECT_EQ(StatusCodeFromWord("INVALID"), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusCodeFromWord("TIMEOUT"), StatusCode::kTimeout);
  EXPECT_EQ(StatusCodeFromWord("DEVICE"), StatusCode::kDeviceError);
  EXPECT_EQ(StatusCodeFromWord("SHUTDOWN"), StatusCode::kShuttingDown);
  EXPECT_EQ(StatusCodeFromWord("NOAUTH"), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeFromWord("WRONGPASS"), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeFromWord("NOPERM"), StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusCodeFromWord("INTERNAL"), StatusCode::kInternal);
  EXPECT_EQ(StatusCodeFromWord("ERR"), StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusCodeFromWord("busy"), StatusCode::kBusy);
  bool known = true;
  EXPECT_EQ(StatusCodeFromWord("WAT", &known), StatusCode::kInternal);
  EXPECT_FALSE(known);
  // StatusCodeName's spellings keep their underscores (reply_mapping.h): run together they are
  // unknown words.
  EXPECT_EQ(StatusCodeFromWord("DEVICE_ERROR", &known), StatusCode::kDeviceError);
  EXPECT_TRUE(known);
  EXPECT_EQ(StatusCodeFromWord("ALREADY_EXISTS", &known), StatusCode::kAlreadyExists);
  EXPECT_TRUE(known);
  EXPECT_EQ(StatusCodeFromWord("DEVICEERROR", &known), StatusCode::kInternal);
  EXPECT_FALSE(known);
  EXPECT_EQ(StatusCodeFromWord("ALREADYEXISTS", &known), StatusCode::kInternal);
  EXPECT_FALSE(known);
}

TEST(ReplyMappingTest, ErrorRepliesKeepTheirMessage) {
  const Status s = ErrorReplyToStatus(Reply::Error("BUSY host tier is full"), "KVT.PUT");
  EXPECT_EQ(s.code(), StatusCode::kBusy);
  EXPECT_EQ(s.message(), "KVT.PUT: host tier is full");
  const Status unknown = ErrorReplyToStatus(Reply::Error("MOVED 3999 1.2.3.4:6381"), "GET");
  EXPECT_EQ(unknown.code(), StatusCode::kInternal);
  EXPECT_NE(unknown.message().find("MOVED 3999"), std::string::npos);
  // An error reply is never success, whatever its first word.
  EXPECT_FALSE(ErrorReplyToStatus(Reply::Error("OK"), "X").ok());
}

TEST(ReplyMappingTest, DecodesRegisterFromMapOrFlatArray) {
  const std::string hex = "000102030405060708090a0b0c0d0e0f";
  for (ReplyType type : {ReplyType::kMap, ReplyType::kArray}) {
    Reply reply = Reply::Aggregate(type, {Reply::Bulk("ns"), Reply::Bulk(hex),
                                          Reply::Bulk("block_bytes"), Reply::Integer(2097152)});
    Result<NamespaceInfo> info = DecodeRegister(reply);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    EXPECT_EQ(info->id.ToHex(), hex);
    EXPECT_EQ(info->block_bytes, 2097152u);
  }
  EXPECT_EQ(DecodeRegister(Reply::Error("INVALID kv_dtype: unknown")).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodeRegister(Array({Reply::Bulk("ns"), Reply::Bulk("xyz")})).status().code(),
            StatusCode::kInternal);
}

TEST(ReplyMappingTest, DecodesLookupWithRawOrDigitTierCodes) {
  Result<LookupResult> raw =
      DecodeLookup(Array({Reply::Integer(3), Reply::Bulk(std::string("\0\1\2", 3))}), 5);
  ASSERT_TRUE(raw.ok()) << raw.status().ToString();
  EXPECT_EQ(raw->prefix, 3u);
  EXPECT_EQ(raw->tiers, (std::vector<TierId>{TierId::kGpu, TierId::kHost, TierId::kNvme}));
  Result<LookupResult> digits = DecodeLookup(Array({Reply::Integer(2), Reply::Bulk("12")}), 2);
  ASSERT_TRUE(digits.ok());
  EXPECT_EQ(digits->tiers, (std::vector<TierId>{TierId::kHost, TierId::kNvme}));
  Result<LookupResult> remote = DecodeLookup(Array({Reply::Integer(2), Reply::Bulk("13")}), 2);
  ASSERT_TRUE(remote.ok()) << remote.status().ToString();
  EXPECT_EQ(remote->tiers, (std::vector<TierId>{TierId::kHost, TierId::kRemote}));
  Result<LookupResult> none = DecodeLookup(Array({Reply::Integer(0), Reply::Bulk("")}), 4);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->prefix, 0u);
}

TEST(ReplyMappingTest, LookupRepliesThatBreakTheProtocolAreInternal) {
  // A prefix longer than the keys asked, a tier string of the wrong length, a tier code out of
  // range, a wrong shape.
  for (const Reply& bad :
       {Array({Reply::Integer(3), Reply::Bulk("111")}),
        Array({Reply::Integer(2), Reply::Bulk("1")}), Array({Reply::Integer(1), Reply::Bulk("7")}),
        Array({Reply::Integer(-1), Reply::Bulk("")}), Reply::Integer(1)}) {
    EXPECT_EQ(DecodeLookup(bad, 2).status().code(), StatusCode::kInternal) << bad.DebugString();
  }
}

TEST(ReplyMappingTest, DecodesPerKeyStatuses) {
  Result<std::vector<Status>> s = DecodeStatusArray(
      Array({Reply::Simple("OK"), Reply::Simple("EXISTS"), Reply::Bulk("BUSY"),
             Reply::Simple("REJECTED"), Reply::Simple("INVALID"), Reply::Error("TIMEOUT slow")}),
      6, "KVT.PUT");
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE((*s)[0].ok());
  EXPECT_EQ((*s)[1].code(), StatusCode::kAlreadyExists);
  EXPECT_EQ((*s)[2].code(), StatusCode::kBusy);
  EXPECT_EQ((*s)[3].code(), StatusCode::kRejected);
  EXPECT_EQ((*s)[4].code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*s)[5].code(), StatusCode::kTimeout);
  EXPECT_EQ(DecodeStatusArray(Array({Reply::Simple("OK")}), 2, "KVT.PUT").status().code(),
            StatusCode::kInternal);
}

TEST(ReplyMappingTest, DecodesGrantsAndFillsAShortReplyWithMisses) {
  Result<std::vector<SlotGrant>> g =
      DecodeGrants(Array({Array({Reply::Simple("OK"), Reply::Integer(7), Reply::Integer(4096),
                                 Reply::Integer(512)}),
                          Array({Reply::Simple("NOTFOUND"), Reply::Integer(0), Reply::Integer(0),
                                 Reply::Integer(0)})}),
                   3, "KVT.ACQUIRE");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_EQ(g->size(), 3u);
  EXPECT_TRUE((*g)[0].status.ok());
  EXPECT_EQ((*g)[0].id, 7u);
  EXPECT_EQ((*g)[0].offset, 4096u);
  EXPECT_EQ((*g)[0].length, 512u);
  EXPECT_EQ((*g)[1].status.code(), StatusCode::kNotFound);
  EXPECT_EQ((*g)[2].status.code(), StatusCode::kNotFound);
  // Reservations have three fields.
  Result<std::vector<SlotGrant>> r =
      DecodeGrants(Array({Array({Reply::Simple("OK"), Reply::Integer(9), Reply::Integer(0)})}), 1,
                   "KVT.RESERVE");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[0].id, 9u);
  EXPECT_EQ(DecodeGrants(Array({Reply::Integer(1)}), 1, "KVT.RESERVE").status().code(),
            StatusCode::kInternal);
  EXPECT_EQ(
      DecodeGrants(Reply::Error("NOTFOUND unknown namespace"), 1, "KVT.RESERVE").status().code(),
      StatusCode::kNotFound);
}

TEST(ReplyMappingTest, DecodesTheTierOfAGrant) {
  Result<std::vector<SlotGrant>> g =
      DecodeGrants(Array({Array({Reply::Simple("OK"), Reply::Integer(7), Reply::Integer(4096),
                                 Reply::Integer(512), Reply::Integer(0)}),
                          Array({Reply::Simple("OK"), Reply::Integer(8), Reply::Integer(0),
                                 Reply::Integer(512), Reply::Integer(1)}),
                          Array({Reply::Simple("OK"), Reply::Integer(9), Reply::Integer(0),
                                 Reply::Integer(512)})}),
                   3, "KVT.ACQUIRE");
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)[0].tier, TierId::kGpu);
  EXPECT_EQ((*g)[1].tier, TierId::kHost);
  EXPECT_EQ((*g)[2].tier, TierId::kHost);  // no fifth element: the arena
  EXPECT_EQ(DecodeGrants(Array({Array({Reply::Simple("OK"), Reply::Integer(7), Reply::Integer(0),
                                       Reply::Integer(512), Reply::Integer(3)})}),
                         1, "KVT.ACQUIRE")
                .status()
                .code(),
            StatusCode::kInternal);
}

TEST(ReplyMappingTest, DecodesGpuAttach) {
  Result<GpuPoolExport> p = DecodeGpuAttach(Reply::Aggregate(
      ReplyType::kMap, {Reply::Bulk("kind"), Reply::Bulk("memfd"), Reply::Bulk("pool_bytes"),
                        Reply::Integer(1 << 20), Reply::Bulk("device"), Reply::Integer(-1),
                        Reply::Bulk("handle"), Reply::Bulk("")}));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->kind, "memfd");
  EXPECT_EQ(p->pool_bytes, 1u << 20);
  EXPECT_EQ(p->device, -1);
  EXPECT_TRUE(p->handle.empty());
  EXPECT_EQ(DecodeGpuAttach(Array({Reply::Bulk("kind"), Reply::Bulk("memfd")})).status().code(),
            StatusCode::kInternal);
  EXPECT_EQ(DecodeGpuAttach(Reply::Error("NOTFOUND KVT.GPUATTACH: no GPU tier")).status().code(),
            StatusCode::kNotFound);
}

TEST(ReplyMappingTest, DecodesScalars) {
  EXPECT_TRUE(DecodeOk(Reply::Simple("OK"), "SET").ok());
  EXPECT_TRUE(DecodeOk(Reply::Simple("PONG"), "PING", "PONG").ok());
  EXPECT_EQ(DecodeOk(Reply::Simple("QUEUED"), "SET").code(), StatusCode::kInternal);
  EXPECT_EQ(DecodeOk(Reply::Error("NOAUTH Authentication required."), "SET").code(),
            StatusCode::kPermissionDenied);
  EXPECT_EQ(*DecodeInteger(Reply::Integer(12), "DEL"), 12);
  EXPECT_EQ(*DecodeInteger(Reply::Bulk("12"), "DEL"), 12);
  EXPECT_EQ(DecodeInteger(Reply::Bulk("x"), "DEL").status().code(), StatusCode::kInternal);
  EXPECT_EQ(*DecodeString(Reply::Bulk("{}"), "KVT.STATS"), "{}");
  EXPECT_EQ(DecodeString(Reply::Null(), "GET").status().code(), StatusCode::kNotFound);
  Result<ArenaInfo> a = DecodeAttach(
      Reply::Aggregate(ReplyType::kMap, {Reply::Bulk("arena_bytes"), Reply::Integer(1 << 20),
                                         Reply::Bulk("tier"), Reply::Bulk("host")}));
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->arena_bytes, 1u << 20);
  EXPECT_EQ(a->tier, "host");
}

}  // namespace
}  // namespace kvtier::client
