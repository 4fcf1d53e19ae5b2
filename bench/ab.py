"""Paired A/B of the XDP program's in-kernel cost: two builds serving at the same time.

    /usr/bin/python3 bench/ab.py OLD_XDNS NEW_XDNS                 # bench.py's authoritative mix
    /usr/bin/python3 bench/ab.py --resolver OLD_XDNS NEW_XDNS      # resolver.py's cache hits
    /usr/bin/python3 bench/ab.py --rounds 8 --seconds 8 XDNS noop  # against the no-op program
    /usr/bin/python3 bench/ab.py --resolver --query "nosuch.good.lab. A E" OLD NEW  # one shape
    /usr/bin/python3 bench/ab.py --b-extra $'[guard]\nrrl = { rate = 1000000000 }\ncookies = true' X X
                                                                   # one build, B with the guard on
    /usr/bin/python3 bench/ab.py --zone tld.=bench/out/tld-10000-nsec3-optout.zone \
        --query "d0.tld. DS D" OLD NEW                             # a zone of one's own, one shape

A and B are paths to `xdns` binaries (copy target/release/xdns aside before rebuilding), or
`noop` for bench/noop_xdp.bpf.c. Needs what bench.py needs (root, clang, kxdpgun, bpftool).

Why: on this shared machine the same build measured one after the other (bench.py's rounds)
varies by ±20% in ns per packet, more than most changes to the program are worth. Here two
labs (tests/lab/lab.py, a veth pair each) run side by side: A serves in one and B in the
other, both servers on SERVER_CPU and both kxdpgun generators on CLIENT_CPU, at the same
time, so whatever else the machine does hits both alike. Each round reads both programs'
run_time_ns / run_cnt (`kernel.bpf_stats_enabled`) over the same window (25% to 85% of the
run) and prints the ratio B/A; the two builds swap labs every round. Two copies of the same
build give ratios within about ±1.5%. Absolute ns are higher than bench.py's (the two
programs share a CPU and its caches); only the ratio is meant to be read.
"""
from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
sys.path.insert(0, str(HERE))
import bench as B  # noqa: E402
import lab as L  # noqa: E402


def start(lab: L.Lab, build: str, tag: str, tree, extra: str = "", zones=None) -> B.Target:
    """Start `build` (an xdns binary, or "noop") in `lab`; with a tree, as the resolver, warmed.
    `extra`: TOML added to the authoritative server's configuration (`--a-extra`, `--b-extra`);
    `zones`: (origin, file) served instead of the lab's (`--zone`)."""
    if build == "noop":
        return B.start_noop(lab, tag)
    L.XDNS_BIN = Path(build)  # the lab's starters read it at call time
    if tree is not None:
        import resolver as R
        import tree as T
        srv = T.STARTERS["xdns-xdp"](lab, tree, name=tag)
        R.warm(lab, srv.addr4, tag)
    else:
        srv = lab.start_xdns(zones or L.DEFAULT_ZONES, name=tag, xdp="native", extra=extra)
    return B.Target(tag, srv.addr4, srv)


def prog_counters(prog_id: int) -> tuple[int, int]:
    info = B.prog_info(prog_id)
    return info.get("run_cnt", 0), info.get("run_time_ns", 0)


