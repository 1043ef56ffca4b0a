"""kvtier: the Python client of kvtierd, the multi-tier KV-cache daemon for LLM inference.

Quick tour::

    import kvtier
    c = kvtier.connect("unix:///run/kvtier/kvtierd.sock")      # shared memory on unix://
    ns = c.register_namespace(kvtier.NamespaceDescriptor(
        model_id="gpt2", kv_dtype="fp32", num_layers=12, num_kv_heads=12, head_dim=64,
        tokens_per_block=16, layout_tag="hf_bhsd"))
    keys = c.hash_tokens(ns, token_ids)                        # chained 16-byte block keys
    hit = c.lookup(ns, keys).prefix                            # longest cached prefix, in blocks
    c.put(ns, keys, blocks)                                    # numpy / CPU torch, no extra copy
    n = c.get(ns, keys[:hit], out)

The bindings run the repository's C++ client (libkvtier) and hashing library, so keys agree with
the daemon and every other client byte for byte. Engine adapters live in
``kvtier.integrations`` (``transformers``).
"""
from ._kvtier import (HASH_SCHEME_VERSION, LookupResult, Namespace, NamespaceDescriptor, Status,
                      bytes_per_element)
from .client import (Client, chain_keys, connect, fold_foreign_keys, hash_tokens, namespace_id,
                     namespace_ref, raise_for_statuses)
from .errors import (AlreadyExistsError, BusyError, ChecksumMismatchError, CorruptionError,
                     DeviceError, InternalError, InvalidArgumentError, KvtierError, NotFoundError,
                     PermissionDeniedError, RejectedError, ShuttingDownError, TimeoutError)

__version__ = "0.1.0"

__all__ = [
    "HASH_SCHEME_VERSION", "LookupResult", "Namespace", "NamespaceDescriptor", "Status",
    "bytes_per_element", "Client", "connect", "chain_keys", "hash_tokens", "fold_foreign_keys",
    "namespace_id", "namespace_ref", "raise_for_statuses", "KvtierError", "NotFoundError",
    "AlreadyExistsError", "RejectedError", "BusyError", "DeviceError", "ChecksumMismatchError",
    "CorruptionError", "InvalidArgumentError", "TimeoutError", "ShuttingDownError",
    "PermissionDeniedError", "InternalError",
]
