"""kvtierd as LMCache's remote store, driven by LMCache 0.5.6's own released clients on CPU
tensors (PyPI, installed with --no-deps by scripts/python-venv.sh: python/requirements-lmcache.txt):

- `RedisConnector` (remote_url `redis://HOST:PORT` and `unix:///path.sock`): keys `<key>kv_bytes`
  and `<key>metadata` with SET, GET, EXISTS, DEL through redis-py 8, which opens with HELLO 3 (and
  with `?protocol=2`, RESP2);
- `RESPConnector` (`resp://HOST:PORT`), LMCache's compiled RESP2 client, which reads fixed-length
  replies: every reply it reads is compared byte for byte with Debian's redis-server's;
- the multi-process server's `resp` L2 adapter (the same compiled client), built by LMCache's own
  L2 factory: store, lookup, load, delete.

Each connector is built by LMCache's factory (CreateConnector) over a LocalCPUBackend with an
ad-hoc CPU allocator, as an LMCache engine builds it; no GPU and no engine is involved. Not run:
an LMCache engine inside vLLM or SGLang.

Two LMCache 0.5.6 bugs shape the tests, not kvtierd: `close()` of the Redis and RESP connectors
deadlocks (it awaits a synchronous shutdown on its own event loop), so the tests tear the client
down themselves; and the compiled client never returns from a GET of a missing key (it reads a
reply of the chunk's length, and `$-1\\r\\n` is shorter), with redis-server as with kvtierd, so the
tests check kvtierd's bytes for that reply instead of driving the client into it. A third: the
synchronous lookup (`batched_contains`, from a thread other than the loop's) submits its request
before it registers the future the answer completes, so an answer that comes back in between is
dropped and the call waits for ever (seen once under load); the tests use the asynchronous lookup,
which does both on the loop thread.
"""
import asyncio
import contextlib
import select
import socket
import threading
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lmcache")

from lmcache.utils import CacheEngineKey  # noqa: E402
from lmcache.v1.config import LMCacheEngineConfig  # noqa: E402
from lmcache.v1.distributed.api import ObjectKey  # noqa: E402
from lmcache.v1.distributed.l2_adapters import create_l2_adapter  # noqa: E402
from lmcache.v1.distributed.l2_adapters.config import get_l2_adapter_config_class  # noqa: E402
from lmcache.v1.memory_allocators.ad_hoc_memory_allocator import AdHocMemoryAllocator  # noqa: E402
from lmcache.v1.memory_management import MemoryFormat  # noqa: E402
from lmcache.v1.metadata import LMCacheMetadata  # noqa: E402
from lmcache.v1.storage_backend.connector import CreateConnector  # noqa: E402
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend  # noqa: E402

from kvtierd_process import free_port  # noqa: E402
from redis_server import redis_server, require_redis_server  # noqa: E402

MODEL = "lmcache-test/model"
CHUNK_TOKENS = 16
# (layers, K/V, tokens, kv heads, head size): 2 x 2 x 16 x 2 x 16 bf16 = a 4 KiB chunk.
KV_SHAPE = (2, 2, CHUNK_TOKENS, 2, 16)
DTYPE = torch.bfloat16
TIMEOUT_S = 20


