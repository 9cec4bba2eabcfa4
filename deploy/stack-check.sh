#!/usr/bin/env bash
# Start the whole compose stack on this machine with podman and check it end to end:
# postgres, redis, the one-shot migration, the validator (on the local subnet of
# compose.localnet.yaml), the API; then /healthz, /readyz, a committed window, the dashboard, the API
# role refused a write, the image's user and read-only root, and a clean stop. Prints timings.
#
#   deploy/local-images.sh && deploy/stack-check.sh       # KEEP=1 leaves the stack running
#
# Needs root, podman, runc and python3; installs podman-compose into $TOOLS when it is missing.
# Settings (environment): LOCALNET_WINDOWS (2), API_PORT (a free one), IMAGE_TAG (local),
# TIMEOUT_S (900: to the first committed window).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS=${TOOLS:-/var/tmp/gauntlet-tools}
PROJECT=${PROJECT:-gauntlet-check}
TIMEOUT_S=${TIMEOUT_S:-900}
WORK=$(mktemp -d /var/tmp/gauntlet-stack.XXXXXX)
say() { printf '%s %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

if ! command -v podman-compose >/dev/null && [ ! -x "$TOOLS/bin/podman-compose" ]; then
  python3 -m venv "$TOOLS" && "$TOOLS/bin/pip" install -q 'podman-compose>=1.6,<2'
fi
PC=$(command -v podman-compose || echo "$TOOLS/bin/podman-compose")
port=${API_PORT:-$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}
hex() { python3 -c 'import secrets; print(secrets.token_hex(16))'; }

# The operator's files, written as deploy/README.md says, into a scratch folder.
mkdir -p "$WORK/wallets" "$WORK/data" "$WORK/secrets"
python3 -c 'import secrets; print(secrets.token_hex(32))' >"$WORK/secrets/validator_secret"
chown 10001 "$WORK/secrets/validator_secret" && chmod 0400 "$WORK/secrets/validator_secret"
cat >"$WORK/.env" <<EOF
POSTGRES_PASSWORD=$(hex)
DB_OWNER_PASSWORD=$(hex)
DB_API_PASSWORD=$(hex)
WALLET_DIR=$WORK/wallets
DATA_DIR=$WORK/data
IMAGE_TAG=${IMAGE_TAG:-local}
POSTGRES_IMAGE=localhost/gauntlet-postgres:15-bookworm
REDIS_IMAGE=localhost/gauntlet-redis:7-bookworm
GAUNTLET_ENV_FILE=$WORK/gauntlet.env
VALIDATOR_SECRET_FILE=$WORK/secrets/validator_secret
API_PORT=$port
LOCALNET_WINDOWS=${LOCALNET_WINDOWS:-2}
EOF
printf 'GAUNTLET_CHAIN=local\nGAUNTLET_DEVICE=cpu\n' >"$WORK/gauntlet.env"

compose() {
  "$PC" --env-file "$WORK/.env" -p "$PROJECT" -f deploy/compose.yaml -f deploy/compose.localnet.yaml \
    --podman-args "--runtime /usr/sbin/runc --cgroup-manager=cgroupfs" \
    --podman-run-args "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024" "$@"
}
c() { echo "${PROJECT}_$1_1"; }
http() {  # http PATH -> "STATUS BODY"
  python3 - "http://127.0.0.1:$port$1" <<'PY'
import sys, urllib.error, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print(r.status, r.read().decode(errors="replace"))
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode(errors="replace"))
except OSError as e:
    print(0, e)
PY
}
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then say "left running: $PC --env-file $WORK/.env -p $PROJECT ..."; return; fi
  compose down -v -t 30 >/dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

for image in "localhost/gauntlet:${IMAGE_TAG:-local}" "localhost/gauntlet-api:${IMAGE_TAG:-local}" \
  localhost/gauntlet-postgres:15-bookworm localhost/gauntlet-redis:7-bookworm; do
  podman image exists "$image" || fail "$image is missing: run deploy/local-images.sh"
done

