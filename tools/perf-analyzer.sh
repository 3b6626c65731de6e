#!/usr/bin/env bash
# Runs the perf_analyzer binary that the tritonclient wheel in .venv-tools ships, with the
# shared libraries it needs (libcudart.so.12 from nvidia-cuda-runtime-cu12) on the loader
# path. `perf-analyzer.sh --locate` prints the binary's path instead of running it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${ATTNSERVE_TOOLS_VENV:-$ROOT/.venv-tools}"

if [ ! -x "$VENV/bin/python" ]; then
    echo "perf-analyzer: no tools environment at $VENV; run tools/triton-env.sh" >&2
    exit 2
fi

SITE="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# The wheel's data scheme puts the binary in the venv's bin/; some installers leave it
# under site-packages instead, so look in both.
PA=""
for candidate in "$VENV/bin/perf_analyzer" "$SITE/bin/perf_analyzer"; do
    if [ -x "$candidate" ]; then PA="$candidate"; break; fi
done
if [ -z "$PA" ]; then
    echo "perf-analyzer: tritonclient in $VENV ships no perf_analyzer binary" >&2
    exit 2
fi

CUDART="$SITE/nvidia/cuda_runtime/lib"
if [ ! -e "$CUDART/libcudart.so.12" ]; then
    echo "perf-analyzer: libcudart.so.12 missing under $CUDART (nvidia-cuda-runtime-cu12)" >&2
    exit 2
fi
export LD_LIBRARY_PATH="$CUDART${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ "${1:-}" = "--locate" ]; then
    # Prove that the loader resolves every library before calling the tool usable.
    if ldd "$PA" | grep -q 'not found'; then
        echo "perf-analyzer: unresolved libraries:" >&2
        ldd "$PA" | grep 'not found' >&2
        exit 2
    fi
    echo "$PA"
    exit 0
fi
exec "$PA" "$@"
