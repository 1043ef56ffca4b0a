#!/usr/bin/env bash
# Installs the Debian 12 packages kvtier builds, tests and benchmarks with. Asks apt only for what
# is missing, so a second run is quick and needs no network.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  clang libclang-rt-14-dev
  liburing-dev librocksdb-dev libxxhash-dev libboost-dev
  # TLS to the remote tier's Redis (rediss://); openssl makes the tests' certificates.
  libssl-dev openssl
  libgtest-dev libgmock-dev libbenchmark-dev
  libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libyaml-cpp-dev
  redis-server redis-tools fio python3 python3-venv python3-dev curl
  # promtool checks deploy/prometheus/alerts.yml. The package also installs a Prometheus server,
  # which its install script enables and starts (on :9090) where systemd runs.
  prometheus
  # tests/integration/test_dashboard.py loads the dashboard in a headless browser.
  chromium
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
