#!/usr/bin/env bash
# Creates .venv-tools: the real Triton clients (tritonclient + perf_analyzer) used by the
# V2 protocol tests and benchmarks. They live apart from .venv because tritonclient pins
# protobuf < 7 while the service's generated code needs protobuf 7, and because its
# generated modules declare the same proto package as ours.
#
# Idempotent: re-running checks each piece and installs only what is missing.
# Prints the perf_analyzer path on success; exits non-zero with a reason otherwise.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ATTNSERVE_TOOLS_VENV:-$ROOT/.venv-tools}"
PYTHON="${PYTHON:-python3}"
TRITONCLIENT_VERSION="2.41.0"

need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then sudo "$@"; else
            echo "triton-env: '$*' needs root and sudo is missing" >&2; exit 1
        fi
    else
        "$@"
    fi
}

# perf_analyzer 2.41 links against libb64.so.0d (Debian package libb64-0d).
if ! ldconfig -p 2>/dev/null | grep -q 'libb64\.so\.0d'; then
    need_root apt-get update -qq
    need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libb64-0d
fi

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi

if ! "$VENV/bin/python" - "$TRITONCLIENT_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
assert version("tritonclient") == sys.argv[1]
import tritonclient.grpc  # noqa: F401  (pulls grpcio and protobuf)
import tritonclient.http  # noqa: F401  (pulls geventhttpclient)
import nvidia.cuda_runtime  # noqa: F401
PY
then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        "tritonclient[grpc,http]==$TRITONCLIENT_VERSION" "protobuf<7" "nvidia-cuda-runtime-cu12" "numpy"
fi

PA="$(bash "$ROOT/tools/perf-analyzer.sh" --locate)"
echo "$PA"
