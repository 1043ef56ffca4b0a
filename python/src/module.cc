// kvtier._kvtier: the pybind11 module over libkvtier (client/) and the hashing library (hashing/).
//
// It exposes the C++ types as they are (NamespaceDescriptor, Namespace, LookupResult, Status), the
// hashing functions, and the Client (client_binding.cc). The friendlier surface (kvtier.connect,
// torch tensors, JSON stats) is Python, in the kvtier package; this module is its engine. A failed
// kvtier Status becomes an exception of kvtier.errors, chosen by its code.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <string>
#include <vector>

#include "buffers.h"
#include "client/client.h"
#include "client_binding.h"
#include "common/types.h"
#include "hashing/block_hasher.h"
#include "hashing/namespace_descriptor.h"
#include "status_error.h"

namespace kvtier::python {
namespace {

using hashing::NamespaceDescriptor;

// Raises the kvtier.errors exception for `status` (GIL held, inside the translator).
void SetPythonError(const Status& status) {
  py::object make = py::module_::import("kvtier.errors").attr("_from_status");
  py::object exc = make(std::string(StatusCodeName(status.code())), status.message());
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

std::vector<std::span<const std::byte>> ByteSpansOf(const std::vector<py::buffer_info>& views) {
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(views.size());
  for (const py::buffer_info& v : views) {
    spans.emplace_back(static_cast<const std::byte*>(v.ptr),
                       static_cast<size_t>(v.size * v.itemsize));
  }
  return spans;
}

// Buffer views of a sequence of bytes-like objects (none for None); `name` is the argument's, for
// the error that names an element that is not bytes-like.
std::vector<py::buffer_info> ViewsOf(const py::handle& seq_obj, const char* name) {
  std::vector<py::buffer_info> views;
  if (seq_obj.is_none()) return views;
  py::sequence seq = py::reinterpret_borrow<py::sequence>(seq_obj);
  for (size_t i = 0; i < seq.size(); ++i) {
    if (!PyObject_CheckBuffer(seq[i].ptr())) {
      throw StatusError(
          InvalidArgument(std::string(name) + "[" + std::to_string(i) + "]: not bytes-like"));
    }
    views.push_back(py::reinterpret_borrow<py::buffer>(seq[i]).request());
  }
  return views;
}

py::list ChainKeys(const py::handle& ns, py::array_t<uint32_t, py::array::c_style> tokens,
                   uint32_t tokens_per_block, const py::handle& extras) {
  const NamespaceId id{KeyFromBytes(ns, "ns")};
  const std::vector<py::buffer_info> views = ViewsOf(extras, "extras");
  const std::vector<std::span<const std::byte>> spans = ByteSpansOf(views);
  std::span<const uint32_t> t(tokens.data(), static_cast<size_t>(tokens.size()));
  Result<std::vector<BlockKey>> keys = [&] {
    py::gil_scoped_release release;  // a 128K-token prompt hashes in about a millisecond
    return hashing::ChainKeys(id, t, tokens_per_block, spans);
  }();
  return KeysToPython(ValueOrThrow(std::move(keys)));
}

py::list FoldForeignKeys(const py::handle& ns, const py::handle& engine_hashes) {
  const NamespaceId id{KeyFromBytes(ns, "ns")};
  const std::vector<py::buffer_info> views = ViewsOf(engine_hashes, "engine_hashes");
  const std::vector<std::span<const std::byte>> spans = ByteSpansOf(views);
  return KeysToPython(hashing::FoldForeignKeys(id, hashing::ByteSpans(spans)));
}

void BindDescriptor(py::module_& m) {
  py::class_<NamespaceDescriptor>(m, "NamespaceDescriptor", R"doc(
Everything that makes two engines' KV bytes incompatible (hashing/namespace_descriptor.h).

Two engines that agree on every field share blocks; any difference gives another namespace id and
so other block keys. tenant_salt is bytes (a str is encoded as UTF-8).
)doc")
      .def(py::init([](std::string model_id, std::string model_revision, std::string kv_dtype,
                       uint32_t num_layers, uint32_t num_kv_heads, uint32_t head_dim,
                       uint32_t tokens_per_block, std::string layout_tag, uint32_t tp_rank,
                       uint32_t tp_size, uint32_t hash_scheme_version, py::bytes tenant_salt) {
             NamespaceDescriptor d;
             d.model_id = std::move(model_id);
             d.model_revision = std::move(model_revision);
             d.kv_dtype = std::move(kv_dtype);
             d.num_layers = num_layers;
             d.num_kv_heads = num_kv_heads;
             d.head_dim = head_dim;
             d.tokens_per_block = tokens_per_block;
             d.layout_tag = std::move(layout_tag);
             d.tp_rank = tp_rank;
             d.tp_size = tp_size;
             d.hash_scheme_version = hash_scheme_version;
             d.tenant_salt = std::string(tenant_salt);
             return d;
           }),
           py::kw_only(), py::arg("model_id"), py::arg("model_revision") = "", py::arg("kv_dtype"),
           py::arg("num_layers"), py::arg("num_kv_heads"), py::arg("head_dim"),
           py::arg("tokens_per_block"), py::arg("layout_tag"), py::arg("tp_rank") = 0,
           py::arg("tp_size") = 1,
           py::arg("hash_scheme_version") = hashing::kCurrentHashSchemeVersion,
           py::arg("tenant_salt") = py::bytes())
      .def_readwrite("model_id", &NamespaceDescriptor::model_id)
      .def_readwrite("model_revision", &NamespaceDescriptor::model_revision)
      .def_readwrite("kv_dtype", &NamespaceDescriptor::kv_dtype)
      .def_readwrite("num_layers", &NamespaceDescriptor::num_layers)
      .def_readwrite("num_kv_heads", &NamespaceDescriptor::num_kv_heads)
      .def_readwrite("head_dim", &NamespaceDescriptor::head_dim)
      .def_readwrite("tokens_per_block", &NamespaceDescriptor::tokens_per_block)
      .def_readwrite("layout_tag", &NamespaceDescriptor::layout_tag)
      .def_readwrite("tp_rank", &NamespaceDescriptor::tp_rank)
      .def_readwrite("tp_size", &NamespaceDescriptor::tp_size)
      .def_readwrite("hash_scheme_version", &NamespaceDescriptor::hash_scheme_version)
      .def_property(
          "tenant_salt", [](const NamespaceDescriptor& d) { return py::bytes(d.tenant_salt); },
          [](NamespaceDescriptor& d, py::bytes salt) { d.tenant_salt = std::string(salt); })
      .def(
          "validate", [](const NamespaceDescriptor& d) { ThrowIfError(hashing::Validate(d)); },
          "Raise InvalidArgumentError (naming the field) unless the descriptor is plausible.")
      .def(
          "canonical_encoding",
          [](const NamespaceDescriptor& d) { return py::bytes(hashing::CanonicalEncoding(d)); },
          "The tagged, length-prefixed bytes that the namespace id hashes (docs/hashing.md).")
      .def(
          "namespace_id",
          [](const NamespaceDescriptor& d) {
            return KeyToBytes(ValueOrThrow(hashing::ComputeNamespaceId(d)));
          },
          "The 16-byte namespace id (XXH3-128 of the canonical encoding); validates first.")
      .def(
          "block_bytes", [](const NamespaceDescriptor& d) { return hashing::BlockBytes(d); },
          "Dense K/V bytes of one block (0 for an invalid descriptor).")
      .def("__repr__", [](const NamespaceDescriptor& d) {
        return "NamespaceDescriptor(model_id='" + d.model_id + "', kv_dtype='" + d.kv_dtype +
               "', num_layers=" + std::to_string(d.num_layers) +
               ", num_kv_heads=" + std::to_string(d.num_kv_heads) +
               ", head_dim=" + std::to_string(d.head_dim) +
               ", tokens_per_block=" + std::to_string(d.tokens_per_block) + ", layout_tag='" +
               d.layout_tag + "')";
      });
}

void BindValueTypes(py::module_& m) {
  py::class_<client::NamespaceInfo>(m, "Namespace", R"doc(
A registered namespace: its 16-byte id, the payload size of its blocks and its tokens per block.
Returned by Client.register_namespace(); may also be built from known values.
)doc")
      .def(py::init([](const py::handle& id, uint64_t block_bytes, uint32_t tokens_per_block) {
             return client::NamespaceInfo{NamespaceId{KeyFromBytes(id, "id")}, block_bytes,
                                          tokens_per_block};
           }),
           py::arg("id"), py::arg("block_bytes"), py::arg("tokens_per_block"))
      .def_property_readonly("id", [](const client::NamespaceInfo& n) { return KeyToBytes(n.id); })
      .def_property_readonly("id_hex", [](const client::NamespaceInfo& n) { return n.id.ToHex(); })
      .def_property_readonly(
          "ref", [](const client::NamespaceInfo& n) { return hashing::NamespaceRef(n.id); })
      .def_readonly("block_bytes", &client::NamespaceInfo::block_bytes)
      .def_readonly("tokens_per_block", &client::NamespaceInfo::tokens_per_block)
      .def("__repr__", [](const client::NamespaceInfo& n) {
        return "Namespace(id='" + n.id.ToHex() + "', block_bytes=" + std::to_string(n.block_bytes) +
               ", tokens_per_block=" + std::to_string(n.tokens_per_block) + ")";
      });

  py::class_<client::LookupResult>(m, "LookupResult",
                                   "The longest cached prefix (in blocks) and the tier of each.")
      .def_readonly("prefix", &client::LookupResult::prefix)
      .def_property_readonly("tiers",
                             [](const client::LookupResult& r) {
                               std::vector<std::string> out;
                               for (TierId t : r.tiers) out.emplace_back(TierName(t));
                               return out;
                             })
      .def("__repr__", [](const client::LookupResult& r) {
        return "LookupResult(prefix=" + std::to_string(r.prefix) + ")";
      });

  py::class_<Status>(m, "Status", "A per-key outcome: code name ('OK', 'BUSY', ...) and message.")
      .def_property_readonly("code",
                             [](const Status& s) { return std::string(StatusCodeName(s.code())); })
      .def_property_readonly("message", &Status::message)
      .def_property_readonly("ok", &Status::ok)
      .def_property_readonly(
          "stored",
          [](const Status& s) { return s.ok() || s.code() == StatusCode::kAlreadyExists; },
          "True for OK and ALREADY_EXISTS: the block is in the cache either way.")
      .def("__bool__", &Status::ok)
      .def("__repr__", [](const Status& s) { return "Status(" + s.ToString() + ")"; });
}

}  // namespace
}  // namespace kvtier::python

PYBIND11_MODULE(_kvtier, m) {
  using namespace kvtier;
  using namespace kvtier::python;
  m.doc() = "Bindings of libkvtier, the C++ client of kvtierd (use the kvtier package).";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      SetPythonError(e.status());
    }
  });
  BindDescriptor(m);
  BindValueTypes(m);
  BindClient(m);
  m.attr("HASH_SCHEME_VERSION") = hashing::kCurrentHashSchemeVersion;
  // kvtierd's longest lookup hold (KVT.LOOKUP ... HOLD), in seconds: the engines' connectors check
  // their configured hold against it at start.
  m.attr("MAX_LOOKUP_HOLD_S") = std::chrono::duration<double>(client::kMaxLookupHold).count();
  m.def(
      "bytes_per_element", [](const std::string& dtype) { return hashing::BytesPerElement(dtype); },
      py::arg("kv_dtype"), "Bytes of one element of a kvtier dtype name, 0 when unknown.");
  m.def("_chain_keys", &ChainKeys, py::arg("ns"), py::arg("tokens"), py::arg("tokens_per_block"),
        py::arg("extras") = py::none());
  m.def(
      "namespace_ref",
      [](const py::handle& ns) {
        return hashing::NamespaceRef(NamespaceId{KeyFromBytes(ns, "ns")});
      },
      py::arg("ns"),
      "The name statistics give namespace id `ns` (16 hex digits; docs/protocol.md, KVT.STATS): "
      "ids are shown "
      "only to admins.");
  m.def("fold_foreign_keys", &FoldForeignKeys, py::arg("ns"), py::arg("engine_hashes"),
        "Fold an engine's own block hashes (vLLM, SGLang) into kvtier keys under namespace id "
        "`ns`: one 16-byte key per hash, chained.");
}
