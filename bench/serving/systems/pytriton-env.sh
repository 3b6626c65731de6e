#!/usr/bin/env bash
# Creates .venv-pytriton: NVIDIA Triton as the nvidia-pytriton wheel ships it (tritonserver
# binary included) with onnxruntime and tokenizers, for the benchmark's PyTriton comparison
# (pytriton_server.py beside it runs inside it). Apart from the project's .venv because the wheel
# pins its own grpcio/protobuf stack. Idempotent; prints the environment's python on success.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
VENV="${ATTNSERVE_PYTRITON_VENV:-$ROOT/.venv-pytriton}"
PYTHON="${PYTHON:-python3}"

ready() {
    "$VENV/bin/python" -c 'import pytriton.triton, onnxruntime, tokenizers, numpy' >/dev/null 2>&1
}

if [ -x "$VENV/bin/python" ] && ready; then
    echo "$VENV/bin/python"
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check nvidia-pytriton onnxruntime tokenizers numpy
if ! ready; then
    echo "pytriton-env: nvidia-pytriton does not import in $VENV" >&2
    exit 1
fi
echo "$VENV/bin/python"
