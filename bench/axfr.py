"""AXFR of a large zone as a secondary (issue 28): xdns against Knot DNS (and NSD) as
secondaries of the same Knot DNS primary, in the same run.

    /usr/bin/python3 bench/axfr.py [--records 1000000] [--runs 3] [--xdp] [--nsd]

Needs root, knotd (and nsd with --nsd). The zone (N `hN A` records, bench/ixfr.py's `plain`
shape) is generated once into bench/out/. Each run starts each secondary with no copy of the
zone, in turn (xdns, Knot, NSD, then again), and times from the process's start to the zone's
last record answered (**served**, polled every 10 ms over UDP); xdns also reports its log
line's phases (`fetched_ms`: the TCP stream received and parsed; `built_ms`: the zone built
and validated; `ms`: swapped in, kernel included) and with `--xdp` (`default` mode: generic
on the lab veth) the time until the kernel maps hold the zone (**kernel**). Peak RSS
(VmHWM) per secondary. `XDNS_BIN` picks the binary (a build of another commit, for
before/after). Results: bench/out/axfr-RECORDS[-LABEL].json, ratios to Knot's median.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
import bench as B  # noqa: E402
from ixfr import zone_file  # noqa: E402
from lab import XDNS_BIN, Lab  # noqa: E402

import dns.message  # noqa: E402
import dns.rcode  # noqa: E402

ORIGIN = "ixfr.test."


def peak_mb(pid: int) -> int | None:
    try:
        for ln in Path(f"/proc/{pid}/status").read_text().splitlines():
            if ln.startswith("VmHWM:"):
                return int(ln.split()[1]) // 1024
    except OSError:
        return None
    return None


def wait_record(lab: Lab, addr: str, name: str, proc, timeout: float) -> float:
    """Seconds until `name` A is answered (NOERROR with an answer) from `addr`."""
    q = dns.message.make_query(name, "A")
    q.flags = 0
    wire = q.to_wire()
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before answering")
        r = lab.udp(addr, wire, timeout=0.05)
        if r is not None:
            m = dns.message.from_wire(r)
            if m.rcode() == dns.rcode.NOERROR and m.answer:
                return time.monotonic() - t0
        time.sleep(0.01)
    raise TimeoutError(f"{name} not answered within {timeout}s")


def knot_secondary(lab: Lab, name: str, primary: str):
    a4, a6 = lab.new_address()
    wd = lab.dir / name
    (wd / "db").mkdir(parents=True)
    conf = wd / "knot.conf"
    conf.write_text(f"""server:
    rundir: "{wd}"
    listen: [ {a4}@53, {a6}@53 ]
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
remote:
  - id: primary
    address: {primary}@53
control:
    listen: "{wd}/knot.sock"
database:
    storage: "{wd}/db"
log:
  - target: stderr
    any: info
template:
  - id: default
    storage: "{wd}"
    zonefile-sync: -1
    journal-content: none
zone:
  - domain: "{ORIGIN}"
    master: primary
""")
    return lab.server(["knotd", "-c", conf], name=name), a4


def nsd_secondary(lab: Lab, name: str, primary: str):
    a4, a6 = lab.new_address()
    wd = lab.dir / name
    wd.mkdir()
    conf = wd / "nsd.conf"
    conf.write_text(f"""server:
    ip-address: {a4}
    ip-address: {a6}
    port: 53
    username: ""
    chroot: ""
    database: ""
    zonesdir: "{wd}"
    zonelistfile: "{wd}/zone.list"
    xfrdfile: "{wd}/xfrd.state"
    xfrdir: "{wd}"
    pidfile: "{wd}/nsd.pid"
    server-count: 1
    verbosity: 1
    rrl-ratelimit: 0
remote-control:
    control-enable: no
zone:
    name: "{ORIGIN}"
    zonefile: "{wd}/{ORIGIN}zone"
    request-xfr: {primary} NOKEY
