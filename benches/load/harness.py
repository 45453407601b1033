#!/usr/bin/env python3
"""courier's load harness (run through benches/load/run.sh, which installs the tools
and builds the binaries first).

Puts courier, Envoy, nginx and HAProxy in turn in front of one tiny upstream
(bench-upstream, 13-byte answers), each proxy with one worker and no access log,
pinned to CPU 0 while the load generators and the upstream run on CPU 1, all on
loopback. Prints side-by-side tables and writes them, with every raw output, under
a fresh /tmp/courier-load.* folder.

Every run is bounded: each load command has a timeout, each wait a deadline, and the
whole harness a time budget after which the remaining steps are skipped.

Environment: DURATION (seconds per load run, default 5), RATE (total requests/s of
the fixed-rate latency runs, default 5000), CONNS (idle connections of the memory
run, default 10000), SETTLE (seconds the idle connections stay quiet before the memory
run's second reading, default 5: courier parks an HTTP/1.1 connection after 1 s of quiet and
hands the freed memory back within a second), BUDGET (seconds for the whole harness, default 540), PROXIES
(comma-separated subset of courier,envoy,nginx,haproxy,bare-hyper; default all; bare-hyper is
bench-bare-proxy, the smallest proxy on courier's stack, so a figure separates courier's own
cost from hyper's and tokio's), ONLY=authz (run
only the authorization-chain comparison; ONLY=resilience: issue 6's scenarios in
resilience.py; ONLY=edge: edge best-practices settings against the baseline, edge.py;
ONLY=slowloris: normal clients beside SLOW_CONNS slow-loris connections, slowloris.py;
ONLY=memory: the memory runs alone, HTTP/1.1 and h2c),
AUTHZ_ROUNDS (its alternating rounds, 2), EDGE_ROUNDS (3).

The authorization-chain comparison (issue 4): courier (and Envoy) on envoy-authz.yaml
(jwt_authn ES256 with jwt_cache_config -> rbac with 50 policies -> router) against the
router-only envoy-proxy.yaml, same requests (both carry the token), requests per proxy
CPU-second and their ratio.

The machine's load average is printed at the start and the end: figures taken while
something else runs (a build) are not comparable, rerun them.
"""

import http.client
import os
import re
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time

