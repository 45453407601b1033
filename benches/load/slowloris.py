"""The slow-loris scenario of the load harness (issue 8), run by harness.py with
`ONLY=slowloris`: courier (and Envoy) on envoy-edge.yaml; bench-slowloris measures four
keep-alive clients' latency alone, then beside SLOW_CONNS (default 5000) connections that
send the start of a request and a header line every 2 s; p50/p99 of both phases and the
p50 ratio (target ≤ 2×).
"""

import os


def run(h, uport):
    conns = int(os.environ.get("SLOW_CONNS", "5000"))
    secs = str(max(h.DURATION, 5))
    lines = [f"### {conns:,} slow-loris connections beside normal clients (edge settings)", "",
             f"bench-slowloris: 4 keep-alive clients, {secs} s alone then {secs} s beside the "
             "slow connections (each sends `GET / HTTP/1.1`, `host`, then a header line every 2 s).", "",
             "| proxy | baseline | with slow-loris | p50 ratio | slow connections still held |",
             "|---|---|---|---|---|"]
    for kind in [k for k in ("courier", "envoy") if k in h.PROXIES]:
        if h.out_of_time():
            lines.append(f"| {kind} | skipped: harness time budget spent | | | |")
            continue
        h.log(f"slow-loris: {kind}")
        p = h.start_proxy(kind, "edge", uport)
        if not p.proc:
            lines.append(f"| {kind} | {p.reason} | | | |")
            continue
        try:
            port = p.h1.rsplit(":", 1)[1].strip("/")
            out, _ = h.run_load([os.path.join(h.BIN, "bench-slowloris"),
                                 f"127.0.0.1:{port}", str(conns), secs], f"{kind}-slowloris", p.proc.pid)
        finally:
            h.stop(p.proc)
        got = {}
        for line in (out or "").splitlines():
            if line.startswith("baseline:"):
                got["base"] = line.split(": ", 1)[1]
            elif line.startswith("with "):
                got["slow"] = line.split(": ", 1)[1]
            elif line.startswith("p50 ratio"):
                got["ratio"] = line.split()[-1] + "×"
            elif line.startswith("slow-loris connections still open"):
                got["held"] = line.split()[-1]
        lines.append(f"| {kind} | {got.get('base', '–')} | {got.get('slow', '–')} | "
                     f"{got.get('ratio', '–')} | {got.get('held', '–')} |")
    return "\n".join(lines) + "\n"