t0=$(now)
# podman < 4.6 cannot wait for `service_healthy` (podman-compose skips the condition), so the
# databases start first, and the rest once PostgreSQL answers.
compose up -d postgres redis >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "postgres/redis did not start"; }
for _ in $(seq 1 60); do
  podman exec "$(c postgres)" pg_isready -U postgres -d gauntlet -q 2>/dev/null && break
  sleep 1
done
podman exec "$(c postgres)" pg_isready -U postgres -d gauntlet -q || fail "postgres is not ready"
# podman 4.3 cannot start a container whose dependency has dependencies ("not found in input
# list"), so each stage starts without podman's --requires, in the order compose.yaml declares.
compose up -d --no-deps migrate >>"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "migrate did not start"; }
[ "$(podman wait "$(c migrate)")" = 0 ] || { podman logs "$(c migrate)"; fail "the migration failed"; }
say "ok the migration ran: $(podman logs "$(c migrate)" 2>&1 | tail -n 1)"
compose up -d --no-deps validator api >>"$WORK/up.log" 2>&1 || { cat "$WORK/up.log"; fail "compose up failed"; }
say "stack up in $(since "$t0") s (api on 127.0.0.1:$port)"

for _ in $(seq 1 60); do [ "$(http /healthz | cut -d' ' -f1)" = 200 ] && break; sleep 1; done
[ "$(http /healthz | cut -d' ' -f1)" = 200 ] || { podman logs "$(c api)" | tail -20; fail "/healthz"; }
say "ok /healthz"
podman healthcheck run "$(c api)" >/dev/null || fail "the api image's HEALTHCHECK"
say "ok the api image's HEALTHCHECK"

end=$(( $(date +%s) + TIMEOUT_S ))
until http /v1/windows | grep -q '"state":"committed"'; do
  if [ "$(date +%s)" -gt "$end" ] || [ "$(podman inspect -f '{{.State.Running}}' "$(c validator)")" != true ] \
     && ! http /v1/windows | grep -q '"state":"committed"'; then
    podman logs "$(c validator)" 2>&1 | tail -30; fail "no window committed"
  fi
  sleep 2
done
first_window=$(since "$t0")
say "ok a window committed, $first_window s after the stack started"

readyz=$(http /readyz)
[ "${readyz%% *}" = 200 ] || fail "/readyz: $readyz"
say "ok /readyz: ${readyz#* }"
page=$(http /)
[ "${page%% *}" = 200 ] && grep -qi '<html' <<<"$page" || fail "the dashboard: ${page:0:200}"
say "ok the dashboard is served"

denied=$(podman exec "$(c postgres)" psql -U gauntlet_api -d gauntlet -c 'DELETE FROM windows' 2>&1 || true)
grep -q 'permission denied' <<<"$denied" || fail "the API role could write: $denied"
say "ok the API role is refused a write ($(head -n1 <<<"$denied"))"
for svc in api validator; do
  [ "$(podman inspect -f '{{.Config.User}}' "$(c "$svc")")" = gauntlet ] || fail "$svc does not run as gauntlet"
  [ "$(podman inspect -f '{{.HostConfig.ReadonlyRootfs}}' "$(c "$svc")")" = true ] || fail "$svc root is writable"
done
podman exec "$(c api)" sh -c 'touch /opt/gauntlet/x' 2>/dev/null && fail "the api could write its root"
say "ok api and validator run as uid $(podman exec "$(c api)" id -u) on a read-only root"

code=$(podman wait "$(c validator)")
[ "$code" = 0 ] || { podman logs "$(c validator)" 2>&1 | tail -30; fail "the validator exited $code"; }
windows=$(http /v1/windows | grep -o '"state":"committed"' | wc -l)
say "ok the validator finished its windows and exited 0 ($windows committed)"

compose stop -t 60 >>"$WORK/up.log" 2>&1
for svc in api postgres redis; do
  code=$(podman inspect -f '{{.State.ExitCode}}' "$(c "$svc")")
  [ "$code" = 0 ] || { podman logs "$(c "$svc")" 2>&1 | tail -10; fail "$svc stopped with exit code $code"; }
done
say "ok a clean stop: api, postgres and redis exited 0"
say "PASS: stack start to first committed window ${first_window} s; whole check $(since "$t0") s"