""")
    return lab.server(["nsd", "-c", conf, "-d"], name=name, cwd=wd), a4


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except Exception:
        proc.kill()
        proc.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--xdp", action="store_true", help="xdns with XDP (default mode); also time the kernel maps")
    ap.add_argument("--nsd", action="store_true", help="NSD as a third secondary")
    ap.add_argument("--knot", action=argparse.BooleanOptionalAction, default=True, help="Knot as a secondary")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a secondary has to serve the zone")
    ap.add_argument("--label", default="", help="added to the result file's name (before/after)")
    ap.add_argument("--perf", default="", help="record `perf record -g` of the first xdns run into this file")
    args = ap.parse_args()
    zone = zone_file(args.records, "plain")
    last = f"h{args.records - 4}.{ORIGIN}"
    timeout = 600
    res: dict[str, list] = {"xdns": [], "knot": [], "nsd": []}
    with Lab(prefix="axb") as lab:
        knot = lab.start_knot_primary([(ORIGIN, zone)], name="knot-primary")
        try:
            for run in range(args.runs):
                # xdns
                name = f"xdns-{run}"
                extra = f'\n[[zone]]\nname = "{ORIGIN}"\nprimaries = ["{knot.addr4}@53"]\n'
                t0 = time.monotonic()
                srv = lab.start_xdns([], name=name, extra=extra, xdp="default" if args.xdp else None,
                                     wait=False, timeout=timeout)
                perf = None
                if args.perf and run == 0:
                    import subprocess
                    perf = subprocess.Popen(["perf", "record", "-g", "-F", "999", "-o", args.perf, "-p", str(srv.proc.pid)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    wait_record(lab, srv.addr4, last, srv.proc, args.timeout)
                except (TimeoutError, RuntimeError):
                    print(srv.stderr()[-3000:])
                    print(knot.stderr()[-3000:])
                    raise
                served = time.monotonic() - t0
                kernel = None
                if args.xdp:
                    lab.wait_xdp_data(srv, timeout=timeout)
                    kernel = time.monotonic() - t0
                # the log line comes right after the swap
                line = ""
                for _ in range(200):
                    ls = [ln for ln in srv.stderr().splitlines() if "transferred and serving" in ln]
                    if ls:
                        line = ls[-1]
                        break
                    time.sleep(0.05)
                if perf is not None:
                    perf.send_signal(2)
                    perf.wait(timeout=60)
                phases = {k: int(v) for k, v in re.findall(r"\b(fetched_ms|applied_ms|built_ms|ms)=(-?\d+)", line)}
                r = {"served_s": round(served, 3), "kernel_s": kernel and round(kernel, 3), "phases_ms": phases,
                     "peak_rss_mb": peak_mb(srv.proc.pid)}
                print(f"run {run} xdns: {json.dumps(r)}", flush=True)
                res["xdns"].append(r)
                lab.stop(srv, timeout=60)
                # Knot DNS
                if args.knot:
                    t0 = time.monotonic()
                    proc, addr = knot_secondary(lab, f"knot-sec-{run}", knot.addr4)
                    wait_record(lab, addr, last, proc, timeout)
                    r = {"served_s": round(time.monotonic() - t0, 3), "peak_rss_mb": peak_mb(proc.pid)}
                    log = (lab.dir / f"knot-sec-{run}.stderr")
                    if log.exists():
                        m = re.findall(r"AXFR, incoming.*finished, ([0-9.]+) seconds", log.read_text())
                        if m:
                            r["knot_axfr_s"] = float(m[-1])
                    print(f"run {run} knot: {json.dumps(r)}", flush=True)
                    res["knot"].append(r)
                    stop(proc)
                if args.nsd:
                    t0 = time.monotonic()
                    proc, addr = nsd_secondary(lab, f"nsd-sec-{run}", knot.addr4)
                    wait_record(lab, addr, last, proc, timeout)
                    r = {"served_s": round(time.monotonic() - t0, 3), "peak_rss_mb": peak_mb(proc.pid)}
                    print(f"run {run} nsd: {json.dumps(r)}", flush=True)
                    res["nsd"].append(r)
                    stop(proc)
        finally:
            lab.stop(knot)
    med = {k: statistics.median(r["served_s"] for r in v) for k, v in res.items() if v}
    summary = {k: {"median_served_s": m, "ratio_to_knot": round(m / med["knot"], 2) if "knot" in med else None}
               for k, m in med.items()}
    print("summary:", json.dumps(summary))
    B.OUT.mkdir(exist_ok=True)
    out = B.OUT / f"axfr-{args.records}{'-' + args.label if args.label else ''}.json"
    out.write_text(json.dumps({"records": args.records, "xdns_bin": str(XDNS_BIN), "xdp": args.xdp,
                               "runs": res, "summary": summary}, indent=1))
    print("written", out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
