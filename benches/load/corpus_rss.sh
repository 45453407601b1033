#!/usr/bin/env bash
# Resident memory of the largest control-plane corpus case, served by courier
# and by Envoy: bash benches/load/corpus_rss.sh
#
# Takes the largest case of $COURIER_CP_CORPUS (default ../shared/control-plane-corpus)
# that courier loads, moves its listeners to 127.0.0.1 port 0 (the case's own
# ports may be taken), starts the release courier and then Envoy
# ($COURIER_ENVOY, default .venv/bin/envoy) with one worker each, waits until
# /ready answers 200, lets them settle 2 s and prints each one's VmRSS and the
# time from start to ready. Builds nothing: run `cargo build --release -p courier` first.
set -euo pipefail
cd "$(dirname "$0")/../.."
CORPUS="${COURIER_CP_CORPUS:-../shared/control-plane-corpus}"
ENVOY="${COURIER_ENVOY:-.venv/bin/envoy}"
COURIER="${CARGO_TARGET_DIR:-target}/release/courier"
work="$(mktemp -d /tmp/courier-corpus-rss.XXXXXX)"
trap 'rm -rf "$work"' EXIT

# Largest first; the first one courier validates is the one measured.
case_file=""
while read -r _ f; do
  if "$COURIER" --mode validate -c "$f" --service-node cp-corpus --service-cluster cp-corpus >/dev/null 2>&1; then
    case_file="$f"
    break
  fi
done < <(find "$CORPUS" -name '*.json' -printf '%s %p\n' | sort -rn)
[ -n "$case_file" ] || { echo "no corpus case loads" >&2; exit 1; }
echo "case: ${case_file#"$CORPUS"/} ($(stat -c %s "$case_file") bytes)"

python3 - "$case_file" "$work/case.json" <<'PY'
import json, sys
case = json.load(open(sys.argv[1]))
statics = case.get("static_resources") or case.get("staticResources") or {}
for l in statics.get("listeners", []):
    l["address"] = {"socket_address": {"address": "127.0.0.1", "port_value": 0}}
    l.pop("additional_addresses", None)
    l.pop("additionalAddresses", None)
case["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 0}}}
json.dump(case, open(sys.argv[2], "w"))
PY

measure() { # name, command...
  local name=$1; shift
  local admin_file="$work/$name.admin"
  local start end pid rss
  start=$(date +%s%N)
  "$@" --admin-address-path "$admin_file" --concurrency 1 -c "$work/case.json" \
    --service-node cp-corpus --service-cluster cp-corpus >"$work/$name.log" 2>&1 &
  pid=$!
  # Bounded: 30 s for the admin address and /ready (polled every 10 ms).
  for _ in $(seq 1 3000); do
    if [ -s "$admin_file" ] && curl -sf "http://$(cat "$admin_file")/ready" >/dev/null 2>&1; then
      break
    fi
    sleep 0.01
  done
  end=$(date +%s%N)
  sleep 2
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  printf '%-8s ready in %4d ms, VmRSS %6d KiB\n' "$name" $(((end - start) / 1000000)) "$rss"
}

measure courier "$COURIER"
measure envoy "$ENVOY" --use-dynamic-base-id --log-level warn
