"""The resilience scenarios of the load harness (issue 6), run by harness.py with
`ONLY=resilience` (they need extra upstreams, so a full run leaves them out).

1. Overhead: courier with `--concurrency 2` on envoy-resilience.yaml (retry policy,
   retry budget and outlier detection on) against the plain envoy-proxy.yaml, same
   healthy upstream, alternating RESIL_ROUNDS times (default 2): requests per proxy
   CPU-second and their ratio (target ≥ 0.95).
2. One bad host of ten: nine healthy upstreams and one answering 503 to everything,
   envoy-resilience10.yaml with num_retries 2 and with 0 (retries off), each with and
   without outlier detection, a bounded wrk run each: the client-visible error rate
   (target < 0.1 % with retries on).

`h` is the running harness module (its settings and helpers).
"""

import os
import time


def upstreams(h, n, status):
    """Starts n bench-upstream processes answering `status`; returns their ports."""
    ports = []
    for i in range(n):
        pf = os.path.join(h.RUN, f"resil-up{status}-{i}.port")
        h.spawn(["taskset", "-c", "1", os.path.join(h.BIN, "bench-upstream"), "127.0.0.1:0", pf,
                 str(h.BUDGET + 120), str(status)], f"resil-up{status}-{i}")
        deadline = time.monotonic() + 10
        while not os.path.exists(pf) and time.monotonic() < deadline:
            time.sleep(0.05)
        ports.append(int(open(pf).read()))
    return ports


def start(h, kind, cfg, tag, concurrency):
    """Starts courier or Envoy on `cfg`, pinned to CPU 0; (proc, port) or (None, why)."""
    port = int(open(cfg + ".port").read())
    if kind == "courier":
        cmd = [os.path.join(h.BIN, "courier"), "-c", cfg, "--concurrency", str(concurrency),
               "--log-level", "warn"]
    else:
        cmd = [h.ENVOY, "-c", cfg, "--concurrency", str(concurrency), "--disable-hot-restart",
               "--log-level", "warn"]
    proc = h.spawn(["taskset", "-c", "0"] + cmd, tag)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None, f"exited with {proc.returncode} (see {tag}.out)"
        if h.probe(port):
            return proc, port
        time.sleep(0.2)
    h.stop(proc)
    return None, "no 200 within 15 s"


def fill(h, template, name, **values):
    port = h.free_port()
    path = h.fill(template, name, PORT=port, **values)
    with open(path + ".port", "w") as f:
        f.write(str(port))
    return path


