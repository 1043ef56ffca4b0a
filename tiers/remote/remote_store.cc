#include "tiers/remote/remote_store.h"

#include <future>
#include <utility>

namespace kvtier::tiers::remote {
namespace {

Status OnOwnThread() {
  return Internal("a blocking remote store call on the store's own I/O thread would never return");
}

// Starts a call through `start` and waits for its callback's answer.
template <typename Answer, typename StartFn>
Answer Wait(StartFn start) {
  std::promise<Answer> promise;
  std::future<Answer> answer = promise.get_future();
  start([&promise](Answer a) { promise.set_value(std::move(a)); });
  return answer.get();
}

}  // namespace

std::vector<Result<std::string>> RemoteStore::Get(std::vector<std::string> keys,
                                                  std::chrono::milliseconds timeout) {
  using Answer = std::vector<Result<std::string>>;
  if (OnCallbackThread()) return Answer(keys.size(), OnOwnThread());
  return Wait<Answer>(
      [&](GetCallback done) { StartGet(std::move(keys), timeout, std::move(done)); });
}

std::vector<Status> RemoteStore::Set(std::vector<RemoteWrite> writes, std::chrono::milliseconds ttl,
                                     std::chrono::milliseconds timeout) {
  using Answer = std::vector<Status>;
  if (OnCallbackThread()) return Answer(writes.size(), OnOwnThread());
  return Wait<Answer>(
      [&](StatusCallback done) { StartSet(std::move(writes), ttl, timeout, std::move(done)); });
}

std::vector<Status> RemoteStore::Exists(std::vector<std::string> keys,
                                        std::chrono::milliseconds timeout) {
  using Answer = std::vector<Status>;
  if (OnCallbackThread()) return Answer(keys.size(), OnOwnThread());
  return Wait<Answer>(
      [&](StatusCallback done) { StartExists(std::move(keys), timeout, std::move(done)); });
}

std::vector<Status> RemoteStore::Delete(std::vector<std::string> keys,
                                        std::chrono::milliseconds timeout) {
  using Answer = std::vector<Status>;
  if (OnCallbackThread()) return Answer(keys.size(), OnOwnThread());
  return Wait<Answer>(
      [&](StatusCallback done) { StartDelete(std::move(keys), timeout, std::move(done)); });
}

}  // namespace kvtier::tiers::remote
