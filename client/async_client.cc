#include "client/async_client.h"

#include <pthread.h>

namespace kvtier::client {
namespace {

// A block list as the spans the Client takes; `lists` must outlive the spans.
template <typename Segment>
std::vector<std::span<const Segment>> AsSpans(const std::vector<std::vector<Segment>>& lists) {
  std::vector<std::span<const Segment>> spans;
  spans.reserve(lists.size());
  for (const std::vector<Segment>& list : lists) spans.emplace_back(list);
  return spans;
}

}  // namespace

AsyncClient::AsyncClient(Client client) : client_(std::move(client)) {
  worker_ = std::thread([this] { Run(); });
}

AsyncClient::~AsyncClient() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

void AsyncClient::Enqueue(std::function<void(Client&)> call) {
  {
    MutexLock lock(mu_);
    queue_.push_back(std::move(call));
  }
  wake_.notify_one();
}

void AsyncClient::Run() {
  pthread_setname_np(pthread_self(), "kvtier-async");
  for (;;) {
    std::function<void(Client&)> call;
    {
      std::unique_lock<Mutex> lock(mu_);
      while (!stopping_ && queue_.empty()) wake_.wait(lock);
      // Drain before stopping: every future handed out gets its value.
      if (queue_.empty()) return;
      call = std::move(queue_.front());
      queue_.pop_front();
    }
    call(client_);
  }
}

std::future<Result<LookupResult>> AsyncClient::Lookup(const NamespaceId& ns,
                                                      std::vector<BlockKey> keys) {
  return Submit([ns, keys = std::move(keys)](Client& client) { return client.Lookup(ns, keys); });
}

std::future<Result<std::vector<Status>>> AsyncClient::Put(
    const NamespaceId& ns, std::vector<BlockKey> keys,
    std::vector<std::vector<ConstSegment>> blocks) {
  return Submit([ns, keys = std::move(keys), blocks = std::move(blocks)](Client& client) {
    const std::vector<ConstBlock> spans = AsSpans(blocks);
    return client.attached() ? client.Put(ns, keys, spans) : client.PutInline(ns, keys, spans);
  });
}

std::future<Result<size_t>> AsyncClient::Get(const NamespaceId& ns, std::vector<BlockKey> keys,
                                             std::vector<std::vector<MutableSegment>> blocks) {
  return Submit([ns, keys = std::move(keys), blocks = std::move(blocks)](Client& client) {
    const std::vector<MutableBlock> spans = AsSpans(blocks);
    return client.attached() ? client.Get(ns, keys, spans) : client.GetInline(ns, keys, spans);
  });
}

}  // namespace kvtier::client
