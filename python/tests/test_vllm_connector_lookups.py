"""The vLLM connector's scheduler side: lookups sent as requests arrive, batched while one is in
flight, given up when not answered in time and held until loaded; which prefix is offered, and
whether its load is synchronous; a finished request's chain refreshed once saved; and the cost
model that skips a load slower than recomputing. The stand-ins are in vllm_connectors.py.
"""
import os
import threading
import time
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("vllm")


import kvtier  # noqa: E402
from kvtier.integrations.vllm import (KvtierConnector, KvtierConnectorMetadata,  # noqa: E402
                                      KvtierConnectorStats)
from flood import flood  # noqa: E402
from kvtierd_process import Daemon  # noqa: E402  (conftest puts it on sys.path)
from vllm_connectors import (BLOCK, LAYERS, VllmBooks, ask_until_known, blocks,  # noqa: E402
                             caches, computed, finish, match, output, request, sched_and_worker,
                             step, store_request, sync_load_meta, through_proxy)


def test_blocks_found_at_lookup_are_not_stored_again(unix_url):
    """A request whose prefix kvtierd already holds (in vLLM's own prefix cache or not) stores
    only its new blocks; it used to put its whole prefix again at every request."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="again")
    hashes = [os.urandom(32) for _ in range(4)]
    store_request(sched, worker, "A", hashes[:3], [0, 1, 2, 3])
    # B: vLLM's prefix cache holds A's three blocks (nothing to load), B adds a fourth.
    b = request("B", hashes, 4 * BLOCK + 1)
    assert match(sched, b, 3 * BLOCK) == (0, False)
    sched.update_state_after_alloc(b, blocks([0, 1, 2, 4, 5]), 0)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="B", block_ids=([0, 1, 2, 4, 5],), num_computed_tokens=3 * BLOCK)],
        scheduled={"B": BLOCK + 1}))
    assert meta.loads == [] and [t.block_ids for t in meta.stores] == [[4]]
    step(worker, meta)
    assert worker.stats()["stored_blocks"] == 4


def test_lookups_are_sent_as_requests_arrive_together_while_one_is_in_flight(unix_url):
    """Requests are looked up as they arrive, on the lookup thread: those that arrive while a
    round trip is in flight go together in the next one. An ask before the answer is in is
    "not known yet"; the answer is then given at every ask until the request is allocated, and a
    request that ends before its answer is in is forgotten."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="batch")
    hashes = [os.urandom(32) for _ in range(3)]
    store_request(sched, worker, "A", hashes, [0, 1, 2, 3])
    new = [request("N0", hashes, 3 * BLOCK + 1),
           request("N1", [os.urandom(32) for _ in range(3)], 3 * BLOCK + 1),
           request("N2", hashes[:2] + [os.urandom(32)], 3 * BLOCK + 1),
           request("N3", hashes, 3 * BLOCK + 1)]
    gate = threading.Event()
    sched._lookups.run_later(gate.wait)  # the lookup thread is busy until the gate opens
    counters = dict(sched._link._client.counters)
    for r in new:
        sched.on_new_request(r)
    assert sched.get_num_new_matched_tokens(new[0], 0) == (None, False)
    sched.request_finished(new[3], [])  # ends before its lookup is answered
    gate.set()
    answers = [(3 * BLOCK, True), (0, False), (2 * BLOCK, True)]
    assert [ask_until_known(sched, r, 0) for r in new[:3]] == answers
    assert sched._link._client.counters["round_trips"] == counters["round_trips"] + 1
    for _ in range(2):
        assert [sched.get_num_new_matched_tokens(r, 0) for r in new[:3]] == answers
    assert not sched._lookups.submitted("N3")
    assert sched.stats()["lookups"] == 1 + 3
    for conn in (sched, worker):
        conn.shutdown()


