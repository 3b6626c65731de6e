#!/usr/bin/env bash
# Creates .venv-mlserver: MLServer with onnxruntime and tokenizers, for the benchmark's
# MLServer comparison (mlserver_runtime.py beside it runs inside it). MLServer lives apart from
# the project's .venv because it pins its own protobuf, grpcio and FastAPI stacks.
#
# uvloop is held below 0.22: from 0.22 on, asyncio.get_event_loop() raises in a thread without a
# loop, which MLServer 1.7's inference worker processes call at start-up (they die at once).
#
# Idempotent: an environment whose packages already import is left alone.
# Prints the environment's python on success.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
VENV="${ATTNSERVE_MLSERVER_VENV:-$ROOT/.venv-mlserver}"
PYTHON="${PYTHON:-python3}"
MLSERVER_VERSION="1.7.1"

ready() {
    "$VENV/bin/python" - "$MLSERVER_VERSION" <<'PY' >/dev/null 2>&1
import sys
from importlib.metadata import version
import mlserver, onnxruntime, tokenizers, numpy  # noqa: F401
uvloop = tuple(int(part) for part in version("uvloop").split(".")[:2])
sys.exit(0 if version("mlserver") == sys.argv[1] and uvloop < (0, 22) else 1)
PY
}

if [ -x "$VENV/bin/python" ] && ready; then
    echo "$VENV/bin/python"
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    "mlserver==$MLSERVER_VERSION" "uvloop<0.22" "onnxruntime>=1.20" "tokenizers>=0.20" "numpy>=1.26"
if ! ready; then
    echo "mlserver-env: MLServer $MLSERVER_VERSION does not import in $VENV" >&2
    exit 1
fi
echo "$VENV/bin/python"
