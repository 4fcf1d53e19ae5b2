"""Userspace replies/s with every answer timed vs rules off (issue 27, transmit timestamps
from the error queue), in one run:

    /usr/bin/python3 bench/tel_errq.py XDNS [--ref OTHER_XDNS] [--rounds 3] [--seconds 4]

Servers, each from its own address in one lab, userspace only (no XDP), the bench.py zone,
pinned to bench.py's SERVER_CPU: "errq", XDNS as it is (transmit stamps from the error queue);
"read", XDNS with XDNS_TEL_TX=read (the send time read just before `sendmmsg`, as before the
error queue); with --ref, "ref", another build (say main's, copied aside). Each round kxdpgun
(bench.py's query mix, on CLIENT_CPU) runs against each with rules off and with `all` (every
answer timed; switched live with `xdns telemetry add all | del all`), in an order rotated each
round, so that the machine's other load falls on all alike. Prints replies/s per server and
state (median of the rounds) and the ratios: errq all/off (what timing every answer costs),
errq/read with every answer timed (what reading the error queue costs over reading the
clock), errq/read and errq/ref with rules off (must be 1: the off state pays nothing more).
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
        order = [(b, s) for s in ("off", "all") for b in builds]
        for rnd in range(a.rounds):
            k = rnd % len(order)
            for tag, state in order[k:] + order[:k]:
                tgt, build = tgts[tag], builds[tag]
                want = "ok 1; 1: all" if state == "all" else "ok 0"
                got = rules(build, tgt.server, *(("add", "all") if state == "all" else ("del", "all")))
                if got != want:
                    raise RuntimeError(f"{tag}: telemetry {state}: {got!r}")
                r = B.measure(lab, tgt, qfile, a.seconds, a.qps)
                rules(build, tgt.server, "del", "all")
                runs[(tag, state)].append(r["replies_per_s"])
                print(f"  round {rnd} {tag} {state:3} {r['replies_per_s']:>9} replies/s "
                      f"(sent {r['qps_sent']}/s, server side {100 * r['server_cpu_busy']:.0f}% of a CPU)",
                      flush=True)
        for tag in ("errq", "read"):
            st = lab.xdns_stats(tgts[tag].server)["telemetry"]
            print(f"{tag}'s transmit clocks at the end: " + ", ".join(f"{k} {v}" for k, v in st.items() if k.startswith("tx_")))
        for t in tgts.values():
            lab.stop(t.server)
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(f"load average at end: {os.getloadavg()}")
    print("\nbuild state  replies/s (median)  runs")
    for (b, s), v in runs.items():
        print(f"{b:5} {s:5} {med[(b, s)]:>12.0f}        {v}")
    r = lambda x, y: f"{med[x] / med[y]:.3f}"
    print(f"\nerrq all/off     {r(('errq', 'all'), ('errq', 'off'))}")
    print(f"read all/off     {r(('read', 'all'), ('read', 'off'))}")
    print(f"errq/read all    {r(('errq', 'all'), ('read', 'all'))}")
    print(f"errq/read off    {r(('errq', 'off'), ('read', 'off'))}")
    if a.ref:
        print(f"errq/ref off     {r(('errq', 'off'), ('ref', 'off'))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