def test_a_lookup_not_answered_in_time_is_a_miss(unix_url):
    """kvtierd alive but hung: the lookup thread waits on it for up to timeout_s, and the request
    used to be "not known yet" for all that time. After lookup_wait_s it is a miss, counted as
    a failed lookup, and the late answer is not used."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="hung",
                                     extra={"lookup_wait_s": 0.05})
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, worker, "A", hashes, [0, 1, 2])
    gate = threading.Event()
    sched._lookups.run_later(gate.wait)  # the lookup thread is stuck until the gate opens
    b = request("B", hashes, 2 * BLOCK + 1)
    sched.on_new_request(b)
    started = time.monotonic()
    assert ask_until_known(sched, b) == (0, False)
    assert 0.05 <= time.monotonic() - started < 5
    assert sched.stats()["lookup_errors"] == 1
    gate.set()
    caught_up = threading.Event()
    sched._lookups.run_later(caught_up.set)
    assert caught_up.wait(10)
    assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
    assert sched.stats()["lookups"] == 2
    for conn in (sched, worker):
        conn.shutdown()


def test_a_request_not_announced_is_looked_up_when_first_asked_about(unix_url):
    """A vLLM without on_new_request: the first ask sends the lookup, and with nothing else
    running waits for it (a short wait, not an engine step)."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="late")
    hashes = [os.urandom(32) for _ in range(3)]
    store_request(sched, worker, "A", hashes, [0, 1, 2, 3])
    finish(sched, worker, request("A", hashes, 3 * BLOCK + 1))  # nothing else runs now
    assert ask_until_known(sched, request("B", hashes, 3 * BLOCK + 1)) == (3 * BLOCK, False)
    assert sched.stats()["lookups"] == 2
    for conn in (sched, worker):
        conn.shutdown()


def test_a_preempted_request_alone_reloads_synchronously(unix_url):
    """R, preempted, is admitted again with nothing else running: its own entry counted as
    "something else running", and its load was asynchronous (the request waiting a step or more
    for its report) where the docstring promises a load made for the step's forward pass."""
    kv = caches("flashinfer")
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="resume-alone", kv=kv)
    books = VllmBooks()
    r = computed(sched, worker, "R", [os.urandom(32) for _ in range(4)], [1, 2, 3, 4, 5], books)
    books.step(sched, worker, SimpleNamespace(**vars(output()), preempted_req_ids={"R"}))
    assert ask_until_known(sched, r, 0) == (4 * BLOCK, False)
    new_ids = [10, 11, 12, 13, 14]
    sched.update_state_after_alloc(r, blocks(new_ids), 4 * BLOCK)
    meta = sched.build_connector_meta(output(cached=SimpleNamespace(
        req_ids=["R"], new_block_ids=[(new_ids,)], num_computed_tokens=[4 * BLOCK],
        resumed_req_ids={"R"}), scheduled={"R": 3}))
    assert [(t.block_ids, t.sync) for t in meta.loads] == [(new_ids[:4], True)]
    assert meta.stores == []  # its blocks are in kvtierd already
    step(worker, meta)
    assert worker.get_block_ids_with_load_errors() == set()
    for name in LAYERS:
        assert torch.equal(kv[name][10], kv[name][1]) and torch.equal(kv[name][13], kv[name][4])
    for conn in (sched, worker):
        conn.shutdown()


