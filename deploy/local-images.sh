#!/usr/bin/env bash
# Build the images of deploy/compose.yaml with podman where the public registries cannot be reached:
# the base images from Debian's packages (debootstrap), then the Gauntlet images on top of them.
#
#   deploy/local-images.sh base     # localhost/bookworm-min, gauntlet-python, gauntlet-postgres, gauntlet-redis
#   deploy/local-images.sh app      # localhost/gauntlet:local and localhost/gauntlet-api:local
#   deploy/local-images.sh all      # both (the default)
#
# The published Dockerfile and compose.yaml keep the public images as defaults; this script passes
# BASE_IMAGE and a local torch wheel, and deploy/compose.localnet.yaml names the images built here.
# Each base image is built only when missing (FORCE=1 rebuilds); podman's layer cache keeps app
# rebuilds to the layers that changed. Needs root, podman, runc and debootstrap
# (apt-get install -y podman runc debootstrap).
#
# Environment: DEBIAN_MIRROR, TORCH_WHEELS (a folder holding the CPU torch wheel; default /opt/wheels),
# TORCH_SPEC (default: the CPU wheel found there), IMAGE_TAG (default local), TARGETS (default
# "validator api": the Dockerfile targets to build), PODMAN_RUNTIME
# (default /usr/sbin/runc; empty: podman's default), WORK (scratch folder for the Debian root).
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
TORCH_WHEELS=${TORCH_WHEELS:-/opt/wheels}
IMAGE_TAG=${IMAGE_TAG:-local}
PODMAN_RUNTIME=${PODMAN_RUNTIME-/usr/sbin/runc}
WORK=${WORK:-/var/tmp/gauntlet-images}
DEBIAN=localhost/bookworm-min
PYTHON=localhost/gauntlet-python:3.11-bookworm
POSTGRES=localhost/gauntlet-postgres:15-bookworm
REDIS=localhost/gauntlet-redis:7-bookworm

# runc and cgroupfs: crun refuses hybrid cgroups on some hosts; limits inside the host's hard limits.
podman_cmd() {
  local flags=(--cgroup-manager=cgroupfs)
  [ -n "$PODMAN_RUNTIME" ] && flags+=(--runtime "$PODMAN_RUNTIME")
  podman "${flags[@]}" "$@"
}
build() {
  # docker format: the OCI format drops HEALTHCHECK (the api image needs it)
  podman_cmd build --format docker --network host --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@"
}
have() { podman image exists "$1" && [ "${FORCE:-0}" != 1 ]; }
say() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

debian_image() {
  have "$DEBIAN" && return
  say "debootstrap bookworm (minbase) from $DEBIAN_MIRROR"
  local root="$WORK/bookworm"
  rm -rf "$root" && mkdir -p "$WORK"
  debootstrap --variant=minbase bookworm "$root" "$DEBIAN_MIRROR" >"$WORK/debootstrap.log"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" -c . | podman import --change 'CMD ["/bin/bash"]' - "$DEBIAN" >/dev/null
  rm -rf "$root"
}

base_images() {
  debian_image
  local name file
  for pair in "$PYTHON=python" "$POSTGRES=postgres" "$REDIS=redis"; do
    name=${pair%%=*} file=${pair#*=}
    have "$name" && continue
    say "building $name"
    build --build-arg DEBIAN_IMAGE="$DEBIAN" -f "deploy/images/$file.Containerfile" -t "$name" deploy/images
  done
}

app_images() {
  podman image exists "$PYTHON" || base_images
  local wheel spec
  wheel=$(find "$TORCH_WHEELS" -maxdepth 1 -name 'torch-2.13.*+cpu-cp311-*.whl' 2>/dev/null | sort | tail -n 1)
  if [ -z "$wheel" ] && [ -z "${TORCH_SPEC:-}" ]; then
    echo "no CPU torch 2.13 wheel for Python 3.11 in $TORCH_WHEELS: set TORCH_WHEELS or TORCH_SPEC" >&2
    exit 1
  fi
  # An exact local version, so that pip takes the wheel from the folder and nothing else.
  spec=${TORCH_SPEC:-torch==$(basename "$wheel" | cut -d- -f2)}
  local args=(
    -f deploy/Dockerfile --ignorefile deploy/Dockerfile.dockerignore
    --build-arg BASE_IMAGE="$PYTHON" --build-arg TORCH_SPEC="$spec"
    --build-arg TORCH_INDEX_URL=https://pypi.org/simple --build-arg TORCH_FIND_LINKS=/wheels
    -v "$TORCH_WHEELS:/wheels:ro" -v /etc/ssl/certs:/etc/ssl/certs:ro
  )
  local target name
  for target in ${TARGETS:-validator api}; do
    name=localhost/gauntlet-$target:$IMAGE_TAG
    [ "$target" = validator ] && name=localhost/gauntlet:$IMAGE_TAG
    say "building $name ($spec)"
    build "${args[@]}" --target "$target" -t "$name" .
  done
  podman image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' | grep -E '^localhost/gauntlet' >&2
}

case "${1:-all}" in
  base) base_images ;;
  app) app_images ;;
  all) base_images && app_images ;;
  *) echo "usage: $0 [base|app|all]" >&2; exit 2 ;;
esac
