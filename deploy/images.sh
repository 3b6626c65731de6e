#!/usr/bin/env bash
# Build attnserve's container images: serve, loadtest and train, plus the local Prometheus
# image and, where no registry can be reached, the Debian and Python base images they build on.
#
#   deploy/images.sh [TARGET...]     TARGET: bases prometheus serve loadtest train (default: all)
#   deploy/images.sh --print NAME    print the image name of serve, loadtest, train, prometheus,
#                                    debian or python (after the same base-image choice)
#
# Engine: docker when its daemon answers, podman otherwise (ATTNSERVE_ENGINE forces one).
# podman reads deploy/podman/containers.conf and, as root, deploy/podman/storage.conf unless
# CONTAINERS_CONF / CONTAINERS_STORAGE_CONF are set: they fit a sandbox without systemd.
#
# Every image carries a label with a hash of its inputs (Dockerfile, the files it copies, its
# build arguments and its base image's id); an image whose label matches is not rebuilt.
# ATTNSERVE_REBUILD=1 rebuilds all the same (e.g. to pick up new dependency releases).
#
# Settings (environment):
#   ATTNSERVE_ENGINE        docker | podman (default: docker if `docker info` answers, else podman)
#   ATTNSERVE_BASES         registry | local | auto (default auto: local unless the registry's
#                           python image is already here or can be pulled)
#   ATTNSERVE_IMAGE_TAG     tag of the attnserve images (default: the version in pyproject.toml)
#   ATTNSERVE_DEBIAN_MIRROR Debian mirror for debootstrap (default: the one apt uses here)
#   ATTNSERVE_TORCH_WHEEL   torch CPU wheel for the train image (default: found in pip's
#                           find-links folders; none found = PyTorch's CPU index)
#   ATTNSERVE_BUILD_CA      CA bundle that pip inside podman's RUN steps trusts (default: the
#                           host's bundle, so a TLS-intercepting proxy's CA carries over)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPLOY="$ROOT/deploy"
LABEL="org.attnserve.inputs"
DEBIAN_SUITE=bookworm
REGISTRY_PYTHON="docker.io/library/python:3.11-slim-bookworm"
REGISTRY_DEBIAN="docker.io/library/debian:$DEBIAN_SUITE"
LOCAL_DEBIAN="localhost/debian:$DEBIAN_SUITE"
LOCAL_PYTHON="localhost/python:3.11-slim-bookworm"
CACHE_DIR="${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/attnserve-images"

say() { printf '== %s\n' "$*" >&2; }
die() { printf 'images.sh: %s\n' "$*" >&2; exit 2; }

version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
TAG="${ATTNSERVE_IMAGE_TAG:-$version}"
declare -A IMAGE=(
  [serve]="localhost/attnserve/serve:$TAG"
  [loadtest]="localhost/attnserve/loadtest:$TAG"
  [train]="localhost/attnserve/train:$TAG"
  [prometheus]="localhost/attnserve/prometheus:$DEBIAN_SUITE"
)

choose_engine() {
  case "${ATTNSERVE_ENGINE:-}" in
    docker | podman) ENGINE="$ATTNSERVE_ENGINE" ;;
    "")
      if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then ENGINE=docker
      elif command -v podman >/dev/null; then ENGINE=podman
      else die "no container engine: install podman, or start a Docker daemon"
      fi ;;
    *) die "ATTNSERVE_ENGINE must be docker or podman, not '$ATTNSERVE_ENGINE'" ;;
  esac
  if [[ $ENGINE == podman ]]; then
    export CONTAINERS_CONF="${CONTAINERS_CONF:-$DEPLOY/podman/containers.conf}"
    if [[ $(id -u) -eq 0 ]]; then
      export CONTAINERS_STORAGE_CONF="${CONTAINERS_STORAGE_CONF:-$DEPLOY/podman/storage.conf}"
    fi
  fi
}

