// FakeRemoteStore: a RemoteStore held in a map, for tests of the code that uses the remote tier
// without a Redis server. Callbacks run at once on the calling thread (there is no I/O thread, so
// the blocking forms work from any thread). Faults are scripted: every key of a call can be
// answered with a given status instead (fail_with), and values can be edited in place to play an
// operator or another program writing the cluster. TTLs are recorded, not enforced.
//
// Thread-safe: one mutex around the map, the script and the counts.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/thread_annotations.h"
#include "tiers/remote/remote_store.h"

namespace kvtier::testing {

class FakeRemoteStore final : public tiers::remote::RemoteStore {
 public:
  void StartGet(std::vector<std::string> keys, std::chrono::milliseconds,
                GetCallback done) override {
    std::vector<Result<std::string>> out;
    {
      MutexLock lock(mu_);
      ++gets_;
      for (const std::string& key : keys) {
        auto it = values_.find(key);
        if (fail_with_) {
          out.emplace_back(*fail_with_);
        } else if (it == values_.end()) {
          out.emplace_back(NotFound(key));
        } else {
          out.emplace_back(it->second);
        }
      }
    }
    done(std::move(out));
  }

  void StartSet(std::vector<tiers::remote::RemoteWrite> writes, std::chrono::milliseconds ttl,
                std::chrono::milliseconds, StatusCallback done) override {
    std::vector<Status> out;
    {
      MutexLock lock(mu_);
      ++sets_;
      last_ttl_ = ttl;
      for (const auto& w : writes) {
        if (fail_with_) {
          out.push_back(*fail_with_);
          continue;
        }
        std::string value;
        for (std::string_view part : w.value_parts) value += part;
        values_[w.key] = std::move(value);
        out.push_back(Status::Ok());
      }
    }
    if (on_set_) on_set_();
    done(std::move(out));
  }

  void StartExists(std::vector<std::string> keys, std::chrono::milliseconds,
                   StatusCallback done) override {
    std::vector<Status> out;
    {
      MutexLock lock(mu_);
      ++exists_;
      for (const std::string& key : keys) {
        if (fail_with_) {
          out.push_back(*fail_with_);
        } else {
          out.push_back(values_.count(key) ? Status::Ok() : NotFound(key));
        }
      }
    }
    done(std::move(out));
  }

  void StartDelete(std::vector<std::string> keys, std::chrono::milliseconds,
                   StatusCallback done) override {
    std::vector<Status> out;
    {
      MutexLock lock(mu_);
      for (const std::string& key : keys) {
        if (fail_with_) {
          out.push_back(*fail_with_);
        } else {
          out.push_back(values_.erase(key) ? Status::Ok() : NotFound(key));
        }
      }
    }
    done(std::move(out));
  }

  // Runs inside every StartSet, before its callback, with no lock held: a test's view of what
  // else happens while a publish is in flight. Set before the calls start.
  void OnSet(std::function<void()> hook) { on_set_ = std::move(hook); }
  // Every later call answers every key with `status` (nullopt: normal service again).
  void FailWith(std::optional<Status> status) {
    MutexLock lock(mu_);
    fail_with_ = std::move(status);
  }
  std::optional<std::string> Value(const std::string& key) {
    MutexLock lock(mu_);
    auto it = values_.find(key);
    return it == values_.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  void SetValue(const std::string& key, std::string value) {
    MutexLock lock(mu_);
    values_[key] = std::move(value);
  }
  size_t size() {
    MutexLock lock(mu_);
    return values_.size();
  }
  int sets() {
    MutexLock lock(mu_);
    return sets_;
  }
  int gets() {
    MutexLock lock(mu_);
    return gets_;
  }
  int exists_calls() {
    MutexLock lock(mu_);
    return exists_;
  }
  std::chrono::milliseconds last_ttl() {
    MutexLock lock(mu_);
    return last_ttl_;
  }

 protected:
  bool OnCallbackThread() const override { return false; }

 private:
  Mutex mu_;
  std::map<std::string, std::string> values_ GUARDED_BY(mu_);
  std::optional<Status> fail_with_ GUARDED_BY(mu_);
  std::function<void()> on_set_;  // set before the calls start; read without the lock
  int sets_ GUARDED_BY(mu_) = 0;
  int gets_ GUARDED_BY(mu_) = 0;
  int exists_ GUARDED_BY(mu_) = 0;
  std::chrono::milliseconds last_ttl_ GUARDED_BY(mu_){0};
};

}  // namespace kvtier::testing
