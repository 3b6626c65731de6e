#!/bin/sh
# One-shot model bootstrap for a fresh deployment: when the model repository holds no bundle
# yet, train the default model and export it there; otherwise leave the repository alone.
# Exits 0 in both cases so that servers waiting on it can start.
set -eu

repository="${ATTNSERVE_REPOSITORY:?ATTNSERVE_REPOSITORY must name the model repository}"
runs_dir="${ATTNSERVE_RUNS_DIR:?ATTNSERVE_RUNS_DIR must name a writable folder for training runs}"
name="${ATTNSERVE_MODEL_NAME:-car-order}"
task="${ATTNSERVE_TRAIN_TASK:-car-order}"
family="${ATTNSERVE_TRAIN_MODEL:-transformer}"
extra_args="${ATTNSERVE_TRAIN_ARGS:-}"

mkdir -p "$repository" "$runs_dir"

# A repository counts as populated once any <name>/<version>/bundle.json exists: export writes
# a version to a temporary folder and renames it into place, so a bundle.json is never partial.
for manifest in "$repository"/*/*/bundle.json; do
  if [ -f "$manifest" ]; then
    echo "model repository $repository already holds bundles; nothing to train"
    exit 0
  fi
done

run_dir="$runs_dir/$name-$(date -u +%Y%m%dT%H%M%SZ)"
echo "model repository $repository is empty: training $family on $task into $run_dir"
# ATTNSERVE_TRAIN_ARGS is a list of extra flags, split on whitespace on purpose.
# shellcheck disable=SC2086
attnserve-train --task "$task" --model "$family" --out "$run_dir" $extra_args
echo "exporting $run_dir to $repository/$name"
attnserve-export "$run_dir" --repository "$repository" --name "$name"
echo "model repository $repository is ready"