engine() { "$ENGINE" "$@"; }
exists() { engine image inspect "$1" >/dev/null 2>&1; }
image_id() { engine image inspect --format '{{.Id}}' "$1"; }
image_label() { engine image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$1" 2>/dev/null || true; }

# A stable hash of files and folders (relative to the repository) plus extra words.
inputs_hash() {
  local words="$1"; shift
  {
    printf '%s\n' "$words"
    (cd "$ROOT" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.py[cod]' -print0 \
      | LC_ALL=C sort -z | xargs -0 sha256sum)
  } | sha256sum | cut -d' ' -f1
}

# Decide where FROM lines point: the registry's images, or local ones made here.
choose_bases() {
  local mode="${ATTNSERVE_BASES:-auto}"
  case "$mode" in
    registry) USE_LOCAL=0 ;;
    local) USE_LOCAL=1 ;;
    auto)
      if exists "$REGISTRY_PYTHON"; then USE_LOCAL=0
      elif exists "$LOCAL_PYTHON"; then USE_LOCAL=1
      elif timeout 60 "$ENGINE" pull -q "$REGISTRY_PYTHON" >/dev/null 2>&1 \
        && timeout 60 "$ENGINE" pull -q "$REGISTRY_DEBIAN" >/dev/null 2>&1; then USE_LOCAL=0
      else say "no registry reachable: base images are made here"; USE_LOCAL=1
      fi ;;
    *) die "ATTNSERVE_BASES must be registry, local or auto, not '$mode'" ;;
  esac
  if ((USE_LOCAL)); then PYTHON_BASE="$LOCAL_PYTHON"; DEBIAN_BASE="$LOCAL_DEBIAN"
  else PYTHON_BASE="$REGISTRY_PYTHON"; DEBIAN_BASE="$REGISTRY_DEBIAN"
  fi
}

debian_mirror() {
  if [[ -n ${ATTNSERVE_DEBIAN_MIRROR:-} ]]; then echo "$ATTNSERVE_DEBIAN_MIRROR"; return; fi
  local found
  found="$(grep -hs -m1 -E '^URIs: .*/debian/?$' /etc/apt/sources.list.d/*.sources | awk '{print $2}' || true)"
  [[ -n $found ]] || found="$(awk '$1 == "deb" && $2 ~ /\/debian\/?$/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"
  echo "${found:-http://deb.debian.org/debian}"
}

make_debian() {
  exists "$LOCAL_DEBIAN" && return
  command -v debootstrap >/dev/null || die "debootstrap is needed to make $LOCAL_DEBIAN (apt-get install debootstrap)"
  [[ $(id -u) -eq 0 ]] || die "debootstrap needs root to make $LOCAL_DEBIAN"
  local rootfs mirror
  rootfs="$(mktemp -d)"
  mirror="$(debian_mirror)"
  say "debootstrap $DEBIAN_SUITE from $mirror"
  debootstrap --variant=minbase "$DEBIAN_SUITE" "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -n 20 "$rootfs.log" >&2; rm -rf "$rootfs" "$rootfs.log"; die "debootstrap failed"; }
  # What a registry's debian image also leaves out: downloaded packages and package lists.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  # Like the registry's -slim images: no manuals or translations (licences stay), now or later.
  printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
    'path-exclude /usr/share/man/*' 'path-exclude /usr/share/info/*' \
    'path-exclude /usr/share/locale/*' 'path-include /usr/share/locale/locale.alias' \
    >"$rootfs/etc/dpkg/dpkg.cfg.d/slim"
  find "$rootfs/usr/share/doc" -type f ! -name copyright -delete
  find "$rootfs/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
  rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
  tar -C "$rootfs" -c . | engine import --change 'CMD ["bash"]' - "$LOCAL_DEBIAN" >/dev/null
  rm -rf "$rootfs" "$rootfs.log"
}

# Arguments every build gets: the host CA for pip (podman only: docker builds take no mounts).
build_mounts=()
prepare_build_mounts() {
  [[ $ENGINE == podman ]] || return 0
  local ca="${ATTNSERVE_BUILD_CA:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}"
  [[ -f $ca ]] || return 0
  mkdir -p "$CACHE_DIR"
  # Mounted beside the image's own bundle, never over it: a RUN step that installs
  # ca-certificates would otherwise write into the host's file.
  printf '[global]\ncert = /host-ca.pem\n' >"$CACHE_DIR/pip.conf"
  build_mounts=(--volume "$ca:/host-ca.pem:ro" --volume "$CACHE_DIR/pip.conf:/etc/pip.conf:ro")
}