def overhead(h, uport, kinds):
    rounds = int(os.environ.get("RESIL_ROUNDS", "2"))
    d = str(h.DURATION)
    rows = []
    for kind in kinds:
        totals = {(m, p): [0, 0.0] for m in ("proxy", "resilience") for p in ("h1", "h2c")}
        why = None
        for rnd in range(rounds):
            for mode in ("proxy", "resilience"):
                if h.out_of_time():
                    why = why or "harness time budget spent"
                    continue
                h.log(f"resilience overhead: {kind} {mode} round {rnd + 1}")
                tag = f"{kind}-{mode}-resil{rnd}"
                cfg = fill(h, f"envoy-{mode}.yaml", f"{tag}.yaml", UPORT=uport)
                proc, port = start(h, kind, cfg, tag, 2)
                if not proc:
                    why = port
                    continue
                url = f"http://127.0.0.1:{port}/"
                try:
                    h.run_load(["wrk", "-t1", "-c50", "-d1s", url], f"{tag}-warmup", None)
                    out, cpu = h.run_load(["wrk", "-t1", "-c50", f"-d{d}s", url], f"{tag}-h1", proc.pid)
                    r = h.parse_wrk(out)
                    if r and r["errors"] == 0:
                        totals[(mode, "h1")][0] += r["ok"]
                        totals[(mode, "h1")][1] += cpu
                    out, cpu = h.run_load(["h2load", "-c10", "-m10", "-t1", "-D", d, url],
                                          f"{tag}-h2c", proc.pid)
                    r = h.parse_h2load(out)
                    if r and r["errors"] == 0:
                        totals[(mode, "h2c")][0] += r["ok"]
                        totals[(mode, "h2c")][1] += cpu
                finally:
                    h.stop(proc)
        rows.append((kind, totals, why))
    lines = ["### Resilience bookkeeping on a healthy cluster (`--concurrency 2`)", "",
             f"Requests per proxy CPU-second, {rounds} alternating rounds of {h.DURATION} s per config: "
             "envoy-proxy.yaml (plain route) vs envoy-resilience.yaml (retry policy 5xx × 2 with "
             "previous_hosts, retry budget, outlier detection); wrk -t1 -c50 (HTTP/1.1 keep-alive) "
             "and h2load -c10 -m10 (h2c); ratio = resilience ÷ plain (target ≥ 0.95).", "",
             "| proxy | h1 plain | h1 resilience | h1 ratio | h2c plain | h2c resilience | h2c ratio |",
             "|---|---|---|---|---|---|---|"]
    for kind, t, why in rows:
        cells = []
        for proto in ("h1", "h2c"):
            a = t[("proxy", proto)][0] / t[("proxy", proto)][1] if t[("proxy", proto)][1] else None
            b = t[("resilience", proto)][0] / t[("resilience", proto)][1] if t[("resilience", proto)][1] else None
            cells += [f"{a:,.0f}" if a else "–", f"{b:,.0f}" if b else "–",
                      f"{b / a:.2f}×" if a and b else "–"]
        note = f" ({why})" if why else ""
        lines.append(f"| {kind} --concurrency 2{note} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def without_outlier_detection(cfg):
    """Drops the cluster's outlier_detection block from a filled config."""
    with open(cfg) as f:
        lines = f.read().split("\n")
    out, skipping = [], False
    for line in lines:
        if line.strip() == "outlier_detection:":
            skipping = True
            continue
        if skipping and line.startswith("      "):
            continue
        skipping = False
        out.append(line)
    with open(cfg, "w") as f:
        f.write("\n".join(out))


def bad_host(h, kinds):
    good = upstreams(h, 9, 200)
    bad = upstreams(h, 1, 503)
    ports = {f"UPORT{i}": p for i, p in enumerate(good + bad)}
    d = str(max(h.DURATION, 10))
    rows = []
    for kind in kinds:
        for outlier in (True, False):
            for retries in (2, 0):
                if h.out_of_time():
                    rows.append((kind, outlier, retries, None, "harness time budget spent"))
                    continue
                h.log(f"one bad host of ten: {kind} outlier {outlier} num_retries {retries}")
                tag = f"{kind}-badhost-o{int(outlier)}-r{retries}"
                cfg = fill(h, "envoy-resilience10.yaml", f"{tag}.yaml", RETRIES=retries, **ports)
                if not outlier:
                    without_outlier_detection(cfg)
                # The probe may land on the bad host: start() retries until a 200.
                proc, port = start(h, kind, cfg, tag, 2)
                if not proc:
                    rows.append((kind, outlier, retries, None, port))
                    continue
                url = f"http://127.0.0.1:{port}/"
                try:
                    out, _ = h.run_load(["wrk", "-t1", "-c50", f"-d{d}s", url], f"{tag}-h1", proc.pid)
                    rows.append((kind, outlier, retries, out, None))
                finally:
                    h.stop(proc)
    lines = ["### One host of ten answering 503 to every request", "",
             f"envoy-resilience10.yaml (ten hosts, round robin, outlier detection consecutive_5xx 5, "
             f"base_ejection_time 30 s, max_ejection_percent 50; or none), wrk -t1 -c50 for {d} s from a cold "
             "start; client-visible errors = non-2xx answers + socket errors (target < 0.1 % with "
             "retries on).", "",
             "| proxy | outlier detection | num_retries | requests | client-visible errors | error rate |",
             "|---|---|---|---|---|---|"]
    for kind, outlier, retries, out, why in rows:
        r = h.parse_wrk(out) if out else None
        od = "on" if outlier else "off"
        if not r:
            lines.append(f"| {kind} | {od} | {retries} | – | – | {why or 'no wrk output'} |")
            continue
        total = r["ok"] + r["errors"]
        rate = 100.0 * r["errors"] / total if total else 0.0
        lines.append(f"| {kind} --concurrency 2 | {od} | {retries} | {total:,} | {r['errors']:,} | {rate:.3f} % |")
    return "\n".join(lines) + "\n"


def run(h, uport):
    kinds = [k for k in ("courier", "envoy") if k in h.PROXIES]
    return overhead(h, uport, kinds) + "\n" + bad_host(h, kinds)
