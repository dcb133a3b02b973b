#!/usr/bin/env bash
# Builds the container image (Containerfile) from the static binary.
#
#   .ci/image-build.sh [image-tag]      default tag: gantry:<version>, also tagged gantry:latest
#
# Builds the binary first when target/x86_64-unknown-linux-gnu/release/gantry is missing or
# GANTRY_STATIC_REBUILD=1. Uses podman (GANTRY_PODMAN_ARGS adds global options, say
# `--storage-driver vfs` where overlay mounts are not allowed, as in unprivileged containers).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
binary="$root/target/x86_64-unknown-linux-gnu/release/gantry"
if [ ! -x "$binary" ] || [ "${GANTRY_STATIC_REBUILD:-0}" = 1 ]; then
  binary=$("$root/.ci/static-build.sh" | tail -n 1)
fi
version=$("$binary" --version | awk '{print $2}')
tag=${1:-gantry:$version}

# The build context: only what the image holds.
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
# Without the line tables the release profile keeps for profiling (a quarter of the size);
# the symbols stay, so a backtrace still names functions.
strip --strip-debug -o "$context/gantry" "$binary"
mkdir "$context/data"
echo 'gantry:x:10001:10001:Gantry:/data:/nonexistent' > "$context/passwd"
echo 'gantry:x:10001:' > "$context/group"
printf 'hosts: files dns\n' > "$context/nsswitch.conf"
cp "$root/Containerfile" "$context/Containerfile"

# shellcheck disable=SC2086
pm() { podman ${GANTRY_PODMAN_ARGS:-} "$@"; }
# Docker's image format: the OCI format has no HEALTHCHECK.
pm build --format docker -f "$context/Containerfile" \
  --label "org.opencontainers.image.version=$version" \
  -t "$tag" -t gantry:latest "$context" >&2

# What the image promises: the unprivileged user, the volume, every port, the health check,
# and the very binary built above.
fail() { echo "image $tag: $*" >&2; exit 1; }
config=$(pm image inspect "$tag" --format '{{json .Config}}')
check() { python3 -c "import json,sys; c=json.load(sys.stdin); sys.exit(0 if $1 else 1)" <<<"$config" || fail "$2"; }
check 'c["User"] == "10001:10001"' "does not run as user 10001"
check '"/data" in c["Volumes"]' "has no /data volume"
check 'set(c["ExposedPorts"]) == {"8080/tcp", "8443/tcp", "1883/tcp", "8883/tcp", "8083/tcp", "8084/tcp"}' "exposes other ports"
pm image inspect "$tag" | python3 -c '
import json, sys
health = json.load(sys.stdin)[0].get("Healthcheck") or {}
sys.exit(0 if health.get("Test") == ["CMD", "/usr/local/bin/gantry", "healthcheck"] else 1)' \
  || fail "has no HEALTHCHECK running gantry healthcheck"
container=$(pm create "$tag")
pm cp "$container:/usr/local/bin/gantry" "$context/from-image" >/dev/null
pm rm "$container" >/dev/null 2>&1
cmp -s "$context/gantry" "$context/from-image" || fail "holds another binary than $binary"
echo "image $tag: user 10001, /data, 6 ports, HEALTHCHECK, the static binary" >&2
echo "$tag"
