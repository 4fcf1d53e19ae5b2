"""Paired rounds of the in-path cache's miss forwarding (issue 26): the plain router, the
router with an XDP program that passes everything, and one or two xdns builds, in short
interleaved segments, so that the shared machine's load hits every side alike.

    /usr/bin/python3 bench/inpath_ab.py XDNS                     # plain, xdp-pass, xdns-pass
    /usr/bin/python3 bench/inpath_ab.py --rounds 16 --seconds 3 XDNS
    /usr/bin/python3 bench/inpath_ab.py --forward pass,redirect OLD_XDNS NEW_XDNS    # an A/B

One PathLab (client | router | Knot DNS; namespaces named path-*). The client's and the
server's veths carry an XDP_PASS program in every segment (native mode: a veth needs one to
receive frames sent by XDP_TX or redirect). Segments, in an order rotated every round:

  plain      the router forwards with no XDP program on its veths
  xdp-pass   the router's two veths run the lab's one-line XDP_PASS program, attached as
             xdns attaches (`--mode`: native = xdpdrv, generic = xdpgeneric): what having
             any XDP program there costs (on a veth, native XDP moves every packet through
             the veth's XDP receive path and back into an skb)
  <b>-<fw>   xdns `[inpath]` (build b, `forward = fw`), the daemon started for the segment
             and stopped after it (its CPU over the segment is recorded)

Every segment asks names never asked before (Knot answers NXDOMAIN, xdns records each query
and learns each answer: every packet is on the miss path), one dnsperf as in bench/inpath.py.
Each round's rates are divided pairwise: xdp-pass / plain (the kernel's XDP path on the
veth), xdns / xdp-pass (what xdns adds to it), xdns / plain (the issue's goal, >= 0.9);
medians, middle halves (quartiles) and ranges over the rounds are printed, with B / A per
round when two builds are given. kernel.bpf_stats_enabled stays as it is during the rounds
(it would time every XDP run, on one side only); with `--kernel-ns` one more segment per xdns
part runs after them with it on (restored), for the in-kernel ns per packet. JSON in
bench/out/inpath_ab.json. The absolute rates move by tens of percent between minutes on
the 2-CPU guest: read the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
sys.path.insert(0, str(HERE))
import inpath as I  # noqa: E402
import lab as L  # noqa: E402

OUT = HERE / "out"


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(lower quartile, median, upper quartile) of xs (one value: itself thrice)."""
    if len(xs) < 2:
        return (xs[0], xs[0], xs[0])
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return (q[0], q[1], q[2])


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and its reaped children so far (s); 0 once it is gone."""
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def set_xdp(lab: L.PathLab, how: str, obj: Path | None) -> None:
    for dev in (lab.router_cif, lab.router_uif):
        if obj:
            lab.router_run(["ip", "link", "set", "dev", dev, how, "obj", obj, "sec", "xdp"])
        else:
            lab.router_run(["ip", "link", "set", "dev", dev, how, "off"])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("builds", nargs="+", help="one or two xdns binaries (two: an A/B)")
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--forward", default="pass", help="comma-separated: pass, redirect")
    ap.add_argument("--mode", choices=["native", "generic"], default="native")
    ap.add_argument("--capacity", default="1048576",
                    help="the in-path cache's capacity, one for every build or comma-separated, one a build "
                         "(the same binary twice with two capacities: what the cache's size costs)")
    ap.add_argument("--kernel-ns", action="store_true",
                    help="after the rounds, one segment per xdns part with kernel.bpf_stats_enabled=1")
    a = ap.parse_args()
    if len(a.builds) > 2:
        ap.error("one or two builds")
    labels = ["xdns"] if len(a.builds) == 1 else ["A", "B"]
    builds = {lb: Path(p).resolve() for lb, p in zip(labels, a.builds)}
    caps = [int(c) for c in a.capacity.split(",")]
    if len(caps) not in (1, len(builds)):
        ap.error("--capacity: one, or one a build")
    capacity = {lb: caps[min(i, len(caps) - 1)] for i, lb in enumerate(labels)}
    fws = [f.strip() for f in a.forward.split(",") if f.strip()]
    xparts = [f"{b}-{fw}" for b in builds for fw in fws]
    parts = ["plain", "xdp-pass"] + xparts
    how = "xdpdrv" if a.mode == "native" else "xdpgeneric"
    rates: dict[str, list[float]] = {p: [] for p in parts}
    dcpu: dict[str, list[float]] = {p: [] for p in xparts}
    pcpu: dict[str, list[float]] = {p: [] for p in parts}
    loads: list[float] = []
    kns: dict[str, float] = {}
    seq = 0
    with L.PathLab(prefix="path") as lab:
        knot = lab.start_knot(L.DEFAULT_ZONES)
        lab.client_xdp_pass()   # compiles the lab's xdp_pass.o too
        obj = lab.dir / "xdp_pass.o"
        lab.server_run(["ip", "link", "set", "dev", lab.server_if, "xdpdrv", "obj", obj, "sec", "xdp"])

        def segment(part: str, seconds: float) -> tuple[float, float, object]:
            nonlocal seq
            seq += 1
            f = lab.dir / f"u{seq}.txt"
            f.write_text("".join(f"u{i}-s{seq}.example.com A\n" for i in range(int(40000 * seconds) + 20000)))
            srv = None
            if part == "xdp-pass":
                set_xdp(lab, how, obj)
            elif part != "plain":
                b, fw = part.split("-")
                L.XDNS_BIN = builds[b]
                srv = lab.start_inpath(name=f"ab{seq}", extra=f'capacity = {capacity[b]}\nforward = "{fw}"\n'
                                       f'mode = "{a.mode}"\n')
            c0 = cpu_seconds(srv.proc.pid) if srv else 0.0
            t0 = time.monotonic()
            rate = I.dnsperf(lab, knot.addr4, f, seconds, part=part)
            dt = time.monotonic() - t0
            c1 = cpu_seconds(srv.proc.pid) if srv else 0.0
            if srv:
                lab.stop(srv)
            if part == "xdp-pass":
                set_xdp(lab, how, None)
            f.unlink()
            return rate, (c1 - c0) / dt, srv

        for r in range(a.rounds):
            k = r % len(parts)
            order = parts[k:] + parts[:k]
            loads.append(os.getloadavg()[0])
            for part in order:
                rate, cpu, _ = segment(part, a.seconds)
                rates[part].append(rate)
                pcpu[part].append(I.CPU.get(part, 0.0))
                if part in dcpu:
                    dcpu[part].append(cpu)
            print(f"round {r} (load {loads[-1]:.1f}): " + " ".join(f"{p} {rates[p][-1]:.0f}" for p in parts),
                  flush=True)

        if a.kernel_ns:
            old = L.run(["sysctl", "-n", "kernel.bpf_stats_enabled"]).stdout.strip()
            L.run(["sysctl", "-q", "-w", "kernel.bpf_stats_enabled=1"])
            try:
                for part in ["xdp-pass"] + xparts:
                    seq += 1
                    f = lab.dir / f"u{seq}.txt"
                    f.write_text("".join(f"u{i}-s{seq}.example.com A\n" for i in range(200000)))
                    srv = None
                    if part == "xdp-pass":
                        set_xdp(lab, how, obj)
                    else:
                        b, fw = part.split("-")
                        L.XDNS_BIN = builds[b]
                        srv = lab.start_inpath(name=f"kns{seq}", extra=f'capacity = {capacity[b]}\nforward = "{fw}"\n'
                                               f'mode = "{a.mode}"\n')
                    k0 = I.prog_run_stats(lab)
                    I.dnsperf(lab, knot.addr4, f, a.seconds)
                    k1 = I.prog_run_stats(lab)
                    kns[part] = (k1[0] - k0[0]) / max(1, k1[1] - k0[1])
                    if srv:
                        lab.stop(srv)
                    else:
                        set_xdp(lab, how, None)
            finally:
                L.run(["sysctl", "-q", "-w", f"kernel.bpf_stats_enabled={old}"], check=False)

    def per_round(num: str, den: str) -> list[float]:
        return [x / max(1.0, y) for x, y in zip(rates[num], rates[den])]

    pairs = [("xdp-pass", "plain")] + [(p, "xdp-pass") for p in xparts] + [(p, "plain") for p in xparts]
    if len(builds) == 2:
        pairs += [(f"B-{fw}", f"A-{fw}") for fw in fws]
    table = {}
    print(f"\nmode {a.mode}, {a.rounds} rounds of {a.seconds:.0f} s segments, load average "
          f"{min(loads):.1f}-{max(loads):.1f}")
    for lb, p in builds.items():
        print(f"{lb} = {p} (capacity {capacity[lb]})")
    print(f"\n{'part':<16} {'queries/s median':>17} {'range':>15} {'dnsperf cores':>14} {'daemon cores':>13}")
    for p in parts:
        dc = f"{statistics.median(dcpu[p]):.3f}" if p in dcpu else "-"
        print(f"{p:<16} {statistics.median(rates[p]):>17.0f} {min(rates[p]):>7.0f}-{max(rates[p]):<7.0f} "
              f"{statistics.median(pcpu[p]):>14.2f} {dc:>13}")
    print(f"\n{'ratio (per round)':<26} {'median':>7} {'middle half':>12} {'range':>11}  per round")
    for num, den in pairs:
        xs = per_round(num, den)
        lo, med, hi = quartiles(xs)
        name = f"{num} / {den}"
        table[name] = {"per_round": xs, "median": med, "q1": lo, "q3": hi, "min": min(xs), "max": max(xs)}
        print(f"{name:<26} {med:>7.2f} {lo:>5.2f}-{hi:<6.2f} {min(xs):>5.2f}-{max(xs):<5.2f}  "
              + " ".join(f"{x:.2f}" for x in xs))
    if kns:
        print("\nin-kernel ns per packet (bpf_stats, one segment each after the rounds): "
              + ", ".join(f"{p} {v:.0f}" for p, v in kns.items()))
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "inpath_ab.json").write_text(json.dumps({
        "mode": a.mode, "seconds": a.seconds, "builds": {k: str(v) for k, v in builds.items()},
        "loads": loads, "rates": rates, "dnsperf_cores": pcpu, "daemon_cores": dcpu,
        "ratios": table, "kernel_ns": kns}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
