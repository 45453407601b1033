#!/usr/bin/env bash
# User-space instructions per proxied request, counted by callgrind (repeatable
# whatever else the machine is doing): bash benches/load/callgrind.sh [N]
#
# Runs the release courier (one worker, no access log) in front of bench-upstream
# on loopback twice under valgrind --tool=callgrind, once for 2 000 and once for
# 2 000 + N (default 10 000) keep-alive HTTP/1.1 GETs from h2load on one
# connection, and prints (total(2 000 + N) - total(2 000)) / N: start-up and
# shutdown cancel out. Needs valgrind and h2load (nghttp2-client); builds nothing:
# run `cargo build --release -p courier -p courier-benches --bins` first.
# CALLGRIND_KEEP=1 keeps the two profiles (callgrind_annotate them, or diff
# per function). CALLGRIND_H2C=1 sends the GETs as h2c (prior knowledge, one
# stream at a time) instead of HTTP/1.1. CALLGRIND_BARE=1 counts bench-bare-proxy
# (the smallest proxy on courier's stack) instead of courier.
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:-10000}"
BIN="${CARGO_TARGET_DIR:-target}/release"
work="$(mktemp -d /tmp/courier-callgrind.XXXXXX)"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$BIN/bench-upstream" 127.0.0.1:0 "$work/upstream.port" 600 &
upstream=$!
trap 'kill $upstream 2>/dev/null; [ -n "${CALLGRIND_KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 1 50); do [ -s "$work/upstream.port" ] && break; sleep 0.1; done

run() { # requests -> total instructions
  local requests=$1 port admin
  port=$(free_port); admin=$(free_port)
  cat > "$work/courier.yaml" <<YAML
admin: {address: {socket_address: {address: 127.0.0.1, port_value: $admin}}}
static_resources:
  listeners:
  - name: l
    address: {socket_address: {address: 127.0.0.1, port_value: $port}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: ingress
          route_config:
            virtual_hosts:
            - {name: all, domains: ["*"], routes: [{match: {prefix: "/"}, route: {cluster: up}}]}
          http_filters:
          - name: envoy.filters.http.router
            typed_config: {"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}
  clusters:
  - name: up
    connect_timeout: 1s
    load_assignment:
      cluster_name: up
      endpoints: [{lb_endpoints: [{endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: $(cat "$work/upstream.port")}}}}]}]
YAML
  local proxy=("$BIN/courier" -c "$work/courier.yaml" --concurrency 1 --drain-time-s 1) stop_signal=INT
  if [ -n "${CALLGRIND_BARE:-}" ]; then
    proxy=("$BIN/bench-bare-proxy" "127.0.0.1:$port" "127.0.0.1:$(cat "$work/upstream.port")" 600)
    stop_signal=TERM
  fi
  valgrind --tool=callgrind --callgrind-out-file="$work/cg.$requests" \
    "${proxy[@]}" >/dev/null 2>"$work/courier.$requests.log" &
  local vg=$!
  for _ in $(seq 1 120); do curl -sf -o /dev/null "http://127.0.0.1:$port/" && break; sleep 0.5; done
  local proto=(--h1)
  [ -z "${CALLGRIND_H2C:-}" ] || proto=(-m 1)
  h2load "${proto[@]}" -n "$requests" -c 1 -t 1 "http://127.0.0.1:$port/" | grep -E '^requests:' >&2
  # A background job ignores SIGINT unless it handles it (courier does).
  kill "-${stop_signal}" $vg; wait $vg || true
  callgrind_annotate "$work/cg.$requests" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}'
}
base=$(run 2000)
more=$(run $((2000 + N)))
echo "instructions per request: $(( (more - base) / N ))  (totals $base, $more; profiles in $work)"
