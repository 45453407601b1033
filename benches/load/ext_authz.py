#!/usr/bin/env python3
"""ext_authz's cost per request: one courier (one worker, CPU 0) with two listeners in
front of bench-upstream, `plain` (router only) and `authz` (ext_authz over gRPC to
bench-authz-allow through a courier HTTP/2 cluster, then the router). The load
(h2load on CPU 1) runs the same fixed request count on each; courier's CPU time
(utime + stime from /proc) per request is compared, then p50/p99 at a fixed rate.

Usage (after `cargo build --release -p courier -p courier-benches --bins`):
  python3 benches/load/ext_authz.py [TARGET_DIR]   # env: REQUESTS (50000), RATE (1000),
                                                    # PERF=1 (perf record the authz run)
Every process is bounded (servers exit after 300 s, loads have timeouts).
"""
import os, subprocess, sys, tempfile, time, urllib.request

TARGET = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CARGO_TARGET_DIR", "target")
BIN = os.path.join(TARGET, "release")
N = int(os.environ.get("REQUESTS", "50000"))
RATE = int(os.environ.get("RATE", "1000"))
TICKS = os.sysconf("SC_CLK_TCK")
RUN = ""  # made by main(): importing this module (ext_authz_callgrind.py) makes no directory


def cpu(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def wait_file(path):
    for _ in range(300):
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    raise SystemExit(f"no {path}")


def server(name):
    port_file = os.path.join(RUN, f"{name}.port")
    p = subprocess.Popen(["taskset", "-c", "1", os.path.join(BIN, name), "127.0.0.1:0", port_file, "300"])
    return p, int(wait_file(port_file))


def listener(name, filters):
    return f"""
  - name: {name}
    address: {{socket_address: {{address: 127.0.0.1, port_value: 0}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          route_config:
            virtual_hosts:
            - {{name: all, domains: ["*"], routes: [{{match: {{prefix: "/"}}, route: {{cluster: up}}}}]}}
          http_filters:{filters}
          - name: envoy.filters.http.router
            typed_config: {{"@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router}}
"""


def cluster(name, port, h2):
    proto = """
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config: {http2_protocol_options: {}}""" if h2 else ""
    return f"""
  - name: {name}
    connect_timeout: 1s{proto}
    load_assignment:
      cluster_name: {name}
      endpoints: [{{lb_endpoints: [{{endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {port}}}}}}}}}]}}]
"""


AUTHZ = """
          - name: envoy.filters.http.ext_authz
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz
              grpc_service: {envoy_grpc: {cluster_name: authz}, timeout: 1s}"""


def h2load(args, log=None):
    cmd = ["taskset", "-c", "1", "h2load", "--h1", "-t1"] + args
    if log:
        cmd.append(f"--log-file={log}")
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout


def percentiles(log):
    lat = sorted(int(l.split("\t")[2]) for l in open(log) if l.split("\t")[1].startswith("2"))
    pick = lambda q: lat[min(len(lat) - 1, int(q * len(lat)))]
    return pick(0.5), pick(0.99), len(lat)


def main():
    global RUN
    RUN = tempfile.mkdtemp(prefix="courier-extauthz.")
    up, up_port = server("bench-upstream")
    authz, authz_port = server("bench-authz-allow")
    config = os.path.join(RUN, "courier.yaml")
    with open(config, "w") as f:
        f.write("admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}\n"
                "static_resources:\n  listeners:" + listener("plain", "") + listener("authz", AUTHZ)
                + "  clusters:" + cluster("up", up_port, False) + cluster("authz", authz_port, True))
    admin_file = os.path.join(RUN, "admin")
    courier = subprocess.Popen(["taskset", "-c", "0", os.path.join(BIN, "courier"), "--concurrency", "1",
                                "-c", config, "--admin-address-path", admin_file],
                               stdout=subprocess.DEVNULL, stderr=open(os.path.join(RUN, "courier.log"), "w"))
    try:
        admin = wait_file(admin_file)
        addrs = dict(l.split("::", 1) for l in
                     urllib.request.urlopen(f"http://{admin}/listeners", timeout=5).read().decode().split())
        print(f"courier {BIN}/courier, {N} requests per run, h2load --h1 -c10, rate {RATE}/s; run dir {RUN}")
        print("| listener | req/s | courier CPU µs/request | requests per CPU-second | p50 µs | p99 µs |")
        print("|---|---|---|---|---|---|")
        for name in ["plain", "authz"]:
            url = f"http://{addrs[name]}/"
            h2load(["-c10", "-n", "2000", url])  # warm-up
            perf = None
            if os.environ.get("PERF") and name == "authz":
                # Where the added CPU goes: perf report -i RUN/authz.perf
                perf = subprocess.Popen(["perf", "record", "-F", "2000", "-g", "-o",
                                         os.path.join(RUN, "authz.perf"), "-p", str(courier.pid)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(0.5)
            before = cpu(courier.pid)
            out = h2load(["-c10", "-n", str(N), url])
            used = cpu(courier.pid) - before
            if perf:
                perf.send_signal(2)
                perf.wait(timeout=60)
            rps = next((l.split()[3] for l in out.splitlines() if l.startswith("finished in")), "?")
            ok = next((l for l in out.splitlines() if l.startswith("status codes")), "")
            log = os.path.join(RUN, f"{name}-rate.log")
            h2load(["-c10", f"--rps={RATE // 10}", "-n", str(RATE * 5), url], log)
            p50, p99, n = percentiles(log)
            print(f"| {name} | {rps} | {used / N * 1e6:.1f} | {N / used:,.0f} | {p50} | {p99} |  ({ok.strip()}; rate run {n} ok)")
    finally:
        for p in (courier, up, authz):
            p.kill()


if __name__ == "__main__":
    main()