def test_a_finished_requests_chain_is_refreshed_once_its_saves_are_done(unix_url, monkeypatch):
    """B extends A's two blocks with two of its own: its lookup touched A's blocks, then its
    saves put the new ones after them. Once the workers report B's saves done, the scheduler
    sends KVT.REFRESH of B's whole chain (head most recent again), not before, and only for
    requests that saved."""
    refreshed = []
    base = kvtier.Client.refresh

    def recording(client, ns, keys):
        prefix = base(client, ns, keys)
        refreshed.append((list(keys), prefix))
        return prefix

    monkeypatch.setattr(kvtier.Client, "refresh", recording)
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt="refresh")
    hashes = [os.urandom(32) for _ in range(4)]

    def caught_up():
        """Waits until the lookup thread has run every job queued so far (a refresh included)."""
        done = threading.Event()
        sched._lookups.run_later(done.set)
        assert done.wait(10)

    def finish(r, ids):
        """r finishes; the next step makes the stores held back from r's step with a load."""
        assert sched.request_finished(r, ids) == (True, None)
        caught_up()
        assert refreshed == []  # saves not reported done yet
        meta = sched.build_connector_meta(output())
        step(worker, meta)
        stored.extend(len(t.keys) for t in meta.stores)
        assert worker.get_finished({r.request_id}) == ({r.request_id}, None)
        sched.update_connector_output(SimpleNamespace(finished_sending={r.request_id}))
        deadline = time.monotonic() + 10
        while not refreshed:
            assert time.monotonic() < deadline, "no KVT.REFRESH"
            time.sleep(0.001)
        return refreshed.pop()

    stored = []
    store_request(sched, worker, "A", hashes[:2], [0, 1, 2])
    a = request("A", hashes[:2], 2 * BLOCK + 1)
    assert finish(a, [0, 1, 2]) == (sched._keys(a, 2), 2)
    matched, meta = store_request(sched, worker, "B", hashes, [3, 4, 5, 6, 7])
    assert matched == 2 * BLOCK and meta.stores == []
    b = request("B", hashes, 4 * BLOCK + 1)
    keys, prefix = finish(b, [3, 4, 5, 6, 7])
    assert keys == sched._keys(b, 4) and prefix == 4 and stored == [2]
    # A request that stored nothing (all of it found) has nothing to refresh.
    c = request("C", hashes, 4 * BLOCK + 1)
    assert match(sched, c, 0)[0] == 4 * BLOCK
    assert sched.request_finished(c, []) == (False, None)
    sched.update_connector_output(SimpleNamespace(finished_sending={"C"}))
    caught_up()
    assert refreshed == []
    for conn in (sched, worker):
        conn.shutdown()