# build IMAGE DOCKERFILE BASE_IMAGE INPUT_PATHS... -- BUILD_ARGS...
build() {
  local image="$1" dockerfile="$2" base="$3"; shift 3
  local inputs=() args=()
  while (($#)) && [[ $1 != -- ]]; do inputs+=("$1"); shift; done
  (($#)) && shift
  args=("$@")
  local hash
  hash="$(inputs_hash "$ENGINE $(image_id "$base") ${args[*]} ${HASH_EXTRA:-}" "$dockerfile" "${inputs[@]}")"
  HASH_EXTRA=""
  if [[ ${ATTNSERVE_REBUILD:-0} != 1 ]] && [[ "$(image_label "$image")" == "$hash" ]]; then
    say "$image is up to date"
    return
  fi
  say "building $image"
  local start=$SECONDS format=()
  # podman's default OCI format drops HEALTHCHECK.
  [[ $ENGINE == podman ]] && format=(--format docker)
  engine build "${format[@]}" "${build_mounts[@]}" --label "$LABEL=$hash" -f "$ROOT/$dockerfile" \
    -t "$image" "${args[@]}" "$ROOT"
  say "built $image in $((SECONDS - start)) s ($(image_size "$image"))"
}

image_size() {
  engine image inspect --format '{{.Size}}' "$1" | awk '{printf "%.0f MB", $1 / 1e6}'
}

make_python() {
  build "$LOCAL_PYTHON" deploy/base/Dockerfile.python "$LOCAL_DEBIAN" -- \
    --build-arg "DEBIAN_IMAGE=$LOCAL_DEBIAN"
}

torch_wheel() {
  if [[ -n ${ATTNSERVE_TORCH_WHEEL:-} ]]; then
    [[ -f $ATTNSERVE_TORCH_WHEEL ]] || die "ATTNSERVE_TORCH_WHEEL=$ATTNSERVE_TORCH_WHEEL is not a file"
    echo "$ATTNSERVE_TORCH_WHEEL"; return
  fi
  local torch dirs dir
  torch="$(sed -n 's/^ *"torch==\([^"]*\)".*/\1/p' "$ROOT/pyproject.toml" | head -n 1)"
  dirs="${PIP_FIND_LINKS:-} /opt/wheels"
  for dir in $dirs; do
    for wheel in "$dir"/torch-"$torch"+cpu-*.whl; do
      [[ -f $wheel ]] && { echo "$wheel"; return; }
    done
  done
}

build_target() {
  local args=(--build-arg "PYTHON_IMAGE=$PYTHON_BASE")
  case "$1" in
    serve)
      build "${IMAGE[serve]}" deploy/Dockerfile.serve "$PYTHON_BASE" pyproject.toml setup.py README.md service \
        deploy/healthcheck.sh deploy/prune_venv.py -- --target runtime "${args[@]}" ;;
    loadtest)
      build "${IMAGE[loadtest]}" deploy/Dockerfile.serve "$PYTHON_BASE" pyproject.toml setup.py README.md service \
        deploy/healthcheck.sh deploy/prune_venv.py loadtest kit -- --target loadtest "${args[@]}" ;;
    train)
      local wheel torch_args=()
      wheel="$(torch_wheel)"
      if [[ -n $wheel && $ENGINE == podman ]]; then
        # A folder holding only that wheel: pip must not find anything else there.
        mkdir -p "$CACHE_DIR/torch"
        find "$CACHE_DIR/torch" -name '*.whl' ! -name "$(basename "$wheel")" -delete
        [[ -f $CACHE_DIR/torch/$(basename "$wheel") ]] || cp "$wheel" "$CACHE_DIR/torch/"
        torch_args=(--volume "$CACHE_DIR/torch:/torch-wheels:ro" --build-arg TORCH_FIND_LINKS=/torch-wheels)
        HASH_EXTRA="$(basename "$wheel")"
      fi
      build "${IMAGE[train]}" deploy/Dockerfile.train "$PYTHON_BASE" pyproject.toml setup.py README.md service \
        training export deploy/bootstrap-models.sh -- "${args[@]}" "${torch_args[@]}" ;;
    prometheus)
      build "${IMAGE[prometheus]}" deploy/Dockerfile.prometheus "$DEBIAN_BASE" -- \
        --build-arg "DEBIAN_IMAGE=$DEBIAN_BASE" ;;
    bases)
      if ((USE_LOCAL)); then make_debian; make_python; fi ;;
    *) die "unknown target '$1' (bases, prometheus, serve, loadtest, train)" ;;
  esac
}

main() {
  if [[ ${1:-} == --print ]]; then
    [[ -n ${2:-} ]] || die "--print needs a name"
    choose_engine; choose_bases
    case "$2" in
      debian) echo "$DEBIAN_BASE" ;;
      python) echo "$PYTHON_BASE" ;;
      engine) echo "$ENGINE" ;;
      *) [[ -n ${IMAGE[$2]:-} ]] || die "no image named '$2'"; echo "${IMAGE[$2]}" ;;
    esac
    return
  fi
  local targets=("$@")
  ((${#targets[@]})) || targets=(bases prometheus serve loadtest train)
  choose_engine
  choose_bases
  say "engine $ENGINE, bases $PYTHON_BASE and $DEBIAN_BASE"
  prepare_build_mounts
  # The bases come first whatever the order asked: every other image builds on them.
  if [[ " ${targets[*]} " != *" bases "* ]] && ((USE_LOCAL)); then build_target bases; fi
  local target
  for target in "${targets[@]}"; do build_target "$target"; done
}

main "$@"
