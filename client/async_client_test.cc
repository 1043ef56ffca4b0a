#include "client/async_client.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "client/testing/in_process_daemon.h"

namespace kvtier::client {
namespace {

using testing::InProcessDaemon;

TEST(AsyncClientTest, FuturesCarryResultsInSubmissionOrder) {
  InProcessDaemon server;
  Result<Client> client = Client::Connect(server.url());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  hashing::NamespaceDescriptor d;
  d.model_id = "async";
  d.kv_dtype = "int8";
  d.num_layers = d.num_kv_heads = d.head_dim = 1;
  d.tokens_per_block = 1;
  d.layout_tag = "test";
  Result<NamespaceInfo> ns = client->RegisterNamespace(d, 64);
  ASSERT_TRUE(ns.ok());

  AsyncClient async(std::move(client).value());
  const std::vector<BlockKey> keys = {BlockKey{{1, 1}}, BlockKey{{2, 2}}};
  std::vector<char> a(64, 'a'), b(64, 'b');
  // Inline (not attached): the put is queued before the lookup, so the lookup sees both blocks.
  auto put = async.Put(ns->id, keys, {{{a.data(), a.size()}}, {{b.data(), b.size()}}});
  auto lookup = async.Lookup(ns->id, keys);
  std::vector<char> out_a(64), out_b(64);
  auto get = async.Get(ns->id, keys, {{{out_a.data(), 64}}, {{out_b.data(), 64}}});
  auto attach = async.Submit([](Client& c) { return c.Attach().status(); });

  Result<std::vector<Status>> put_result = put.get();
  ASSERT_TRUE(put_result.ok()) << put_result.status().ToString();
  EXPECT_TRUE((*put_result)[0].ok() && (*put_result)[1].ok());
  Result<LookupResult> lookup_result = lookup.get();
  ASSERT_TRUE(lookup_result.ok());
  EXPECT_EQ(lookup_result->prefix, 2u);
  Result<size_t> served = get.get();
  ASSERT_TRUE(served.ok());
  EXPECT_EQ(*served, 2u);
  EXPECT_EQ(out_a, a);
  EXPECT_EQ(out_b, b);
  EXPECT_TRUE(attach.get().ok());

  // Attached now: the same calls go through shared memory.
  const std::vector<BlockKey> more = {BlockKey{{3, 3}}};
  auto put_shm = async.Put(ns->id, more, {{{a.data(), a.size()}}});
  auto get_shm = async.Get(ns->id, more, {{{out_b.data(), 64}}});
  ASSERT_TRUE(put_shm.get().ok());
  ASSERT_EQ(*get_shm.get(), 1u);
  EXPECT_EQ(out_b, a);
  EXPECT_EQ(server.commands().back(), "KVT.RELEASE");  // all leased: no inline fallback
}

// An exception out of a call ends up in its future, not out of the worker thread, where it would
// end the process; the calls after it run as usual.
TEST(AsyncClientTest, AnExceptionInACallGoesToItsFuture) {
  InProcessDaemon server;
  Result<Client> client = Client::Connect(server.url());
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  AsyncClient async(std::move(client).value());
  auto thrown = async.Submit([](Client&) -> Status { throw std::runtime_error("no memory"); });
  auto ping = async.Submit([](Client& c) { return c.Ping(); });
  EXPECT_THROW((void)thrown.get(), std::runtime_error);
  EXPECT_TRUE(ping.get().ok());
}

TEST(AsyncClientTest, DestructorCompletesQueuedCalls) {
  InProcessDaemon server;
  Result<Client> client = Client::Connect(server.url());
  ASSERT_TRUE(client.ok());
  std::vector<std::future<Status>> pings;
  {
    AsyncClient async(std::move(client).value());
    for (int i = 0; i < 20; ++i) pings.push_back(async.Submit([](Client& c) { return c.Ping(); }));
  }
  for (auto& ping : pings) EXPECT_TRUE(ping.get().ok());
}

}  // namespace
}  // namespace kvtier::client
