"""Userspace replies/s with every answer timed vs rules off (issue 27, transmit timestamps
from the error queue), in one run:

    /usr/bin/python3 bench/tel_errq.py XDNS [--ref OTHER_XDNS] [--rounds 3] [--seconds 4]

Servers, each from its own address in one lab, userspace only (no XDP), the bench.py zone,
pinned to bench.py's SERVER_CPU: "errq", XDNS as it is (transmit stamps from the error queue);
"read", XDNS with XDNS_TEL_TX=read (the send time read just before `sendmmsg`, as before the
error queue); with --ref, "ref", another build (say main's, copied aside). Each round kxdpgun
(bench.py's query mix, on CLIENT_CPU) runs against each with rules off and with `all` (every
answer timed; switched live with `xdns telemetry add all | del all`), in an order rotated each
round (each build's two states back to back), so that the machine's other load falls on all
alike. Prints replies/s per server and
state (median of the rounds) and the ratios: errq all/off (what timing every answer costs),
errq/read with every answer timed (what reading the error queue costs over reading the
clock), errq/read and errq/ref with rules off (must be 1: the off state pays nothing more).
The same ratios of replies per second of server CPU (the daemon's threads, as bench.py
counts them): on a shared machine the scheduler gives the server a share of its CPU that
moves from run to run (autogroups put other sessions' niced builds on a par with it), which
replies/s follows fully and replies per server CPU-second in part (other work still takes the
caches); at saturation on a CPU of its own the two ratios are the same. Each also as the
median of the rounds' own all/off ratios (two runs back to back).
Needs root, kxdpgun, 2 CPUs (as bench.py).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
sys.path.insert(0, str(HERE))
import bench as B  # noqa: E402
import lab as L  # noqa: E402


def rules(build: str, srv, *args: str) -> str:
    p = subprocess.run([build, "telemetry", "--control", str(srv.extra["control"]), *args],
                       capture_output=True, text=True, timeout=10)
    return p.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("xdns", help="xdns binary")
    ap.add_argument("--ref", help="another xdns binary, compared with rules off")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0, help="per kxdpgun run")
    ap.add_argument("--qps", type=int, default=400_000, help="offered (above what userspace answers)")
    a = ap.parse_args()
    builds = {"errq": str(Path(a.xdns).resolve()), "read": str(Path(a.xdns).resolve())}
    if a.ref:
        builds["ref"] = str(Path(a.ref).resolve())
    runs: dict[tuple[str, str], list[int]] = {(b, s): [] for b in builds for s in ("off", "all")}
    eff: dict[tuple[str, str], list[float]] = {k: [] for k in runs}
    print(f"load average at start: {os.getloadavg()}", flush=True)
    with L.Lab(prefix="xdl") as lab:
        qfile = lab.dir / "queries.txt"
        B.query_mix(qfile)
        tgts = {}
        for tag, build in builds.items():
            L.XDNS_BIN = Path(build)  # the lab's starter reads it at call time
            os.environ.pop("XDNS_TEL_TX", None)
            if tag == "read":
                os.environ["XDNS_TEL_TX"] = "read"
            srv = lab.start_xdns(L.DEFAULT_ZONES, name=f"tel-{tag}")
            os.environ.pop("XDNS_TEL_TX", None)
            tgts[tag] = B.Target(f"tel-{tag}", srv.addr4, srv, xdns=True)
        # each build's two states back to back (their order alternating by round), the builds
        # in an order rotated each round: a build's all/off ratio of one round is of two runs
        # seconds apart (the paired ratios below)
        names = list(builds)
        for rnd in range(a.rounds):
            k = rnd % len(names)
            states = ("off", "all") if rnd % 2 == 0 else ("all", "off")
            for tag, state in [(b, s) for b in names[k:] + names[:k] for s in states]:
                tgt, build = tgts[tag], builds[tag]
                want = "ok 1; 1: all" if state == "all" else "ok 0"
                got = rules(build, tgt.server, *(("add", "all") if state == "all" else ("del", "all")))
                if got != want:
                    raise RuntimeError(f"{tag}: telemetry {state}: {got!r}")
                r = B.measure(lab, tgt, qfile, a.seconds, a.qps)
                rules(build, tgt.server, "del", "all")
                runs[(tag, state)].append(r["replies_per_s"])
                e = r["replies_per_s"] / max(r["server_cpu_busy"], 1e-9)
                eff[(tag, state)].append(e)
                print(f"  round {rnd} {tag} {state:3} {r['replies_per_s']:>9} replies/s "
                      f"(sent {r['qps_sent']}/s, server side {100 * r['server_cpu_busy']:.0f}% of a CPU, "
                      f"{e:.0f} replies per server CPU-s)", flush=True)
        for tag in tgts:
            st = lab.xdns_stats(tgts[tag].server)["telemetry"]
            asked = st["tx_software"] + st["tx_hardware"] + st["tx_lost"]
            lost = f", lost {100 * st['tx_lost'] / asked:.0f}% of the stamps asked for" if asked else ""
            print(f"{tag}'s transmit clocks at the end: "
                  + ", ".join(f"{k} {v}" for k, v in st.items() if k.startswith("tx_")) + lost)
        for t in tgts.values():
            lab.stop(t.server)
    print(f"load average at end: {os.getloadavg()}")
    for title, data in (("replies/s", runs), ("replies per server CPU-second", eff)):
        print(f"\n== {title}, all/off of each round (back-to-back runs): median (range)")
        for b in builds:
            pr = sorted(x / y for x, y in zip(data[(b, "all")], data[(b, "off")]))
            print(f"{b:5} all/off  {statistics.median(pr):.3f} ({pr[0]:.3f}-{pr[-1]:.3f})")
        med = {k: statistics.median(v) for k, v in data.items()}
        print(f"\n== {title}\nbuild state  median        runs")
        for (b, s), v in data.items():
            print(f"{b:5} {s:5} {med[(b, s)]:>12.0f}  {[round(x) for x in v]}")
        r = lambda x, y: f"{med[x] / med[y]:.3f}"
        print(f"errq all/off     {r(('errq', 'all'), ('errq', 'off'))}")
        print(f"read all/off     {r(('read', 'all'), ('read', 'off'))}")
        print(f"errq/read all    {r(('errq', 'all'), ('read', 'all'))}")
        print(f"errq/read off    {r(('errq', 'off'), ('read', 'off'))}")
        if a.ref:
            print(f"ref all/off      {r(('ref', 'all'), ('ref', 'off'))}")
            print(f"errq/ref all     {r(('errq', 'all'), ('ref', 'all'))}")
            print(f"errq/ref off     {r(('errq', 'off'), ('ref', 'off'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