import authz  # benches/load/authz.py: the authorization-chain comparison
import edge  # benches/load/edge.py: edge best-practices settings against the baseline
import slowloris  # benches/load/slowloris.py: normal clients beside slow-loris connections
import resilience  # benches/load/resilience.py: issue 6's scenarios (ONLY=resilience)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOAD = os.path.join(ROOT, "benches", "load")
BIN = os.path.join(os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target")), "release")
ENVOY = os.environ.get("COURIER_ENVOY", os.path.join(ROOT, ".venv", "bin", "envoy"))
DURATION = int(os.environ.get("DURATION", "5"))
RATE = int(os.environ.get("RATE", "5000"))
CONNS = int(os.environ.get("CONNS", "10000"))
SETTLE = float(os.environ.get("SETTLE", "5"))
BUDGET = int(os.environ.get("BUDGET", "540"))
PROXIES = os.environ.get("PROXIES", "courier,envoy,nginx,haproxy,bare-hyper").split(",")
BODY = b"Hello, World!"
TICKS = os.sysconf("SC_CLK_TCK")
START = time.monotonic()
RUN = tempfile.mkdtemp(prefix="courier-load.")
STARTED = []  # every process this harness started, to stop them on exit


def log(msg):
    print(f"[{time.monotonic() - START:6.1f}s] {msg}", file=sys.stderr, flush=True)


def out_of_time():
    return time.monotonic() - START > BUDGET


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def proc_stats():
    """{pid: (ppid, utime+stime ticks, rss kB)} for every process."""
    stats = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/statm") as f:
                rss_pages = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
        # After the command: state ppid ... utime (14th field overall) stime (15th).
        stats[int(name)] = (int(fields[1]), int(fields[11]) + int(fields[12]),
                            rss_pages * os.sysconf("SC_PAGE_SIZE") // 1024)
    return stats


def tree(pid, stats):
    """pid and its descendants (nginx's workers)."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        if p in stats:
            pids.append(p)
            todo.extend(c for c, v in stats.items() if v[0] == p)
    return pids


def cpu_seconds(pid):
    stats = proc_stats()
    return sum(stats[p][1] for p in tree(pid, stats)) / TICKS


def rss_kb(pid):
    stats = proc_stats()
    return sum(stats[p][2] for p in tree(pid, stats))


def spawn(cmd, name):
    out = open(os.path.join(RUN, f"{name}.out"), "w")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    STARTED.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)
    # nginx workers exit with their master; anything left of the tree goes too.


def stop_all():
    for p in STARTED:
        try:
            stop(p)
        except Exception:  # keep stopping the others
            pass


def probe(port, attempts=1, headers=None):
    """True when GET / on port answers 200 with the 13-byte body."""
    for _ in range(attempts):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/", headers=headers or {})
            r = c.getresponse()
            ok = r.status == 200 and r.read() == BODY
            c.close()
            if ok:
                return True
        except OSError:
            pass
        time.sleep(0.1)
    return False


def fill(template, name, **values):
    with open(os.path.join(LOAD, template)) as f:
        text = f.read()
    for k, v in values.items():
        text = text.replace(f"@{k}@", str(v))
    path = os.path.join(RUN, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class Proxy:
    """A started proxy: its process and URLs, or why it is not serving."""

    def __init__(self, label, proc=None, h1=None, h2=None, reason=None):
        self.label, self.proc, self.h1, self.h2, self.reason = label, proc, h1, h2, reason


def start_proxy(kind, mode, upstream_port, concurrency=1, headers=None):
    """Starts `kind` ('courier', 'envoy', 'nginx', 'haproxy') in `mode` ('proxy'
    forwards to the upstream, 'direct' answers itself) pinned to CPU 0."""
    port = free_port()
    h2port = port
    label = kind if concurrency == 1 else f"{kind} --concurrency {concurrency}"
    tag = f"{kind}{concurrency}-{mode}"
    if kind in ("courier", "envoy"):
        cfg = fill(f"envoy-{mode}.yaml", f"{tag}.yaml", PORT=port, UPORT=upstream_port)
        if kind == "courier":
            cmd = [os.path.join(BIN, "courier"), "-c", cfg, "--concurrency", str(concurrency),
                   "--log-level", "warn"]
        else:
            cmd = [ENVOY, "-c", cfg, "--concurrency", "1", "--disable-hot-restart",
                   "--log-level", "warn"]
    elif kind == "bare-hyper":
        if mode != "proxy":
            return Proxy(label, reason="forwards only (no direct answers)")
        cmd = [os.path.join(BIN, "bench-bare-proxy"), f"127.0.0.1:{port}",
               f"127.0.0.1:{upstream_port}", str(BUDGET + 120)]
    elif kind == "nginx":
        h2port = free_port()
        cfg = fill(f"nginx-{mode}.conf", f"{tag}.conf", PORT=port, H2PORT=h2port,
                   UPORT=upstream_port, RUN=RUN)
        cmd = ["nginx", "-e", "stderr", "-p", RUN, "-c", cfg]
    else:
        cfg = fill(f"haproxy-{mode}.cfg", f"{tag}.cfg", PORT=port, UPORT=upstream_port)
        cmd = ["haproxy", "-f", cfg, "-db"]
    proc = spawn(["taskset", "-c", "0"] + cmd, tag)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            with open(os.path.join(RUN, f"{tag}.out")) as f:
                lines = [l.strip() for l in f if l.strip()]
            errors = [l for l in lines if "error" in l.lower() or "alert" in l.lower()] or lines
            # The last error line says why (courier: "...: forwarding ... is not served yet").
            why = errors[-1].rsplit(": ", 1)[-1] if errors else ""
            what = "not serving yet" if kind == "courier" else "did not start"
            return Proxy(label, reason=f"{what} (exit code {proc.returncode}: {why[:120]})")
        if probe(port, headers=headers):
            return Proxy(label, proc, f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{h2port}/")
        time.sleep(0.2)
    stop(proc)
    return Proxy(label, reason="not serving yet (no 200 with the upstream's body within 15 s)")


def run_load(cmd, name, pid):
    """Runs a load command on CPU 1; returns (output, CPU seconds of pid's tree)."""
    before = cpu_seconds(pid) if pid else 0.0
    try:
        r = subprocess.run(["taskset", "-c", "1"] + cmd, capture_output=True, text=True,
                           timeout=DURATION + 30)
        out = r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        out = "timed out"
    cpu = (cpu_seconds(pid) - before) if pid else 0.0
    with open(os.path.join(RUN, f"{name}.txt"), "w") as f:
        f.write(" ".join(cmd) + "\n\n" + out)
    return out, cpu


def us(value, unit):
    return float(value) * {"us": 1, "ms": 1e3, "s": 1e6}[unit]


def parse_wrk(out):
    m = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s)", out)
    if not m:
        return None
    total, secs = int(m.group(1)), us(m.group(2), m.group(3)) / 1e6
    errors = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", out))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    bad = int(non2xx.group(1)) if non2xx else 0
    pct = dict((p, us(v, u)) for p, v, u in re.findall(r"\s(50|99)\.000%\s+([\d.]+)(us|ms|s)", out))
    if not pct:
        pct = dict((p, us(v, u)) for p, v, u in re.findall(r"\s(50|99)%\s+([\d.]+)(us|ms|s)", out))
    return {"ok": total - bad, "rps": (total - bad) / secs, "errors": errors + bad,
            "p50": pct.get("50"), "p99": pct.get("99")}


def parse_h2load(out):
    fin = re.search(r"finished in ([\d.]+)(us|ms|s),", out)
    req = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout", out)
    codes = re.search(r"status codes: (\d+) 2xx", out)
    if not fin or not req or not codes:
        return None
    secs = us(fin.group(1), fin.group(2)) / 1e6
    ok = int(codes.group(1))
    # "failed" counts non-2xx/3xx answers and broken streams alike.
    return {"ok": ok, "rps": ok / secs if secs else 0.0, "errors": int(req.group(4))}


def latency_from_log(path):
    """p50/p99 (µs) of the 2xx rows of an h2load --log-file, and the row counts."""
    lat, bad = [], 0
    try:
        with open(path) as f:
            for line in f:
                cols = line.split("\t")
                if len(cols) >= 3 and cols[1].startswith("2"):
                    lat.append(int(cols[2]))
                else:
                    bad += 1
    except OSError:
        return None
    if not lat:
        return None
    lat.sort()
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return {"p50": pick(0.50), "p99": pick(0.99), "n": len(lat), "bad": bad}


def measure(p, tag):
    """All scenarios against one serving proxy (or the bare upstream when p.proc is None)."""
    pid = p.proc.pid if p.proc else None
    res = {}
    d = str(DURATION)
    # Warm-up: connections, pools and caches, not measured.
    run_load(["wrk", "-t1", "-c50", "-d1s", p.h1], f"{tag}-warmup", None)
    out, cpu = run_load(["wrk", "-t1", "-c50", f"-d{d}s", "--latency", p.h1], f"{tag}-h1", pid)
    res["h1"] = (parse_wrk(out), cpu)
    log_path = os.path.join(RUN, f"{tag}-h1-rate.log")
    out, cpu = run_load(["h2load", "--h1", "-c10", "-t1", f"--rps={RATE // 10}", "-D", d,
                         f"--log-file={log_path}", p.h1], f"{tag}-h1-rate", pid)
    res["h1-rate"] = (latency_from_log(log_path), cpu)
    if p.h2:
        out, cpu = run_load(["h2load", "-c10", "-m10", "-t1", "-D", d, p.h2], f"{tag}-h2c", pid)
        res["h2c"] = (parse_h2load(out), cpu)
        log_path = os.path.join(RUN, f"{tag}-h2c-rate.log")
        out, cpu = run_load(["h2load", "-c10", "-m1", "-t1", f"--rps={RATE // 10}", "-D", d,
                             f"--log-file={log_path}", p.h2], f"{tag}-h2c-rate", pid)
        res["h2c-rate"] = (latency_from_log(log_path), cpu)
    out, cpu = run_load(["wrk", "-t1", "-c20", f"-d{d}s", "--latency", "-H", "Connection: close",
                         p.h1], f"{tag}-close", pid)
    res["close"] = (parse_wrk(out), cpu)
    return res


def fmt_us(v):
    if v is None:
        return "–"
    return f"{v / 1000:.2f} ms" if v >= 1000 else f"{v:.0f} µs"


def per_cpu(r, cpu):
    return f"{r['ok'] / cpu:,.0f}" if r and cpu > 0 else "–"


def tables(title, rows):
    """Markdown tables, one per scenario, a row per proxy: rows = [(label, res|reason)]."""
    lines = [f"### {title}", ""]
    lines += ["#### HTTP/1.1 keep-alive", "",
              f"| proxy | req/s (wrk -c50) | req per proxy CPU-s | errors | p50 @ {RATE}/s | p99 @ {RATE}/s | proxy CPU @ {RATE}/s |",
              "|---|---|---|---|---|---|---|"]
    for label, res in rows:
        if isinstance(res, str):
            lines.append(f"| {label} | {res} | | | | | |")
            continue
        r, cpu = res["h1"]
        lat, rcpu = res["h1-rate"]
        lines.append(f"| {label} | {r['rps']:,.0f} | {per_cpu(r, cpu)} | {r['errors']} | "
                     f"{fmt_us(lat and lat['p50'])} | {fmt_us(lat and lat['p99'])} | "
                     f"{100 * rcpu / DURATION:.0f}% |" if r else f"| {label} | failed | | | | | |")
    lines += ["", "#### h2c (prior knowledge)", "",
              f"| proxy | req/s (h2load -c10 -m10) | req per proxy CPU-s | errors | p50 @ {RATE}/s | p99 @ {RATE}/s | proxy CPU @ {RATE}/s |",
              "|---|---|---|---|---|---|---|"]
    for label, res in rows:
        if isinstance(res, str):
            lines.append(f"| {label} | {res} | | | | | |")
            continue
        if "h2c" not in res:
            lines.append(f"| {label} | (HTTP/1.1 only) | | | | | |")
            continue
        r, cpu = res["h2c"]
        lat, rcpu = res["h2c-rate"]
        lines.append(f"| {label} | {r['rps']:,.0f} | {per_cpu(r, cpu)} | {r['errors']} | "
                     f"{fmt_us(lat and lat['p50'])} | {fmt_us(lat and lat['p99'])} | "
                     f"{100 * rcpu / DURATION:.0f}% |" if r else f"| {label} | failed | | | | | |")
    lines += ["", "#### New connection per request (HTTP/1.1, `Connection: close`)", "",
              "| proxy | req/s (wrk -c20) | req per proxy CPU-s | errors | p50 (wrk, 20 conns) | p99 (wrk, 20 conns) |",
              "|---|---|---|---|---|---|"]
    for label, res in rows:
        if isinstance(res, str):
            lines.append(f"| {label} | {res} | | | | |")
            continue
        r, cpu = res["close"]
        lines.append(f"| {label} | {r['rps']:,.0f} | {per_cpu(r, cpu)} | {r['errors']} | "
                     f"{fmt_us(r['p50'])} | {fmt_us(r['p99'])} |" if r else f"| {label} | failed | | | | |")
    return "\n".join(lines) + "\n"


def memory(kind, mode, upstream_port, proto="h1"):
    """Idle RSS and RSS growth per idle keep-alive connection over CONNS connections
    (HTTP/1.1, or h2c prior knowledge with `proto="h2c"`)."""
    p = start_proxy(kind, mode, upstream_port)
    if not p.proc:
        return (p.label, p.reason)
    try:
        time.sleep(1)
        idle = rss_kb(p.proc.pid)
        port = int((p.h1 if proto == "h1" else p.h2).rsplit(":", 1)[1].strip("/"))
        client = spawn(["taskset", "-c", "1", os.path.join(BIN, "bench-idle-conns"),
                        f"127.0.0.1:{port}", str(CONNS), "30"] + ([proto] if proto != "h1" else []),
                       f"{kind}-idle-conns")
        opened, deadline = None, time.monotonic() + 90
        path = os.path.join(RUN, f"{kind}-idle-conns.out")
        while time.monotonic() < deadline and client.poll() is None:
            with open(path) as f:
                m = re.search(r"open (\d+) failed (\d+)", f.read())
            if m:
                opened = int(m.group(1))
                break
            time.sleep(0.2)
        if not opened:
            stop(client)
            return (p.label, "idle connections could not be opened")
        time.sleep(1)
        loaded = rss_kb(p.proc.pid)
        # Idle for a while: what an idle connection costs once the proxy has
        # settled (courier parks HTTP/1.1 connections after 1 s of quiet).
        time.sleep(max(SETTLE - 1, 0))
        settled = rss_kb(p.proc.pid)
        still = probe(port)
        stop(client)
        return (p.label, {"idle": idle, "loaded": loaded, "settled": settled, "opened": opened,
                          "alive": still})
    finally:
        stop(p.proc)


def memory_table(rows, mode, proto="HTTP/1.1"):
    lines = [f"### Memory ({mode} config): RSS of the proxy process tree", "",
             f"| proxy | idle RSS | RSS with {CONNS:,} idle {proto} connections | growth per connection "
             f"(after 1 s) | RSS after {SETTLE:g} s | growth per connection (after {SETTLE:g} s) |",
             "|---|---|---|---|---|---|"]
    for label, r in rows:
        if isinstance(r, str):
            lines.append(f"| {label} | {r} | | |")
            continue
        per = (r["loaded"] - r["idle"]) * 1024 / r["opened"]
        settled = (r["settled"] - r["idle"]) * 1024 / r["opened"]
        note = "" if r["opened"] == CONNS else f" ({r['opened']} opened)"
        lines.append(f"| {label} | {r['idle'] / 1024:.1f} MiB | {r['loaded'] / 1024:.1f} MiB{note} | "
                     f"{per / 1024:.1f} KiB | {r['settled'] / 1024:.1f} MiB | {settled / 1024:.1f} KiB |")
    return "\n".join(lines) + "\n"


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, max(hard, want)))
    except (ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    log(f"raw outputs in {RUN}; DURATION={DURATION}s RATE={RATE}/s CONNS={CONNS}")
    load_start = open("/proc/loadavg").read().strip()
    port_file = os.path.join(RUN, "upstream.port")
    upstream = spawn(["taskset", "-c", "1", os.path.join(BIN, "bench-upstream"), "127.0.0.1:0",
                      port_file, str(BUDGET + 120)], "upstream")
    deadline = time.monotonic() + 10
    while not os.path.exists(port_file) and time.monotonic() < deadline:
        time.sleep(0.05)
    uport = int(open(port_file).read())
    if not probe(uport, attempts=20):
        sys.exit("the upstream does not answer")
    report = [f"Load harness run: DURATION={DURATION}s per run, fixed rate {RATE} req/s "
              f"(h2load --rps, 10 connections), proxies pinned to CPU 0, load generator and "
              f"upstream on CPU 1. Raw outputs: {RUN}", ""]

    def scenario_rows(mode, kinds):
        rows = []
        if mode == "proxy":
            log("bare upstream (no proxy)")
            rows.append(("(no proxy: upstream alone, on CPU 1)",
                         measure(Proxy("upstream", None, f"http://127.0.0.1:{uport}/", None), "upstream")))
        courier_serves = False
        for kind, conc in kinds:
            if out_of_time():
                rows.append((kind, "skipped: harness time budget spent"))
                continue
            log(f"{mode}: {kind} concurrency {conc}")
            p = start_proxy(kind, mode, uport, conc)
            if not p.proc:
                log(f"  {p.reason}")
                rows.append((p.label, p.reason))
                continue
            if kind == "courier":
                courier_serves = True
            try:
                rows.append((p.label, measure(p, f"{kind}{conc}-{mode}")))
            finally:
                stop(p.proc)
        return rows, courier_serves

    if os.environ.get("ONLY") == "memory":
        # Idle RSS and per-connection growth, HTTP/1.1 and h2c.
        for proto, name in (("h1", "HTTP/1.1"), ("h2c", "h2c")):
            mem = []
            for kind in [k for k in ("courier", "envoy", "nginx", "haproxy") if k in PROXIES]:
                if out_of_time():
                    mem.append((kind, "skipped: harness time budget spent"))
                    continue
                log(f"memory {name}: {kind}")
                mem.append(memory(kind, "proxy", uport, proto))
            section = memory_table(mem, "proxy", name)
            print(section, flush=True)
            report.append(section)
        with open(os.path.join(RUN, "report.md"), "w") as f:
            f.write("\n".join(report))
        stop(upstream)
        return
    scenarios = {"authz": authz, "resilience": resilience, "edge": edge, "slowloris": slowloris}
    if os.environ.get("ONLY") in scenarios:
        scenario = scenarios[os.environ["ONLY"]]
        section = scenario.run(sys.modules[__name__], uport)
        print(section, flush=True)
        report.append(section)
        loads = f"Load average (1, 5, 15 min …) at start: {load_start}; at end: {open('/proc/loadavg').read().strip()}"
        print(loads, flush=True)
        report.append(loads)
        with open(os.path.join(RUN, "report.md"), "w") as f:
            f.write("\n".join(report))
        stop(upstream)
        return
    kinds = [(k, c) for k, c in [("courier", 1), ("courier", 2), ("envoy", 1), ("nginx", 1),
                                  ("haproxy", 1), ("bare-hyper", 1)] if k in PROXIES]
    rows, courier_serves = scenario_rows("proxy", kinds)
    section = tables("Proxying to the upstream", rows)
    print(section, flush=True)
    report.append(section)
    if not courier_serves:
        rows, _ = scenario_rows("direct", kinds)
        section = tables("Extra scenario — direct responses, no upstream (courier does not forward yet): "
                         "courier/Envoy direct_response, nginx `return 200`, HAProxy `http-request return`",
                         rows)
        print(section, flush=True)
        report.append(section)
    mode = "proxy" if courier_serves else "direct"
    mem = []
    for kind in [k for k in ("courier", "envoy", "nginx", "haproxy") if k in PROXIES]:
        if out_of_time():
            mem.append((kind, "skipped: harness time budget spent"))
            continue
        log(f"memory: {kind}")
        mem.append(memory(kind, mode, uport))
    section = memory_table(mem, mode)
    print(section, flush=True)
    report.append(section)
    # Last, so the memory runs keep their place in the time budget.
    if courier_serves and not out_of_time():
        section = authz.run(sys.modules[__name__], uport)
        print(section, flush=True)
        report.append(section)
    loads = f"Load average (1, 5, 15 min …) at start: {load_start}; at end: {open('/proc/loadavg').read().strip()}"
    print(loads, flush=True)
    report.append(loads)
    with open(os.path.join(RUN, "report.md"), "w") as f:
        f.write("\n".join(report))
    log(f"done in {time.monotonic() - START:.0f}s; report in {RUN}/report.md")
    stop(upstream)


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    try:
        main()
    finally:
        stop_all()