class Remote:
    """One LMCache remote connector built by LMCache's factory, on a loop thread of its own."""

    def __init__(self, url):
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        config = LMCacheEngineConfig.from_defaults(
            chunk_size=CHUNK_TOKENS, local_cpu=False, max_local_cpu_size=0.1, remote_url=url,
            remote_serde="naive", save_unfull_chunk=False,
            extra_config={"save_chunk_meta": False, "resp_num_threads": 2})
        self.metadata = LMCacheMetadata(
            model_name=MODEL, world_size=1, local_world_size=1, worker_id=0, local_worker_id=0,
            kv_dtype=DTYPE, kv_shape=KV_SHAPE, chunk_size=CHUNK_TOKENS)
        self.backend = LocalCPUBackend(config, metadata=self.metadata,
                                       memory_allocator=AdHocMemoryAllocator("cpu"))
        self.conn = CreateConnector(url, self.loop, self.backend, config, self.metadata)

    def call(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=TIMEOUT_S)

    def chunk(self, seed):
        shapes = self.metadata.get_shapes()
        obj = self.backend.allocate(shapes, [DTYPE], MemoryFormat.KV_2LTD)
        generator = torch.Generator().manual_seed(seed)
        obj.tensor.copy_(torch.randn(shapes[0], generator=generator).to(DTYPE))
        return obj

    def close(self):
        # Not conn.close(): it deadlocks in LMCache 0.5.6 (see the module's docstring).
        real = self.conn.getWrappedConnector()
        self.call(real.pq_executor.shutdown_async(wait=False))
        if hasattr(real, "connection"):  # RedisConnector: a redis-py asyncio client
            self.call(real.connection.aclose())
        else:  # RESPConnector: the compiled client
            self.loop.call_soon_threadsafe(real.client.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)


@contextlib.contextmanager
def remote(url):
    r = Remote(url)
    try:
        yield r
    finally:
        r.close()


def release(*objs):
    """Hands LMCache's memory objects back, as its engine does once a transfer is done (else their
    finalizers warn at exit)."""
    for obj in objs:
        if obj is not None:
            obj.ref_count_down()


def key(chunk_hash):
    return CacheEngineKey(MODEL, 1, 0, chunk_hash, DTYPE)


@pytest.mark.parametrize("scheme", ["redis", "redis-resp2", "unix"])
def test_redis_connector_stores_and_loads_chunks(kvtierd, scheme):
    url = {"redis": f"redis://{kvtierd.host}:{kvtierd.port}",
           "redis-resp2": f"redis://{kvtierd.host}:{kvtierd.port}?protocol=2",
           "unix": f"unix://{kvtierd.unix}"}[scheme]
    base = {"redis": 0x1000, "redis-resp2": 0x2000, "unix": 0x3000}[scheme]
    with remote(url) as r:
        chunks = {base + i: r.chunk(seed=base + i) for i in range(4)}
        for h, obj in chunks.items():
            assert r.call(r.conn.exists(key(h))) is False
            r.call(r.conn.put(key(h), obj))
        for h, obj in chunks.items():
            assert r.call(r.conn.exists(key(h))) is True
            got = r.call(r.conn.get(key(h)))
            assert got is not None and torch.equal(got.tensor, obj.tensor), h
            release(got)
        assert r.call(r.conn.get(key(base + 99))) is None  # a miss, not an error
        release(*chunks.values())


def test_resp_connector_stores_and_loads_chunks(kvtierd):
    with remote(f"resp://{kvtierd.host}:{kvtierd.port}") as r:
        chunks = {0xA000 + i: r.chunk(seed=0xA000 + i) for i in range(4)}
        for h, obj in chunks.items():
            assert r.call(r.conn.exists(key(h))) is False
            r.call(r.conn.put(key(h), obj))
        # The engine's asynchronous lookup, on the loop thread (see the module docstring for why
        # not batched_contains, the synchronous one).
        looked_up = [key(h) for h in chunks] + [key(0xAFFF)]
        assert r.call(r.conn.batched_async_contains("lookup", looked_up)) == len(chunks)
        for h, obj in chunks.items():
            got = r.call(r.conn.get(key(h)))
            assert got is not None and torch.equal(got.tensor, obj.tensor), h
            release(got)
        release(*chunks.values())


def exchange(address, requests):
    """Each request's raw reply bytes, on one RESP2 connection (no HELLO, as LMCache's compiled
    client speaks)."""
    replies = []
    with socket.create_connection(address, timeout=TIMEOUT_S) as s:
        for args in requests:
            s.sendall(b"".join([b"*%d\r\n" % len(args)] +
                               [b"$%d\r\n%s\r\n" % (len(a), a) for a in args]))
            data = b""
            # A reply is whole once it ends in CRLF and, for a bulk string, holds its length.
            while True:
                more = s.recv(1 << 16)
                if not more:
                    raise AssertionError(f"the server closed the connection after {data!r}")
                data += more
                if data.startswith(b"$") and not data.startswith(b"$-1"):
                    head, _, rest = data.partition(b"\r\n")
                    if len(rest) >= int(head[1:]) + 2:
                        break
                elif data.endswith(b"\r\n"):
                    break
            replies.append(data)
    return replies


