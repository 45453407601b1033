"""The edge-settings comparison of the load harness (issue 8), run by harness.py with
`ONLY=edge`: courier (and Envoy) on envoy-edge.yaml — the settings of Envoy's edge
best-practices bootstrap that apply to plaintext (tls_inspector, 32 KiB connection
buffers, use_remote_address, path normalisation, underscore rejection, HTTP/2 limits,
stream and request timeouts, overload manager with fixed_heap, runtime connection
limits) — against the plain envoy-proxy.yaml, alternating EDGE_ROUNDS times (default 3).
"""

import os

import authz


def run(h, uport):
    rounds = int(os.environ.get("EDGE_ROUNDS", "3"))
    return authz.compare(
        h, uport, "edge", {}, rounds,
        "### Edge best-practices settings (plaintext) against the data-plane baseline",
        "ratio = edge ÷ baseline (target ≥ 0.9).",
        ("baseline", "edge"))
