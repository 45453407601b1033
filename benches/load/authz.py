"""The authorization-chain comparison of the load harness (issue 4), run by harness.py
(`ONLY=authz` alone, or last in a full run when courier serves and time is left).

courier (and Envoy) on envoy-authz.yaml — jwt_authn (ES256, jwt_cache_config) → rbac (50
policies) → router — against the router-only envoy-proxy.yaml, alternating AUTHZ_ROUNDS
times (default 2), every request carrying the bench token; requests per proxy CPU-second
and their ratio. `h` is the running harness module (its settings and helpers).
"""

import os
import sys


def token_of(h):
    """The bench token recorded in envoy-authz.yaml's header comment."""
    with open(os.path.join(h.LOAD, "envoy-authz.yaml")) as f:
        for line in f:
            if line.startswith("# TOKEN "):
                return line.split()[2]
    sys.exit("envoy-authz.yaml has no TOKEN line")


def run(h, uport):
    """courier (and Envoy) with the authorization chain against the router-only config,
    alternating AUTHZ_ROUNDS times; h1 keep-alive and h2c, every request with the token."""
    token = token_of(h)
    rounds = int(os.environ.get("AUTHZ_ROUNDS", "2"))
    return compare(
        h, uport, "authz", {"authorization": f"Bearer {token}"}, rounds,
        "### Authorization chain: jwt_authn (ES256, jwt_cache_config) → rbac (50 policies) → router",
        "every request carrying the bench token; ratio = chain ÷ router-only (target ≥ 0.8).",
        ("router-only", "chain"))


def compare(h, uport, mode, headers, rounds, title, note, names):
    """courier (and Envoy) on envoy-`mode`.yaml against envoy-proxy.yaml, alternating
    `rounds` times: requests per proxy CPU-second of each (h1 keep-alive with wrk -c50,
    h2c with h2load -c10 -m10) and their ratio. `names` label the two configs."""
    extra = []
    for k, v in headers.items():
        extra += ["-H", f"{k}: {v}"]
    d = str(h.DURATION)
    rows = []
    for kind in [k for k in ("courier", "envoy") if k in h.PROXIES]:
        totals = {(m, proto): [0, 0.0] for m in ("proxy", mode) for proto in ("h1", "h2c")}
        why = None
        for rnd in range(rounds):
            for m in ("proxy", mode):
                if h.out_of_time():
                    why = why or "harness time budget spent"
                    continue
                h.log(f"{mode} comparison: {kind} {m} round {rnd + 1}")
                p = h.start_proxy(kind, m, uport, headers=headers or None)
                if not p.proc:
                    why = p.reason
                    continue
                tag = f"{kind}-{m}-{mode}{rnd}"
                try:
                    h.run_load(["wrk", "-t1", "-c50", "-d1s"] + extra + [p.h1], f"{tag}-warmup", None)
                    out, cpu = h.run_load(["wrk", "-t1", "-c50", f"-d{d}s"] + extra + [p.h1],
                                        f"{tag}-h1", p.proc.pid)
                    r = h.parse_wrk(out)
                    if r and r["errors"] == 0:
                        totals[(m, "h1")][0] += r["ok"]
                        totals[(m, "h1")][1] += cpu
                    out, cpu = h.run_load(["h2load", "-c10", "-m10", "-t1", "-D", d] + extra + [p.h2],
                                        f"{tag}-h2c", p.proc.pid)
                    r = h.parse_h2load(out)
                    if r and r["errors"] == 0:
                        totals[(m, "h2c")][0] += r["ok"]
                        totals[(m, "h2c")][1] += cpu
                finally:
                    h.stop(p.proc)
        rows.append((kind, totals, why))
    base_name, other_name = names
    lines = [title, "",
             f"Requests per proxy CPU-second, {rounds} alternating rounds of {h.DURATION} s per config "
             "(wrk -t1 -c50 for HTTP/1.1 keep-alive, h2load -c10 -m10 for h2c), " + note, "",
             f"| proxy | h1 {base_name} | h1 {other_name} | h1 ratio | h2c {base_name} | h2c {other_name} | h2c ratio |",
             "|---|---|---|---|---|---|---|"]
    for kind, t, why in rows:
        cells = []
        for proto in ("h1", "h2c"):
            base = t[("proxy", proto)][0] / t[("proxy", proto)][1] if t[("proxy", proto)][1] else None
            other = t[(mode, proto)][0] / t[(mode, proto)][1] if t[(mode, proto)][1] else None
            cells += [f"{base:,.0f}" if base else "–", f"{other:,.0f}" if other else "–",
                      f"{other / base:.2f}×" if base and other else "–"]
        note_ = f" ({why})" if why else ""
        lines.append(f"| {kind}{note_} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