def test_the_replies_the_compiled_client_reads_match_redis_server_byte_for_byte(
        kvtierd, tmp_path):
    """The commands of LMCache's RESP client (and its L2 adapter), with its key shape and a
    chunk-sized value: SET, EXISTS (hit, miss), GET (hit, and the miss the client cannot parse),
    DEL (hit, miss)."""
    require_redis_server()
    k = b"lmcache-test/model@1@0@beef@bfloat16"
    value = bytes(range(256)) * 16
    script = [[b"EXISTS", k], [b"SET", k, value], [b"EXISTS", k], [b"GET", k],
              [b"GET", k + b"-missing"], [b"DEL", k], [b"DEL", k], [b"EXISTS", k]]
    with redis_server(tmp_path, free_port()) as address:
        expected = exchange(address, script)
    got = exchange((kvtierd.host, kvtierd.port), script)
    assert expected[1] == b"+OK\r\n" and expected[4] == b"$-1\r\n"
    assert got == expected


def wait_fd(fd, timeout_ms=TIMEOUT_S * 1000):
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    assert poller.poll(timeout_ms), "the L2 adapter reported nothing in time"


def test_mp_resp_l2_adapter_stores_looks_up_loads_and_deletes(kvtierd):
    """The multi-process server's `resp` L2 adapter, built by LMCache's L2 factory from the same
    dict its --l2-adapter flag takes."""
    config = get_l2_adapter_config_class("resp").from_dict(
        {"type": "resp", "host": kvtierd.host, "port": kvtierd.port, "num_workers": 2})
    adapter = create_l2_adapter(config)
    try:
        allocator = AdHocMemoryAllocator("cpu")
        shape = torch.Size([2, 2, CHUNK_TOKENS, 32])

        def memory_obj():
            return allocator.allocate([shape], [DTYPE], MemoryFormat.KV_2LTD)

        keys = [ObjectKey(chunk_hash=bytes(31) + bytes([i]), model_name=MODEL, kv_rank=0)
                for i in range(3)]
        stored = [memory_obj() for _ in range(2)]
        for i, obj in enumerate(stored):
            obj.tensor.copy_(torch.randn(shape, generator=torch.Generator().manual_seed(i))
                             .to(DTYPE))
        adapter.submit_store_task(keys[:2], stored)
        wait_fd(adapter.get_store_event_fd())
        assert len(adapter.pop_completed_store_tasks()) == 1

        task = adapter.submit_lookup_and_lock_task(keys, {})
        wait_fd(adapter.get_lookup_and_lock_event_fd())
        assert adapter.query_lookup_and_lock_result(task).get_indices_list() == [0, 1]
        adapter.submit_unlock(keys[:2])

        loaded = [memory_obj() for _ in range(2)]
        task = adapter.submit_load_task(keys[:2], loaded)
        wait_fd(adapter.get_load_event_fd())
        assert adapter.query_load_result(task).get_indices_list() == [0, 1]
        for a, b in zip(stored, loaded):
            assert torch.equal(a.tensor, b.tensor)
        release(*stored, *loaded)

        adapter.delete(keys)
        task = adapter.submit_lookup_and_lock_task(keys, {})
        # The event descriptor may still be readable from the first lookup: poll for the result.
        deadline = time.monotonic() + TIMEOUT_S
        while (found := adapter.query_lookup_and_lock_result(task)) is None:
            assert time.monotonic() < deadline, "the second lookup never finished"
            time.sleep(0.01)
        assert found.get_indices_list() == []
    finally:
        adapter.close()
