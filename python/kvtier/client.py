"""kvtier.Client: a connection to kvtierd, and the module-level hashing functions.

A Client wraps libkvtier's C++ client (client/client.h) through the extension module; it adds only
argument conversion (torch tensors, token lists) and JSON decoding of statistics. Two data paths:

* inline (any URL): payloads travel in the RESP stream;
* shared memory (``unix://`` URLs): :meth:`Client.attach` maps the daemon's host arena, then puts
  and gets copy straight between your arrays and the arena (one copy, no socket in the data path).

``path="auto"`` (the default everywhere) takes shared memory when attached, inline otherwise.
Batched calls are one round trip per batch (two for shared memory). Every call releases the GIL
while it waits or copies. Failures raise :mod:`kvtier.errors` exceptions carrying the daemon's
message; a miss is never an exception.
"""
from __future__ import annotations

import json
from typing import Any, Optional, Sequence

from . import _kvtier
from ._convert import as_buffer, as_buffers, byte_list, tokens_array
from ._kvtier import LookupResult, Namespace, NamespaceDescriptor, Status

__all__ = ["Client", "connect", "chain_keys", "hash_tokens", "fold_foreign_keys",
           "namespace_id", "raise_for_statuses"]


def namespace_id(desc: NamespaceDescriptor) -> bytes:
    """The 16-byte id of a namespace descriptor (validated first; InvalidArgumentError names the
    bad field)."""
    return desc.namespace_id()


def chain_keys(ns: bytes | Namespace, tokens: Any, tokens_per_block: int | None = None,
               extras: Optional[Sequence[bytes]] = None) -> list[bytes]:
    """Chained 16-byte keys of the full blocks of ``tokens`` (docs/hashing.md).

    ``ns`` is a namespace id (16 bytes) or a :class:`Namespace` (whose tokens_per_block is used
    when ``tokens_per_block`` is None). ``tokens``: a list, numpy array or torch tensor of ids in
    [0, 2**32). ``extras``: None, or one bytes object per block (per full block, or per full block
    plus one for the trailing partial block, which is ignored). A trailing partial block gets no key.
    """
    if isinstance(ns, Namespace):
        tpb = ns.tokens_per_block if tokens_per_block is None else tokens_per_block
        ns_id = ns.id
    else:
        if tokens_per_block is None:
            raise TypeError("chain_keys: tokens_per_block is required with a raw namespace id")
        tpb, ns_id = tokens_per_block, ns
    return _kvtier._chain_keys(ns_id, tokens_array(tokens), tpb, byte_list(extras))


def hash_tokens(ns: Namespace, tokens: Any, extras: Optional[Sequence[bytes]] = None) -> list[bytes]:
    """chain_keys() with the namespace's own tokens_per_block."""
    return chain_keys(ns, tokens, None, extras)


def fold_foreign_keys(ns: bytes | Namespace, engine_hashes: Sequence[bytes]) -> list[bytes]:
    """Fold an engine's own block hashes (vLLM, SGLang) into kvtier keys, chained under ``ns``."""
    ns_id = ns.id if isinstance(ns, Namespace) else ns
    return _kvtier.fold_foreign_keys(ns_id, byte_list(engine_hashes))


def namespace_ref(ns: bytes | str | Namespace) -> str:
    """The name statistics (``Client.stats()``, /stats, /metrics) give a namespace: 16 hex
    digits. Ids appear there only for admin sessions, since an id gives access to the namespace's
    blocks. ``ns``: a :class:`Namespace`, a 16-byte id or its 32 hex digits."""
    if isinstance(ns, Namespace):
        return ns.ref
    return _kvtier.namespace_ref(bytes.fromhex(ns) if isinstance(ns, str) else ns)


def raise_for_statuses(statuses: Sequence[Status]) -> None:
    """Raise the error of the first per-key status that is neither OK nor ALREADY_EXISTS."""
    from .errors import _from_status

    for i, s in enumerate(statuses):
        if not s.stored:
            raise _from_status(s.code, f"key {i}: {s.message}")


