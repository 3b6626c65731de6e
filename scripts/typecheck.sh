#!/usr/bin/env bash
# mypy over the installed module names: service/ is attnserve.service only through the package-dir
# mapping, which mypy cannot follow, so it reads the stages through a folder of links named as installed.
set -euo pipefail
cd "$(dirname "$0")/.."
TYPING=build/typing/attnserve
mkdir -p "$TYPING"
for stage in service export training; do ln -sfn "../../../$stage" "$TYPING/$stage"; done
MYPYPATH=build/typing exec "${MYPY:-.venv/bin/mypy}" -p attnserve.service -p attnserve.export -p attnserve.training \
    -p bench -p kit -p loadtest -p tests "$@"
