"""Paired A/B of the in-path cache's miss forwarding (issue 26): two xdns builds against the
plain router, in short interleaved segments, so that the shared machine's load hits every
side alike.

    /usr/bin/python3 bench/inpath_ab.py OLD_XDNS NEW_XDNS            # 5 rounds of 4 s segments
    /usr/bin/python3 bench/inpath_ab.py --rounds 8 --seconds 3 A B

One PathLab (client | router | Knot DNS), native mode as `bench/inpath.py` runs it. Each
round runs, in an order rotated every round: the plain router, then each build with
`forward = "pass"` and with `forward = "redirect"` (the daemon started for the segment and
stopped after it); every segment asks names never asked before (Knot answers NXDOMAIN, the
cache records the query and learns the answer), one dnsperf as in bench/inpath.py. A
segment's rate is divided by the plain router's in the same round; the medians of those
ratios over the rounds are printed, with each build's in-kernel ns per packet (bpf_stats).
The absolute rates move by tens of percent between minutes on the 2-CPU guest: read the
ratios.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
sys.path.insert(0, str(HERE))
import inpath as I  # noqa: E402
import lab as L  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=4.0)
    a = ap.parse_args()
    builds = {"A": Path(a.a).resolve(), "B": Path(a.b).resolve()}
    parts = ["plain"] + [f"{b}-{fw}" for b in builds for fw in ("pass", "redirect")]
    ratios: dict[str, list[float]] = {p: [] for p in parts[1:]}
    kns: dict[str, list[float]] = {p: [] for p in parts[1:]}
    seq = 0
    with L.PathLab(prefix="xdl") as lab:
        knot = lab.start_knot(L.DEFAULT_ZONES)
        lab.client_xdp_pass()
        obj = lab.dir / "xdp_pass.o"
        lab.server_run(["ip", "link", "set", "dev", lab.server_if, "xdpdrv", "obj", obj, "sec", "xdp"])
        for r in range(a.rounds):
            order = parts[r % len(parts):] + parts[:r % len(parts)]
            rate = {}
            for part in order:
                seq += 1
                f = lab.dir / f"u{seq}.txt"
                f.write_text("".join(f"u{i}-s{seq}.example.com A\n" for i in range(200000)))
                srv = None
                if part != "plain":
                    b, fw = part.split("-")
                    L.XDNS_BIN = builds[b]
                    srv = lab.start_inpath(name=f"ab{seq}", extra=f'capacity = 1048576\nforward = "{fw}"\n')
                    k0 = I.prog_run_stats(lab)
                rate[part] = I.dnsperf(lab, knot.addr4, f, a.seconds)
                if srv:
                    k1 = I.prog_run_stats(lab)
                    kns[part].append((k1[0] - k0[0]) / max(1, k1[1] - k0[1]))
                    lab.stop(srv)
            for p in parts[1:]:
                ratios[p].append(rate[p] / max(1.0, rate["plain"]))
            print(f"round {r}: " + " ".join(f"{p} {rate[p]:.0f}" for p in parts), flush=True)
    print(f"A = {builds['A']}\nB = {builds['B']}")
    print(f"{'part':<14} {'/ plain (median)':>17} {'per round':>40} {'kernel ns/pkt':>14}")
    for p in parts[1:]:
        rs = " ".join(f"{x:.2f}" for x in ratios[p])
        print(f"{p:<14} {statistics.median(ratios[p]):>17.2f} {rs:>40} {statistics.median(kns[p]) if kns[p] else 0:>14.0f}")
    for fw in ("pass", "redirect"):
        bo = [y / x for x, y in zip(ratios[f"A-{fw}"], ratios[f"B-{fw}"])]
        print(f"B / A ({fw}): median {statistics.median(bo):.2f} (" + " ".join(f"{x:.2f}" for x in bo) + ")")
    return 0


if __name__ == "__main__":
    sys.exit(main())