def one_round(labs: list, builds: list[str], qfiles: list[Path], trees: list, tag: str,
              seconds: float, qps: int, extras=("", ""), zones=None) -> list[float]:
    """Both builds at once, builds[i] in labs[i]; ns per packet of each."""
    targets, gens = [], []
    try:
        for lab, build, tree, extra in zip(labs, builds, trees, extras):
            targets.append(start(lab, build, tag, tree, extra, zones))
        prog_ids = []
        for lab, tgt in zip(labs, targets):
            if tgt.pid():
                B.pin(tgt.pid(), B.SERVER_CPU)
            B.threaded_napi(lab, "server", B.SERVER_CPU)
            lab.client_xdp_pass()
            B.threaded_napi(lab, "client", B.CLIENT_CPU)
            prog_ids.append(B.xdp_prog_id(lab))
        gens = [subprocess.Popen(["ip", "netns", "exec", lab.client_ns, "taskset", "-c", str(B.CLIENT_CPU),
                                  "kxdpgun", "-t", str(seconds), "-Q", str(qps), "-b", "10", "-i", str(qf),
                                  tgt.addr4], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for lab, tgt, qf in zip(labs, targets, qfiles)]
        time.sleep(0.25 * seconds)
        before = [prog_counters(p) for p in prog_ids]
        time.sleep(0.6 * seconds)
        after = [prog_counters(p) for p in prog_ids]
        for g in gens:
            out, _ = g.communicate(timeout=seconds + 30)
            if g.returncode != 0:
                raise RuntimeError(f"kxdpgun failed ({g.returncode}):\n{out}")
    finally:
        for g in gens:  # a failed round leaves no generator sending into the next
            if g.poll() is None:
                g.kill()
                g.wait()
        for lab, tgt in zip(labs, targets):
            if tgt.server is not None and tgt.server.alive():
                lab.stop(tgt.server)
            B.detach_xdp(lab)
    out = []
    for (n0, t0), (n1, t1) in zip(before, after):
        if n1 <= n0:
            raise RuntimeError("a program ran on no packet during the window")
        out.append((t1 - t0) / (n1 - n0))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("a", help="xdns binary (or noop): the reference")
    ap.add_argument("b", help="xdns binary (or noop): the candidate")
    ap.add_argument("--resolver", action="store_true", help="cache hits on the lab tree")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=8.0, help="per round")
    ap.add_argument("--qps", type=int, default=2_000_000, help="offered by each generator")
    ap.add_argument("--a-extra", default="", help="TOML added to A's configuration (authoritative)")
    ap.add_argument("--b-extra", default="", help="TOML added to B's configuration (authoritative)")
    ap.add_argument("--zone", action="append", default=[], metavar="ORIGIN=FILE",
                    help="serve this zone file instead of the lab's zones (authoritative); repeatable")
    B.add_query_option(ap)
    a = ap.parse_args()
    zones = [(o, Path(f).resolve()) for o, f in (z.split("=", 1) for z in a.zone)] or None
    builds = [a.a, a.b]
    for b in builds:
        if b != "noop" and not Path(b).is_file():
            print(f"bench/ab.py: {b}: no such binary", file=sys.stderr)
            return 2
    ns: list[list[float]] = [[], []]
    ratios = []
    with L.Lab(prefix="xaa") as l1, L.Lab(prefix="xab") as l2, B.BpfStats():
        labs = [l1, l2]
        trees = [None, None]
        if a.resolver:
            import resolver as R
            import tree as T
            trees = [T.Tree(lab).start() for lab in labs]
        qfiles = []
        for lab in labs:
            qf = lab.dir / "queries.txt"
            if a.query:
                B.write_queries(qf, a.query)
            elif a.resolver:
                R.query_file(qf)
            else:
                B.query_mix(qf)
            qfiles.append(qf)
        for rnd in range(a.rounds):
            order = [0, 1] if rnd % 2 == 0 else [1, 0]  # order[i]: the build in labs[i]
            extras = [a.a_extra, a.b_extra]
            got = one_round(labs, [builds[k] for k in order], qfiles, trees, f"r{rnd}", a.seconds, a.qps,
                            [extras[k] for k in order], zones)
            by_build = {order[i]: got[i] for i in range(2)}
            ns[0].append(by_build[0])
            ns[1].append(by_build[1])
            ratios.append(by_build[1] / by_build[0])
            print(f"round {rnd}: A {by_build[0]:6.1f} ns  B {by_build[1]:6.1f} ns  B/A {ratios[-1]:.3f}",
                  flush=True)
    print(f"A median {statistics.median(ns[0]):.1f} ns, B median {statistics.median(ns[1]):.1f} ns; "
          f"B/A median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}, "
          f"{len(ratios)} rounds)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
