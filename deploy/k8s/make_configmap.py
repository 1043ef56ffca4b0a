#!/usr/bin/env python3
"""Writes deploy/k8s/configmap.yaml: deploy/kvtierd.yaml as the ConfigMap the DaemonSet mounts at
/etc/kvtier. The config is copied line for line, except that the TCP and HTTP listeners face the
pod's network instead of loopback (the edit deploy/Dockerfile makes too): the Service, the readiness
probe and Prometheus reach the daemon there. A non-loopback TCP listener needs a password, which the
DaemonSet passes from a Secret.

    python3 deploy/k8s/make_configmap.py           # rewrite configmap.yaml
    python3 deploy/k8s/make_configmap.py --check   # exit 1 if configmap.yaml is out of date
"""
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent / "kvtierd.yaml"
TARGET = HERE / "configmap.yaml"

# Each line must occur exactly once in the source: a renamed key fails here, not in a cluster.
OVERRIDES = {
    "  tcp_host: 127.0.0.1": "  tcp_host: 0.0.0.0",
    "  http_host: 127.0.0.1": "  http_host: 0.0.0.0",
}

HEADER = """\
# Generated from deploy/kvtierd.yaml by deploy/k8s/make_configmap.py; edit that file, then run
#   python3 deploy/k8s/make_configmap.py
# (CI fails while this file is out of date). Differences from deploy/kvtierd.yaml: listen.tcp_host
# and listen.http_host are 0.0.0.0, so that the Service and Prometheus reach the pod. Sizes that
# depend on the node (--host-bytes, --nvme-bytes) are flags in daemonset.yaml, beside the resource
# limits they must agree with.
apiVersion: v1
kind: ConfigMap
metadata:
  name: kvtierd-config
  namespace: kvtier
  labels:
    app.kubernetes.io/name: kvtierd
    app.kubernetes.io/part-of: kvtier
data:
  kvtierd.yaml: |
"""


def pod_config(source_text):
    """The config as the pod runs it: the source with OVERRIDES applied."""
    lines = source_text.splitlines()
    for old, new in OVERRIDES.items():
        hits = [i for i, line in enumerate(lines) if line == old]
        if len(hits) != 1:
            raise SystemExit(f"{SOURCE}: expected the line {old.strip()!r} once, found {len(hits)}")
        lines[hits[0]] = new
    return "\n".join(lines) + "\n"


def render(source_text):
    body = "".join(("    " + line if line else "") + "\n"
                   for line in pod_config(source_text).splitlines())
    return HEADER + body


def main(argv):
    text = render(SOURCE.read_text())
    if argv[1:] == ["--check"]:
        if TARGET.read_text() != text:
            print(f"{TARGET} is out of date: run python3 deploy/k8s/make_configmap.py",
                  file=sys.stderr)
            return 1
        return 0
    if argv[1:]:
        print(__doc__, file=sys.stderr)
        return 2
    TARGET.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
