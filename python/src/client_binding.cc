// The Client class of kvtier._kvtier: one kvtier::client::Client behind a mutex.
//
// Every call that talks to the daemon converts its Python arguments first (GIL held), then
// releases the GIL, takes the mutex and runs the C++ call, so other Python threads run while one
// waits for the daemon or copies megabytes; the mutex keeps two threads off the one connection
// (the C++ Client is not thread-safe). The caller's buffers stay referenced (BlockSet) until the
// call has returned and the GIL is held again.
#include "client_binding.h"

#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "buffers.h"
#include "client/client.h"
#include "client/default_url.h"
#include "layered_load.h"
#include "status_error.h"

namespace kvtier::python {
namespace {

using client::Client;
using client::NamespaceInfo;

class PyClient {
 public:
  explicit PyClient(Client client) : client_(std::move(client)) {}

  // Runs `fn(Client&)` without the GIL, one thread at a time.
  template <typename Fn>
  auto Run(Fn&& fn) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    if (!client_) throw StatusError(InvalidArgument("the client is closed"));
    return fn(*client_);
  }

  void Close() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    client_.reset();
  }
  // Waits for a call in flight like any other: without the GIL, or a thread asking whether the
  // client is closed would freeze the interpreter for as long as that call waits on the daemon.
  bool closed() {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mu_);
    return !client_.has_value();
  }

 private:
  std::mutex mu_;
  std::optional<Client> client_;
};

// "auto" takes the shared-memory path when the client is attached, the inline one otherwise.
bool UseShm(Client& c, const std::string& path) {
  if (path == "shm") return true;
  if (path == "inline") return false;
  if (path == "auto") return c.attached();
  throw StatusError(
      InvalidArgument("path: expected 'auto', 'shm' or 'inline', got '" + path + "'"));
}

// Per-key outcomes of a put: kvtier.Status objects (OK and ALREADY_EXISTS both mean "stored").
std::vector<Status> Put(PyClient& self, const NamespaceInfo& ns, const std::vector<BlockKey>& keys,
                        const ConstBlockSet& set, const std::string& path) {
  return self.Run([&](Client& c) {
    const bool shm = UseShm(c, path);
    return ValueOrThrow(shm ? c.Put(ns.id, keys, set.blocks())
                            : c.PutInline(ns.id, keys, set.blocks()));
  });
}

size_t Get(PyClient& self, const NamespaceInfo& ns, const std::vector<BlockKey>& keys,
           const MutableBlockSet& set, const std::string& path) {
  return self.Run([&](Client& c) {
    const bool shm = UseShm(c, path);
    return ValueOrThrow(shm ? c.Get(ns.id, keys, set.blocks())
                            : c.GetInline(ns.id, keys, set.blocks()));
  });
}

