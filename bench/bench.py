"""xdns benchmark: replies/s against Knot DNS and NSD, zone load time and memory.

    make bench          # full run (about 2 minutes plus the 1M-record load tests)
    make bench-smoke    # a few seconds per peer, tiny zone; checks the harness only

Throughput: each peer serves tests/zones/example.com.zone in the lab's server namespace,
pinned to one CPU (SERVER_CPU); kxdpgun (itself an AF_XDP program on the client veth) runs in
the client namespace pinned to the other CPU and sends the same query mix to each peer.
replies/s is what kxdpgun counted back. The peer list is data (PEERS): an XDP variant is one
more entry with a start function, e.g. ("xdns-xdp", lambda lab: lab.start_xdns(extra=XDP)).

Load: a generated zone (bench/genzone.py, 1,000,000 records; 20,000 in smoke mode) is loaded by
`xdns check` and `nsd-checkzone` under /usr/bin/time -v (wall time, peak RSS), and by xdns serve
and knotd from start until the zone answers (peak RSS from /proc/PID/status VmHWM).

Results: a table on stdout, bench/out/results.json and the chart bench/out/bench.png.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "lab"))
from lab import DEFAULT_ZONES, XDNS_BIN, ZONES_DIR, Lab  # noqa: E402

OUT = HERE / "out"
SERVER_CPU = 1
CLIENT_CPU = 0

# name -> how to start it in a lab. Order is the table's row order; the first row is the
# reference for ratios. XDP variants get appended here (see module docstring).
PEERS: list[tuple[str, callable]] = [
    ("xdns", lambda lab: lab.start_xdns(DEFAULT_ZONES)),
    ("knot", lambda lab: lab.start_knot(DEFAULT_ZONES)),
    ("nsd", lambda lab: lab.start_nsd(DEFAULT_ZONES)),
]
REFERENCE = "xdns"


def query_mix(path: Path) -> int:
    """kxdpgun query file: 50% existing A/AAAA, 25% NXDOMAIN, 25% wildcard."""
    exist = ["www.example.com. A", "www.example.com. AAAA", "ns1.example.com. A",
             "ns1.example.com. AAAA", "ns2.example.com. A", "mail.example.com. A",
             "sip.example.com. A", "h1.hosts.example.com. A", "h1.hosts.example.com. AAAA",
             "api.svc.example.com. A"]
    lines = []
    for i in range(1000):
        r = i % 4
        if r in (0, 1):
            lines.append(exist[i % len(exist)])
        elif r == 2:
            lines.append(f"nx{i}.example.com. A")
        else:
            lines.append(f"host{i}.wild.example.com. A")
    path.write_text("\n".join(lines) + "\n")
    return len(lines)


def pin(pid: int, cpu: int) -> None:
    subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(pid)], capture_output=True, check=True)


def kxdpgun(lab: Lab, addr: str, qfile: Path, duration: float, qps: int) -> dict:
    cmd = ["taskset", "-c", str(CLIENT_CPU), "kxdpgun", "-t", str(duration), "-Q", str(qps),
           "-b", "10", "-i", qfile, addr]
    p = lab.client_run(cmd, check=False, timeout=duration + 30)
    out = p.stdout + p.stderr
    q = re.search(r"total queries:\s+(\d+) \((\d+) pps\)", out)
    r = re.search(r"total replies:\s+(\d+) \((\d+) pps\)", out)
    if p.returncode != 0 or not q or not r:
        raise RuntimeError(f"kxdpgun failed ({p.returncode}):\n{out}")
    return {"queries": int(q.group(1)), "qps_sent": int(q.group(2)),
            "replies": int(r.group(1)), "replies_per_s": int(r.group(2)),
            "mode": "native" if "native mode" in out else "generic" if "generic" in out else "?"}


def throughput(duration: float, qps: int, rounds: int) -> dict:
    results = {}
    with Lab(prefix="xdl") as lab:
        qfile = lab.dir / "queries.txt"
        query_mix(qfile)
        for name, start in PEERS:
            srv = start(lab)
            try:
                pin(srv.proc.pid, SERVER_CPU)
                runs = [kxdpgun(lab, srv.addr4, qfile, duration, qps) for _ in range(rounds)]
                best = sorted(runs, key=lambda r: r["replies_per_s"])[len(runs) // 2]  # median
                best["runs"] = [r["replies_per_s"] for r in runs]
                results[name] = best
                print(f"  {name:10} {best['replies_per_s']:>10} replies/s "
                      f"(sent {best['qps_sent']}/s, runs {best['runs']}, {best['mode']} XDP)",
                      flush=True)
            finally:
                lab.stop(srv) if srv.alive() else None
    return results


def time_v(cmd, cwd=None) -> dict:
    p = subprocess.run(["/usr/bin/time", "-v", *map(str, cmd)], capture_output=True, text=True,
                       cwd=cwd)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", p.stderr)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    h, m, s = (int(wall.group(1) or 0), int(wall.group(2)), float(wall.group(3)))
    return {"seconds": h * 3600 + m * 60 + s, "peak_mib": int(rss.group(1)) / 1024}


def serve_until_loaded(lab: Lab, start) -> dict:
    t0 = time.monotonic()
    srv = start(lab)  # returns once the zone answers SOA
    secs = time.monotonic() - t0
    hwm = 0
    for line in Path(f"/proc/{srv.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    lab.stop(srv) if srv.alive() else None
    return {"seconds": secs, "peak_mib": hwm / 1024}


def load(records: int, peers: set) -> dict:
    OUT.mkdir(exist_ok=True)
    zone = OUT / f"big-{records}.zone"
    origin = "bench.test."
    if not zone.exists():
        subprocess.run([sys.executable, HERE / "genzone.py", "--records", str(records),
                        "-o", zone], check=True)
    zones = [(origin, zone)]
    res = {}
    with Lab(prefix="xdl") as lab:
        if "xdns" in peers:
            conf, _, _ = lab.write_xdns_config(zones, name="xdns-check")
            res["xdns check"] = time_v([XDNS_BIN, "check", "--config", conf])
        if "nsd" in peers:
            res["nsd-checkzone"] = time_v(["nsd-checkzone", origin, zone], cwd=zone.parent)
        if "xdns" in peers:
            res["xdns serve"] = serve_until_loaded(lab, lambda l: l.start_xdns(zones, name="xdns-load"))
        if "knot" in peers:
            res["knotd"] = serve_until_loaded(lab, lambda l: l.start_knot(zones, name="knot-load"))
    for k, v in res.items():
        print(f"  {k:14} {v['seconds']:8.2f} s {v['peak_mib']:8.1f} MiB", flush=True)
    return res


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def report(tp: dict, ld: dict, smoke: bool) -> None:
    print("\n== replies per second (same query mix, server on one CPU)")
    ref = tp.get(REFERENCE, {}).get("replies_per_s", 0)
    print(f"{'peer':12} {'replies/s':>12} {'reply %':>8} {REFERENCE + '/peer':>12}")
    for name, r in tp.items():
        pct = 100.0 * r["replies"] / r["queries"] if r["queries"] else 0
        print(f"{name:12} {r['replies_per_s']:>12} {pct:>7.1f}% {ratio(ref, r['replies_per_s']):>12}")
    print("\n== zone load (generated zone), lower is better")
    pairs = [("xdns check", "nsd-checkzone"), ("xdns serve", "knotd")]
    print(f"{'':28} {'seconds':>10} {'peak MiB':>10}")
    for name, v in ld.items():
        print(f"{name:28} {v['seconds']:>10.2f} {v['peak_mib']:>10.1f}")
    for a, b in pairs:
        if a not in ld or b not in ld:
            continue
        print(f"{a + ' vs ' + b:28} {ratio(ld[a]['seconds'], ld[b]['seconds']):>10} "
              f"{ratio(ld[a]['peak_mib'], ld[b]['peak_mib']):>10}")
    if smoke:
        print("\n(smoke mode: a few seconds per peer and a small zone; numbers are not meaningful)")


def chart(tp: dict, ld: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    names = list(tp)
    vals = [tp[n]["replies_per_s"] for n in names]
    colors = ["tab:orange" if n.startswith("xdns") else "tab:gray" for n in names]
    ax1.bar(names, vals, color=colors)
    ax1.set_title("UDP replies/s (kxdpgun, server on 1 CPU)")
    ax1.set_ylabel("replies/s")
    for i, v in enumerate(vals):
        ax1.text(i, v, f"{v:,}", ha="center", va="bottom", fontsize=8)
    lnames = list(ld)
    ax2.bar(lnames, [ld[n]["seconds"] for n in lnames], color="tab:blue")
    ax2.set_title("zone load time (s)")
    ax2b = ax2.twinx()
    ax2b.plot(lnames, [ld[n]["peak_mib"] for n in lnames], "o", color="tab:red")
    ax2b.set_ylabel("peak MiB (red)")
    ax2.tick_params(axis="x", labelrotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description="xdns benchmark")
    ap.add_argument("--smoke", action="store_true", help="a few seconds per peer, small zone")
    ap.add_argument("--duration", type=float, help="seconds per kxdpgun run")
    ap.add_argument("--qps", type=int, help="kxdpgun send rate")
    ap.add_argument("--rounds", type=int, help="kxdpgun runs per peer (median kept)")
    ap.add_argument("--records", type=int, help="records in the load-test zone")
    ap.add_argument("--peers", help="comma-separated subset of: " + ",".join(n for n, _ in PEERS))
    a = ap.parse_args()
    duration = a.duration or (2 if a.smoke else 10)
    qps = a.qps or (20_000 if a.smoke else 1_000_000)
    rounds = a.rounds or (1 if a.smoke else 3)
    records = a.records or (20_000 if a.smoke else 1_000_000)
    if a.peers:
        keep = a.peers.split(",")
        PEERS[:] = [p for p in PEERS if p[0] in keep]
    if os.cpu_count() < 2:
        print("bench: needs 2 CPUs (generator and server pinned apart)", file=sys.stderr)
        return 1
    OUT.mkdir(exist_ok=True)
    print(f"== throughput: {duration}s x {rounds} per peer at {qps} q/s offered")
    tp = throughput(duration, qps, rounds)
    print(f"== load: {records} records")
    ld = load(records, {n for n, _ in PEERS})
    report(tp, ld, a.smoke)
    (OUT / "results.json").write_text(json.dumps(
        {"smoke": a.smoke, "duration": duration, "qps_offered": qps, "records": records,
         "throughput": tp, "load": ld}, indent=2))
    chart(tp, ld, OUT / "bench.png")
    print(f"\nwrote {OUT / 'results.json'} and {OUT / 'bench.png'}")
    # Sanity: in smoke mode the offered rate is low, so every peer must answer most of it;
    # the full run overloads the servers on purpose and only needs answers at all.
    floor = 0.5 if a.smoke else 0.01
    bad = [n for n, r in tp.items() if r["replies"] < floor * r["queries"]]
    if bad:
        print(f"bench: peers answering under {floor:.0%} of queries: {bad}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    sys.exit(main())
