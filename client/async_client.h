// AsyncClient: a Client driven by its own thread, whose calls return std::future.
//
// An engine's scheduler must not block on the daemon: it asks for a prefix lookup, goes on with
// other work, and polls the future. AsyncClient takes sole ownership of one Client and one worker
// thread ("kvtier-async"); calls are queued and run on that thread in submission order, each a
// whole round trip (or two) of the wrapped Client. Keys are copied into the queued call; payload
// memory (the segments' bytes) is borrowed and must stay valid, and for Get unread, until the
// call's future is ready.
//
// Any thread may call any method (the queue is locked); the wrapped Client is only ever touched by
// the worker. The destructor runs every queued call to completion, then joins the worker.
// Submit() runs arbitrary code with the Client on the worker thread (for Attach, Stats, ...).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "client/client.h"
#include "common/thread_annotations.h"

namespace kvtier::client {

class AsyncClient {
 public:
  explicit AsyncClient(Client client);
  ~AsyncClient();
  AsyncClient(const AsyncClient&) = delete;
  AsyncClient& operator=(const AsyncClient&) = delete;

  // Client::Lookup on the worker.
  std::future<Result<LookupResult>> Lookup(const NamespaceId& ns, std::vector<BlockKey> keys);
  // Client::Put when the client is attached, Client::PutInline otherwise.
  std::future<Result<std::vector<Status>>> Put(const NamespaceId& ns, std::vector<BlockKey> keys,
                                               std::vector<std::vector<ConstSegment>> blocks);
  // Client::Get when the client is attached, Client::GetInline otherwise.
  std::future<Result<size_t>> Get(const NamespaceId& ns, std::vector<BlockKey> keys,
                                  std::vector<std::vector<MutableSegment>> blocks);

  // Runs fn(client) on the worker thread; the future holds its result. `fn` must be copyable
  // (it is stored in a std::function). An exception out of it (std::bad_alloc from the Client,
  // or fn's own) is stored in the future, whose get() rethrows it; the worker goes on with the
  // next call.
  template <typename Fn>
  auto Submit(Fn fn) -> std::future<std::invoke_result_t<Fn&, Client&>> {
    using R = std::invoke_result_t<Fn&, Client&>;
    auto promise = std::make_shared<std::promise<R>>();
    std::future<R> future = promise->get_future();
    Enqueue([promise, fn = std::move(fn)](Client& client) mutable {
      // Out of the worker thread, an exception would end the process (std::terminate).
      try {
        promise->set_value(fn(client));
      } catch (...) {
        promise->set_exception(std::current_exception());
      }
    });
    return future;
  }

 private:
  void Enqueue(std::function<void(Client&)> call);
  // The worker's loop. Waiting needs std::unique_lock, which the lock analysis cannot follow.
  void Run() NO_THREAD_SAFETY_ANALYSIS;

  Client client_;  // touched only by worker_
  Mutex mu_;
  std::condition_variable_any wake_;
  std::deque<std::function<void(Client&)>> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread worker_;  // last: started once everything above exists
};

}  // namespace kvtier::client
