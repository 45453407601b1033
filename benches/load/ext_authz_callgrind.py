#!/usr/bin/env python3
"""Where ext_authz's added CPU goes, in instructions (stable on a loaded machine):
one courier (one worker) under callgrind with the `plain` and `authz` listeners of
ext_authz.py; after a warm-up, N requests through each (h2load --h1 -c1), one
callgrind dump per listener, and instructions per request printed for both.

Usage (after `CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release -p courier -p courier-benches --bins`):
  python3 benches/load/ext_authz_callgrind.py [TARGET_DIR]   # env: REQUESTS (2000)
then `callgrind_annotate --inclusive=yes RUN/callgrind.out.<pid>.<n>` on each dump.
"""
import glob, os, subprocess, sys, tempfile, time, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
TARGET = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CARGO_TARGET_DIR", "target")
BIN = os.path.join(TARGET, "release")
N = int(os.environ.get("REQUESTS", "2000"))
RUN = tempfile.mkdtemp(prefix="courier-extauthz-cg.")


def wait_file(path):
    for _ in range(1200):
        if os.path.exists(path) and open(path).read().strip():
            return open(path).read().strip()
        time.sleep(0.05)
    raise SystemExit(f"no {path}")


def server(name):
    port_file = os.path.join(RUN, f"{name}.port")
    p = subprocess.Popen([os.path.join(BIN, name), "127.0.0.1:0", port_file, "600"])
    return p, int(wait_file(port_file))


def h2load(args):
    return subprocess.run(["h2load", "--h1", "-t1"] + args, capture_output=True, text=True, timeout=600).stdout


def total(path):
    for line in open(path):
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals in {path}")


def main():
    import ext_authz as base  # the same listeners and clusters
    up, up_port = server("bench-upstream")
    authz, authz_port = server("bench-authz-allow")
    config = os.path.join(RUN, "courier.yaml")
    with open(config, "w") as f:
        f.write("admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}\n"
                "static_resources:\n  listeners:" + base.listener("plain", "") + base.listener("authz", base.AUTHZ)
                + "  clusters:" + base.cluster("up", up_port, False) + base.cluster("authz", authz_port, True))
    admin_file = os.path.join(RUN, "admin")
    courier = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                                f"--callgrind-out-file={RUN}/callgrind.out.%p",
                                os.path.join(BIN, "courier"), "--concurrency", "1",
                                "-c", config, "--admin-address-path", admin_file],
                               stdout=subprocess.DEVNULL, stderr=open(os.path.join(RUN, "courier.log"), "w"))
    try:
        admin = wait_file(admin_file)
        addrs = dict(l.split("::", 1) for l in
                     urllib.request.urlopen(f"http://{admin}/listeners", timeout=60).read().decode().split())
        for name in ["plain", "authz"]:
            h2load(["-c1", "-n", "200", f"http://{addrs[name]}/"])  # warm-up: connections open
        ctl = lambda *a: subprocess.run(["callgrind_control", *a, str(courier.pid)], capture_output=True, timeout=120)
        ctl("-i", "on")
        results = {}
        for name in ["plain", "authz"]:
            ctl("-z")
            out = h2load(["-c1", "-n", str(N), f"http://{addrs[name]}/"])
            ok = next((l for l in out.splitlines() if l.startswith("status codes")), "")
            before = set(glob.glob(f"{RUN}/callgrind.out.*"))
            ctl("-d", name)
            for _ in range(600):
                new = set(glob.glob(f"{RUN}/callgrind.out.*")) - before
                if new:
                    break
                time.sleep(0.1)
            time.sleep(1)
            dump = sorted(new)[0]
            results[name] = total(dump)
            print(f"{name}: {results[name] / N:,.0f} instructions/request ({ok.strip()}) dump {dump}")
        print(f"ratio authz/plain: {results['authz'] / results['plain']:.2f}")
    finally:
        for p in (courier, up, authz):
            p.kill()


main()
