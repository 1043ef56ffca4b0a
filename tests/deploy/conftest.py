"""The deploy/ checks: the Grafana dashboard and Prometheus alerts against the metric names a real
kvtierd exports, and the Kubernetes manifests against the Kubernetes schemas and the config.

The daemon comes from tests/integration's harness (KVTIER_BIN_DIR picks the binaries).
"""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "integration"))