def test_a_lookups_hold_keeps_the_prefix_until_it_is_loaded(tmp_path):
    """Between a request's lookup and its load, other puts fill kvtierd's host tier and evict
    everything unpinned (another request's blocks, stored at the same time, are gone): the
    prefix the lookup found was held, and loads in full."""
    daemon = Daemon(tmp_path, host_bytes="16MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        sched, worker = sched_and_worker("unix://" + daemon.unix, "flashinfer", salt="hold")
        held, control = ([os.urandom(32) for _ in range(2)] for _ in range(2))
        store_request(sched, worker, "A", held, [0, 1, 2])
        store_request(sched, worker, "C", control, [3, 4, 5])
        b = request("B", held, 2 * BLOCK + 1)
        assert match(sched, b, 0) == (2 * BLOCK, True)

        flood("unix://" + daemon.unix, sched._block_bytes, BLOCK, 12)  # 6,000 blocks of the same size class: 1.5x the tier
        assert match(sched, request("D", control, 2 * BLOCK + 1), 0) == (0, False)

        assert loads_its_two_blocks(sched, worker, b, [6, 7, 8])
        for conn in (sched, worker):
            conn.shutdown()
    finally:
        daemon.stop()


def loads_its_two_blocks(sched, worker, r, ids):
    """Whether r, offered two blocks, allocated `ids` and loaded in one step gets both, with none
    to recompute."""
    sched.update_state_after_alloc(r, blocks(ids), 2 * BLOCK)
    step(worker, sched.build_connector_meta(output()))
    return (worker.stats()["loaded_blocks"] == 2
            and worker.get_block_ids_with_load_errors() == set())


def test_a_request_queued_past_half_its_hold_is_looked_up_again(tmp_path):
    """A request vLLM cannot admit yet (queued behind a full engine) is asked about at every
    step; the answer of its lookup on arrival used to be offered however old, after its hold had
    ended and other puts had evicted what it found: vLLM then allocated for a load that failed
    (and with kv_load_failure_policy "fail", failed the request). Past half its hold the request
    is looked up again: a miss once the prefix is gone, and, while it stays, held again."""
    daemon = Daemon(tmp_path, host_bytes="16MiB", slab_bytes="8MiB")
    daemon.start()
    try:
        sched, worker = sched_and_worker("unix://" + daemon.unix, "flashinfer", salt="rehold",
                                         extra={"hold_s": 0.4})
        gone, kept = ([os.urandom(32) for _ in range(2)] for _ in range(2))
        store_request(sched, worker, "A", gone, [0, 1, 2])
        b = request("B", gone, 2 * BLOCK + 1)
        assert match(sched, b, 0) == (2 * BLOCK, True)
        time.sleep(0.5)  # B waits in vLLM's queue past its hold
        flood("unix://" + daemon.unix, sched._block_bytes, BLOCK, 12)  # 1.5x the tier
        assert ask_until_known(sched, b, 0) == (0, False)

        store_request(sched, worker, "C", kept, [3, 4, 5])
        d = request("D", kept, 2 * BLOCK + 1)
        assert match(sched, d, 0) == (2 * BLOCK, True)
        lookups = sched.stats()["lookups"]
        time.sleep(0.25)  # past half its hold: looked up (and held) again, found again
        assert ask_until_known(sched, d, 0) == (2 * BLOCK, True)
        assert sched.stats()["lookups"] == lookups + 1
        assert loads_its_two_blocks(sched, worker, d, [6, 7, 8])
        for conn in (sched, worker):
            conn.shutdown()
    finally:
        daemon.stop()


def forward_pass(worker, tokens, seconds):
    """One engine step that computes `tokens` tokens in `seconds`, as the worker times it."""
    worker.bind_connector_metadata(KvtierConnectorMetadata(computed_tokens=tokens))
    time.sleep(seconds)  # the pass; a step without loads starts them after it
    worker.start_load_kv(None)
    worker.wait_for_save()
    worker.clear_connector_metadata()


@pytest.mark.parametrize("layerwise", [True, False], ids=["layerwise", "whole"])
def test_a_synchronous_loads_time_is_not_counted_as_compute(unix_url, monkeypatch, layerwise):
    """The forward pass, timed from bind_connector_metadata to wait_for_save, used to include the
    step's synchronous load (made whole in start_load_kv, or waited for layer by layer): a slow
    load made recomputing look slow too, and slow loads were then taken."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt=f"price-{layerwise}",
                                     extra={"layerwise": layerwise})
    meta = sync_load_meta(sched, worker, [os.urandom(32) for _ in range(2)], [1, 2], [10, 11])
    meta.computed_tokens = 512
    worker.get_kv_connector_stats()  # the stats of the steps so far
    name = "get_pages_layered" if layerwise else "get_pages"
    real = getattr(kvtier.Client, name)

    def slow(*args, **kwargs):
        time.sleep(0.5)
        return real(*args, **kwargs)

    monkeypatch.setattr(kvtier.Client, name, slow)
    worker.bind_connector_metadata(meta)
    worker.start_load_kv(None)
    for layer in LAYERS:
        worker.wait_for_layer_load(layer)
    worker.wait_for_save()
    worker.clear_connector_metadata()
    assert worker.stats()["loaded_blocks"] == 2
    [(tokens, seconds)] = worker.get_kv_connector_stats().data["computes"]
    assert tokens == 512 and 0 <= seconds < 0.25
    for conn in (sched, worker):
        conn.shutdown()


def test_a_load_slower_than_the_recompute_is_skipped(kvtierd, proxy):
    """A hit is never slower than a miss: the worker times its loads and the engine's forward
    passes, vLLM carries the timings to the scheduler, and a prefix whose load would take longer
    than computing it is not offered. The slow tier is a proxy holding kvtierd's replies to
    KVT.GET for half a second; the engine computes at ~0.1 ms per token (a stand-in pass)."""
    sched, fast, slow = through_proxy(kvtierd, proxy, "slow")
    hashes = [os.urandom(32) for _ in range(4)]
    store_request(sched, fast, "A", hashes, [0, 1, 2, 3, 4])
    forward_pass(slow, tokens=512, seconds=0.05)

    # Nothing measured yet: B's load is taken, through the slow link, and timed.
    proxy.fault = "slow"
    matched, meta = store_request(sched, slow, "B", hashes, [5, 6, 7, 8, 9])
    assert matched == 4 * BLOCK
    assert [t.tiers for t in meta.loads] == [["host"] * 4]
    assert slow.stats()["loaded_blocks"] == 4 and proxy.spoiled >= 1
    stats = slow.get_kv_connector_stats()
    assert isinstance(stats, KvtierConnectorStats) and len(stats.data["loads"]) == 1
    assert stats.data["loads"][0][2] >= proxy.delay_s
    sched.update_connector_output(SimpleNamespace(kv_connector_stats=stats))
    est = sched.cost_estimates()
    assert 0 < est["compute_us_per_token"] and "load_host_gib_per_s" in est

    # C asks for the same prefix: loading it (over half a second) loses to computing its 64
    # tokens (a few ms). Nothing is offered, and nothing is stored again either.
    r = request("C", hashes, 4 * BLOCK + 1)
    assert match(sched, r, 0) == (0, False)
    s = sched.stats()
    assert (s["skipped_loads"], s["skipped_tokens"]) == (1, 4 * BLOCK)
    sched.update_state_after_alloc(r, blocks([10, 11, 12, 13, 14]), 0)
    meta = sched.build_connector_meta(output(
        [SimpleNamespace(req_id="C", block_ids=([10, 11, 12, 13, 14],), num_computed_tokens=0)],
        scheduled={"C": 4 * BLOCK + 1}))
    assert meta.loads == [] and meta.stores == []

    # The link is fast again and the loads the worker times say so: the prefix is offered.
    sched.update_connector_output(SimpleNamespace(kv_connector_stats=KvtierConnectorStats(
        data={"loads": [["host", 4 * sched._block_bytes, 1e-6]] * 30})))
    assert match(sched, request("D", hashes, 4 * BLOCK + 1), 0) == (4 * BLOCK, True)
    for conn in (sched, fast, slow):
        conn.shutdown()


def stored_then_loads_measured_slow(unix_url, salt, extra=None):
    """A scheduler and a worker; request A's two blocks stored; then the workers' stats as vLLM
    hands them over: a 1 MiB load from host in a second, 1024 tokens computed in a microsecond.
    Returns (scheduler, worker, A's block hashes)."""
    sched, worker = sched_and_worker(unix_url, "flashinfer", salt=salt, extra=extra)
    hashes = [os.urandom(32) for _ in range(2)]
    store_request(sched, worker, "A", hashes, [0, 1, 2])
    sched.update_connector_output(SimpleNamespace(kv_connector_stats=KvtierConnectorStats(
        data={"loads": [["host", 1 << 20, 1.0]], "computes": [[1024, 1e-6]]})))
    return sched, worker, hashes


def test_asking_again_about_a_request_counts_one_skip(unix_url):
    """vLLM asks get_num_new_matched_tokens at every step for a request it cannot schedule yet,
    and expects no side effects: each ask used to count a skipped load, and the 64th brought the
    tier's probe load. A request's decision is made, and counted, once."""
    sched, worker, hashes = stored_then_loads_measured_slow(unix_url, "reask")
    b = request("B", hashes, 2 * BLOCK + 1)
    assert match(sched, b, 0) == (0, False)
    for _ in range(70):
        assert sched.get_num_new_matched_tokens(b, 0) == (0, False)
    s = sched.stats()
    assert (s["skipped_loads"], s["skipped_tokens"], s["probe_loads"]) == (1, 2 * BLOCK, 0)
    for conn in (sched, worker):
        conn.shutdown()


def test_skipping_slow_loads_can_be_turned_off(unix_url):
    sched, worker, hashes = stored_then_loads_measured_slow(
        unix_url, "noskip", {"skip_slow_loads": False})
    # Loads measured as taking a second, a recompute as nearly free: offered all the same.
    assert match(sched, request("B", hashes, 2 * BLOCK + 1), 0) == (2 * BLOCK, True)
    assert sched.stats()["skipped_loads"] == 0