class Client(_kvtier.Client):
    """A connection to one kvtierd. Build it with :func:`kvtier.connect`.

    Usable as a context manager (closes on exit). Not shared between processes; within one
    process, calls from several threads are serialised on the connection.
    """

    def __init__(self, url: Optional[str] = None, *, password: str = "", username: str = "",
                 timeout_s: float = 10.0, client_name: str = "",
                 attach: Optional[bool] = None) -> None:
        super().__init__(url, username, password, timeout_s, client_name)
        if attach is None:
            attach = self.url.startswith("unix://")
        if attach:
            self.attach()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def hash_tokens(self, ns: Namespace, tokens: Any,
                    extras: Optional[Sequence[bytes]] = None) -> list[bytes]:
        """Keys of the full blocks of ``tokens`` in ``ns`` (local, no daemon involved)."""
        return hash_tokens(ns, tokens, extras)

    def put(self, ns: Namespace, keys: Any, blocks: Any, path: str = "auto") -> list[Status]:
        """Store one block per key; returns one Status per key.

        ``blocks``: one C-contiguous buffer of ``len(keys) * ns.block_bytes`` bytes (a numpy array
        or CPU torch tensor of any shape and dtype), or a sequence of ``len(keys)`` buffers of
        ``ns.block_bytes`` each. Per key: OK, ALREADY_EXISTS (nothing to do), BUSY (no room now),
        REJECTED, TIMEOUT (a shared-memory reservation expired). With the daemon's
        ``nvme.write_through``, OK means the block is on NVMe too, and BUSY, REJECTED, DEVICE_ERROR
        or TIMEOUT may also mean it is stored in memory only (its NVMe copy was not made).
        ``Status.stored`` is true for OK and ALREADY_EXISTS; :func:`raise_for_statuses` raises for
        the others. The call itself raises only when nothing can be said per key (I/O, a malformed
        argument).
        """
        return self._put(ns, keys, as_buffers(blocks), path)

    def get(self, ns: Namespace, keys: Any, out: Any, path: str = "auto") -> int:
        """Copy the leading cached blocks of ``keys`` into ``out``; returns how many were served.

        ``out`` is shaped like put()'s ``blocks`` and must be writable. The copy stops at the first
        miss: blocks ``[0, n)`` hold their payloads, the rest of ``out`` is unspecified.
        """
        return self._get(ns, keys, as_buffers(out, written=True), path)

    def put_kv(self, ns: Namespace, keys: Any, parts: Sequence[Any], start_token: int = 0,
               path: str = "auto") -> list[Status]:
        """Store blocks gathered from token-strided arrays, with no intermediate copy.

        ``parts``: arrays shaped ``[outer, tokens, inner]`` (or ``[tokens, inner]``) whose last
        dimension is contiguous, e.g. per layer ``K[0]`` and ``V[0]`` of a transformers cache
        (``[kv_heads, seq, head_dim]``). Block ``i`` is, in order, for each part and each outer
        row, tokens ``[start_token + i*T, start_token + (i+1)*T)`` with ``T =
        ns.tokens_per_block``. The bytes per block must equal ``ns.block_bytes``. Returns per-key
        statuses as put().
        """
        return self._put_kv(ns, keys, as_buffers(list(parts)), start_token, path)

    def get_kv(self, ns: Namespace, keys: Any, parts: Sequence[Any], start_token: int = 0,
               path: str = "auto") -> int:
        """Scatter the leading cached blocks of ``keys`` into token-strided arrays (the layout of
        put_kv()); returns how many blocks were served."""
        return self._get_kv(ns, keys, as_buffers(list(parts), written=True), start_token, path)

    def put_pages(self, ns: Namespace, keys: Any, pages: Sequence[Any], block_ids: Sequence[int],
                  path: str = "auto") -> list[Status]:
        """Store blocks gathered from paged memory, with no intermediate copy.

        ``pages``: arrays whose first dimension is the page id and whose pages are C-contiguous
        (e.g. one paged KV tensor per layer of an engine, viewed ``[num_pages, page_bytes]``; the
        page stride may exceed the page). Block ``i`` is page ``block_ids[i]`` of every array, in
        order; the page sizes must add up to ``ns.block_bytes``. Returns per-key statuses as put().
        """
        return self._put_pages(ns, keys, as_buffers(list(pages)), list(block_ids), path)

    def get_pages(self, ns: Namespace, keys: Any, pages: Sequence[Any], block_ids: Sequence[int],
                  path: str = "auto") -> int:
        """Scatter the leading cached blocks of ``keys`` into pages ``block_ids`` of ``pages``
        (the layout of put_pages()); returns how many blocks were served."""
        return self._get_pages(ns, keys, as_buffers(list(pages), written=True), list(block_ids), path)

    def get_pages_layered(self, ns: Namespace, keys: Any, pages: Sequence[Any],
                          block_ids: Sequence[int], parts_per_layer: int,
                          progress: "_kvtier.LoadProgress") -> int:
        """get_pages() copying layer by layer: ``pages`` are ``parts_per_layer`` parts a layer, and
        ``progress.wait(n)`` (from another thread) returns once layers [0, n) of every block are
        in, or the load has ended; the count served, as get_pages (progress.served too). The
        shared-memory path when attached, else inline (layers then land together at the end).
        A call that raises ends the load too, with nothing served."""
        try:
            return self._get_pages_layered(ns, keys, as_buffers(list(pages), written=True), list(block_ids),
                                           parts_per_layer, progress)
        finally:
            progress.finish(0)  # nothing when the load ended: the first finish counts

    def stats(self) -> dict:
        """The daemon's statistics (KVT.STATS, the same JSON as HTTP /stats and ``kvtier stats``)."""
        return json.loads(self._stats())


def connect(url: Optional[str] = None, *, password: str = "", username: str = "",
            timeout_s: float = 10.0, client_name: str = "", attach: Optional[bool] = None) -> Client:
    """Connect to kvtierd; the same as ``Client(url, ...)``.

    ``url``: ``unix:///path/to.sock`` or ``tcp://host:port``; None takes the daemon's default
    socket (``$XDG_RUNTIME_DIR/kvtier/kvtierd.sock``, else ``/tmp/kvtier-<uid>/kvtierd.sock``).
    ``timeout_s`` bounds each wait for the daemon (0: forever). ``attach``: map the host arena for
    the shared-memory path; None (default) attaches on ``unix://`` URLs. Raises DeviceError or
    NotFoundError when nothing listens there, PermissionDeniedError for a wrong password.
    """
    return Client(url, password=password, username=username, timeout_s=timeout_s,
                  client_name=client_name, attach=attach)