// Seconds from Python as whole milliseconds, rounded up: a positive time under 1 ms must not
// become 0, which means "wait forever" for a timeout and "unpin" for a TTL.
std::chrono::milliseconds MillisecondsUp(double seconds, const char* what) {
  if (!(seconds >= 0) || seconds > 1e9) {
    throw StatusError(InvalidArgument(std::string(what) + ": expected seconds in [0, 1e9], got " +
                                      std::to_string(seconds)));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

NamespaceId NamespaceIdOf(const py::handle& ns) {
  if (py::isinstance<NamespaceInfo>(ns)) return ns.cast<const NamespaceInfo&>().id;
  return NamespaceId{KeyFromBytes(ns, "ns")};
}

std::unique_ptr<PyClient> Connect(const std::optional<std::string>& url,
                                  const std::string& username, const std::string& password,
                                  double timeout_s, const std::string& client_name) {
  client::ConnectOptions options;
  options.username = username;
  options.password = password;
  options.timeout = MillisecondsUp(timeout_s, "timeout_s");
  options.client_name = client_name;
  const std::string where = url.value_or(client::DefaultUrl());
  Result<Client> c = [&] {
    py::gil_scoped_release release;
    return Client::Connect(where, options);
  }();
  return std::make_unique<PyClient>(ValueOrThrow(std::move(c)));
}

}  // namespace

// One pybind11 class definition: a single chain of .def() calls, one short lambda per method, which
// reads best kept together rather than split into helpers that each bind a few methods.
void BindClient(py::module_& m) {
  py::class_<LoadProgress>(m, "LoadProgress", R"doc(
How far a layer-by-layer load (Client.get_pages_layered) has come: wait(layers) returns once that
many layers of every block are in, or the load has ended (then `served` tells how many leading
blocks it served whole).
)doc")
      .def(py::init<>())
      .def("wait", &LoadProgress::WaitForLayers, py::arg("layers"), py::arg("timeout_s") = -1.0,
           py::call_guard<py::gil_scoped_release>(),
           "Waits until `layers` layers are in or the load ended; False when timeout_s ran out.")
      .def("finish", &LoadProgress::Finish, py::arg("served"),
           "Ends the load (the first call counts): every waiter returns.")
      .def_property_readonly("finished", &LoadProgress::finished)
      .def_property_readonly("served", &LoadProgress::served);

  py::class_<PyClient>(m, "Client", R"doc(
A connection to one kvtierd (low level; use kvtier.connect()).

Not meant to be constructed directly: kvtier.connect() returns a kvtier.Client, which subclasses
this and converts torch tensors and token lists. Calls release the GIL while they wait for the
daemon or copy bytes; one connection serves one call at a time (calls from several threads are
serialised).
)doc")
      .def(py::init(&Connect), py::arg("url"), py::arg("username"), py::arg("password"),
           py::arg("timeout_s"), py::arg("client_name"))
      .def(
          "ping", [](PyClient& self) { self.Run([](Client& c) { ThrowIfError(c.Ping()); }); },
          "PING the daemon; raises when it does not answer PONG.")
      .def("close", &PyClient::Close, "Close the connection (idempotent).")
      .def_property_readonly("closed", &PyClient::closed)
      .def_property_readonly(
          "url",
          [](PyClient& self) { return self.Run([](Client& c) { return c.endpoint().url; }); })
      .def_property_readonly(
          "usable",
          [](PyClient& self) {
            return !self.closed() && self.Run([](Client& c) { return c.usable(); });
          },
          "False once an I/O error or timeout has made the connection unusable (connect again).")
      .def_property_readonly(
          "attached",
          [](PyClient& self) { return self.Run([](Client& c) { return c.attached(); }); },
          "True when the daemon's host arena is mapped (shared-memory path available).")
      .def(
          "attach",
          [](PyClient& self) {
            client::ArenaInfo info = self.Run([](Client& c) { return ValueOrThrow(c.Attach()); });
            py::dict d;
            d["arena_bytes"] = info.arena_bytes;
            d["tier"] = info.tier;
            return d;
          },
          "Map the daemon's host arena (unix:// only) so put/get copy through shared memory.")
      .def(
          "register_namespace",
          [](PyClient& self, const hashing::NamespaceDescriptor& desc, uint64_t block_bytes) {
            return self.Run(
                [&](Client& c) { return ValueOrThrow(c.RegisterNamespace(desc, block_bytes)); });
          },
          py::arg("desc"), py::arg("block_bytes") = 0,
          "Register `desc` with the daemon (KVT.REGISTER) and return its Namespace. block_bytes=0 "
          "takes the dense K/V size from the descriptor.")
      .def(
          "lookup",
          [](PyClient& self, const py::handle& ns, const py::handle& keys) {
            const NamespaceId id = NamespaceIdOf(ns);
            const std::vector<BlockKey> k = KeysFromPython(keys);
            return self.Run([&](Client& c) { return ValueOrThrow(c.Lookup(id, k)); });
          },
          py::arg("ns"), py::arg("keys"),
          "The longest cached prefix of `keys` and the tier of each of its blocks.")
      .def(
          "refresh",
          [](PyClient& self, const py::handle& ns, const py::handle& keys) {
            const NamespaceId id = NamespaceIdOf(ns);
            const std::vector<BlockKey> k = KeysFromPython(keys);
            return self.Run([&](Client& c) { return ValueOrThrow(c.Refresh(id, k)); });
          },
          py::arg("ns"), py::arg("keys"),
          "Put the cached prefix of `keys` back in the order lookup() leaves it (its head the most "
          "recent), without counting as a lookup or a use; returns its length. Call it after "
          "putting a request's new blocks, which left them more recent than their prefix.")
      .def(
          "lookup_many",
          [](PyClient& self, const py::handle& ns, const py::iterable& chains, double hold_s) {
            const NamespaceId id = NamespaceIdOf(ns);
            std::vector<std::vector<BlockKey>> keys;
            for (const py::handle& chain : chains) keys.push_back(KeysFromPython(chain));
            const std::vector<std::span<const BlockKey>> spans(keys.begin(), keys.end());
            const auto hold = MillisecondsUp(hold_s, "hold_s");
            return self.Run([&](Client& c) { return ValueOrThrow(c.LookupMany(id, spans, hold)); });
          },
          py::arg("ns"), py::arg("chains"), py::arg("hold_s") = 0.0,
          "lookup() of each key list in `chains`, all in one round trip; one answer per list. "
          "hold_s > 0 keeps each prefix found from eviction that long (until it is loaded).")
      .def("_put",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& blocks, const std::string& path) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             const ConstBlockSet set = ConstBlockSet::Contiguous(blocks, k.size(), ns.block_bytes);
             return Put(self, ns, k, set, path);
           })
      .def("_get",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& out, const std::string& path) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             const MutableBlockSet set = MutableBlockSet::Contiguous(out, k.size(), ns.block_bytes);
             return Get(self, ns, k, set, path);
           })
      .def("_put_kv",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& parts, size_t start_token, const std::string& path) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             const ConstBlockSet set = ConstBlockSet::TokenStrided(
                 parts, k.size(), ns.block_bytes, ns.tokens_per_block, start_token);
             return Put(self, ns, k, set, path);
           })
      .def("_get_kv",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& parts, size_t start_token, const std::string& path) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             const MutableBlockSet set = MutableBlockSet::TokenStrided(
                 parts, k.size(), ns.block_bytes, ns.tokens_per_block, start_token);
             return Get(self, ns, k, set, path);
           })
      .def("_put_pages",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& pages, const std::vector<int64_t>& block_ids,
              const std::string& path) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             if (k.size() != block_ids.size()) {
               throw StatusError(InvalidArgument("put_pages: " + std::to_string(k.size()) +
                                                 " keys but " + std::to_string(block_ids.size()) +
                                                 " block ids"));
             }
             const ConstBlockSet set = ConstBlockSet::Paged(pages, block_ids, ns.block_bytes);
             return Put(self, ns, k, set, path);
           })
      .def("_get_pages",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& pages, const std::vector<int64_t>& block_ids,
              const std::string& path) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             if (k.size() != block_ids.size()) {
               throw StatusError(InvalidArgument("get_pages: " + std::to_string(k.size()) +
                                                 " keys but " + std::to_string(block_ids.size()) +
                                                 " block ids"));
             }
             const MutableBlockSet set = MutableBlockSet::Paged(pages, block_ids, ns.block_bytes);
             return Get(self, ns, k, set, path);
           })
      .def("_get_pages_layered",
           [](PyClient& self, const NamespaceInfo& ns, const py::handle& keys,
              const py::handle& pages, const std::vector<int64_t>& block_ids,
              size_t parts_per_layer, LoadProgress& progress) {
             const std::vector<BlockKey> k = KeysFromPython(keys);
             if (k.size() != block_ids.size() || parts_per_layer == 0) {
               throw StatusError(InvalidArgument(
                   "get_pages_layered: " + std::to_string(k.size()) + " keys, " +
                   std::to_string(block_ids.size()) + " block ids, " +
                   std::to_string(parts_per_layer) + " parts a layer"));
             }
             const MutableBlockSet set = MutableBlockSet::Paged(pages, block_ids, ns.block_bytes);
             // On an error the load has not ended for the caller, which may try again: it
             // calls progress.finish itself (kvtier.Client.get_pages_layered does).
             const size_t served = self.Run([&](Client& c) {
               if (!c.attached()) return ValueOrThrow(c.GetInline(ns.id, k, set.blocks()));
               LayeredCopier copier(set.blocks(), parts_per_layer, progress);
               return ValueOrThrow(c.GetWith(ns.id, k, ns.block_bytes, copier));
             });
             progress.Finish(served);
             return served;
           })
      .def(
          "get_bytes",
          [](PyClient& self, const py::handle& ns, const py::handle& keys) {
            const NamespaceId id = NamespaceIdOf(ns);
            const std::vector<BlockKey> k = KeysFromPython(keys);
            std::vector<std::string> got =
                self.Run([&](Client& c) { return ValueOrThrow(c.GetInline(id, k)); });
            py::list out(got.size());
            for (size_t i = 0; i < got.size(); ++i) out[i] = py::bytes(got[i]);
            return out;
          },
          py::arg("ns"), py::arg("keys"),
          "The leading cached blocks of `keys` as new bytes objects (inline path), stopping at the "
          "first miss.")
      .def(
          "pin",
          [](PyClient& self, const py::handle& ns, const py::handle& keys, double ttl_s) {
            const NamespaceId id = NamespaceIdOf(ns);
            const std::vector<BlockKey> k = KeysFromPython(keys);
            const auto ttl = MillisecondsUp(ttl_s, "ttl_s");
            return self.Run([&](Client& c) { return ValueOrThrow(c.Pin(id, k, ttl)); });
          },
          py::arg("ns"), py::arg("keys"), py::arg("ttl_s"),
          "Keep the ready blocks among `keys` from eviction for ttl_s seconds (0 unpins); returns "
          "how many.")
      .def(
          "delete",
          [](PyClient& self, const py::handle& ns, const py::handle& keys) {
            const NamespaceId id = NamespaceIdOf(ns);
            const std::vector<BlockKey> k = KeysFromPython(keys);
            return self.Run([&](Client& c) { return ValueOrThrow(c.Del(id, k)); });
          },
          py::arg("ns"), py::arg("keys"), "Remove the blocks; returns how many were present.")
      .def(
          "drop",
          [](PyClient& self, const py::handle& ns) {
            const NamespaceId id = NamespaceIdOf(ns);
            return self.Run([&](Client& c) { return ValueOrThrow(c.Drop(id)); });
          },
          py::arg("ns"), "Remove every block of the namespace and forget it; returns the count.")
      .def("_stats",
           [](PyClient& self) {
             return self.Run([](Client& c) { return ValueOrThrow(c.Stats()); });
           })
      .def_property_readonly(
          "counters",
          [](PyClient& self) {
            const client::ClientCounters k = self.Run([](Client& c) { return c.counters(); });
            py::dict d;
            d["round_trips"] = k.round_trips;
            d["commands"] = k.commands;
            d["torn_reads"] = k.torn_reads;
            d["aborted_puts"] = k.aborted_puts;
            return d;
          },
          "This connection's own counters (round trips, commands, torn reads, aborted puts).");
}

}  // namespace kvtier::python
