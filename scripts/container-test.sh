#!/usr/bin/env bash
# Build the Pinch image and run it against local fake servers: a message sent to the fake
# Telegram server must be answered, and the data must survive a container restart.
#
# Needs podman (Debian: apt install podman runc debootstrap) or a Docker engine (CONTAINER=docker).
# Where no image registry is reachable, the base image is made with debootstrap from the Debian
# mirror apt already uses (BASE_IMAGE=... to use another; the default Dockerfile base is
# python:3.11-slim-bookworm for everyone else). Run as root for podman here. Takes a few minutes
# the first time (the base image and the dependency layer are cached afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

CONTAINER="${CONTAINER:-podman}"
IMAGE="${IMAGE:-localhost/pinch:container-test}"
BASE_IMAGE="${BASE_IMAGE:-localhost/pinch-base:bookworm}"
NAME="pinch-container-test-$$"
VOLUME="pinch-container-test-$$"
work="$(mktemp -d)"
cleanup() {
  "$CONTAINER" rm -f "$NAME" >/dev/null 2>&1 || true
  "$CONTAINER" volume rm -f "$VOLUME" >/dev/null 2>&1 || true
  if [ -n "${fakes_pid:-}" ]; then kill "$fakes_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

run_opts=()
build_opts=()
if [ "$CONTAINER" = podman ]; then
  # runc, no default ulimits and cgroupfs: what works on machines without systemd cgroups.
  if [ -z "${CONTAINERS_CONF:-}" ]; then
    printf '[containers]\ndefault_ulimits = []\n[engine]\ncgroup_manager = "cgroupfs"\n' \
      > "$work/containers.conf"
    export CONTAINERS_CONF="$work/containers.conf"
  fi
  run_opts+=(--runtime runc)
  build_opts+=(--runtime runc)
fi
# pip inside the build uses this machine's CA certificates and pip configuration.
for f in /etc/ssl/certs /etc/pip.conf; do
  if [ -e "$f" ]; then build_opts+=(-v "$f:$f:ro"); fi
done

if ! "$CONTAINER" image exists "$BASE_IMAGE" 2>/dev/null; then
  mirror="$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n1)"
  mirror="${mirror:-$(awk '/^deb /{print $2; exit}' /etc/apt/sources.list 2>/dev/null)}"
  mirror="${mirror:-http://deb.debian.org/debian}"
  echo "== base image: debootstrap bookworm from $mirror"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
    bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -n 20 "$work/debootstrap.log"; exit 1; }
  tar -C "$work/rootfs" -c . | "$CONTAINER" import - "$BASE_IMAGE" >/dev/null
  rm -rf "$work/rootfs"
fi

echo "== build $IMAGE (base $BASE_IMAGE)"
"$CONTAINER" build "${build_opts[@]}" --network host --build-arg "BASE=$BASE_IMAGE" -t "$IMAGE" . \
  >"$work/build.log" 2>&1 || { tail -n 40 "$work/build.log"; exit 1; }

echo "== fake Telegram and model servers"
.venv/bin/python -m tests.fakes.container_peers "$work/peers.json" >"$work/peers.log" 2>&1 &
fakes_pid=$!
for _ in $(seq 100); do [ -s "$work/peers.json" ] && break; sleep 0.1; done
[ -s "$work/peers.json" ] || { cat "$work/peers.log"; exit 1; }
telegram_url="$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["telegram"])' "$work/peers.json")"
model_url="$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["model"])' "$work/peers.json")"
control_url="$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))["control"])' "$work/peers.json")"

start_container() {
  "$CONTAINER" run -d "${run_opts[@]}" --network host --name "$NAME" \
    -v "$VOLUME:/data" \
    -e PINCH_TELEGRAM__BOT_TOKEN=123456:container-test-token-aaaaaaaaaaaaaaaaaaaaaaa \
    -e PINCH_TELEGRAM__API_BASE_URL="$telegram_url" \
    -e PINCH_OWNERS__TELEGRAM='["111"]' \
    -e PINCH_AGENT__API_BASE="$model_url" \
    -e ANTHROPIC_API_KEY=container-test-key \
    -e PINCH_MEMORY__EMBEDDING__PROVIDER=use \
    -e PINCH_GATEWAY__COLLECT_WINDOW_MS=200 \
    "$IMAGE" >/dev/null
}
ask() {  # ask TEXT EXPECTED: the owner sends TEXT; wait for a reply containing EXPECTED
  curl -fsS --max-time 120 "$control_url/ask" --data-urlencode "text=$1" \
    --data-urlencode "expect=$2" || { "$CONTAINER" logs "$NAME" | tail -n 40; exit 1; }
  echo
}

echo "== run, first message"
start_container
ask "Hello from the container test, my code word is LIMERICK." "Hello, owner"

echo "== restart: the conversation survives"
"$CONTAINER" restart "$NAME" >/dev/null
ask "What was my code word?" "LIMERICK"
"$CONTAINER" exec "$NAME" pinch doctor --health >/dev/null \
  || { echo "pinch doctor --health failed in the container"; exit 1; }
[ "$("$CONTAINER" exec "$NAME" id -u)" != "0" ] || { echo "the container runs as root"; exit 1; }
echo "container test passed"
