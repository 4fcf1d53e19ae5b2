"""Load time A/B (issue 30): two xdns builds started in turn on the same TLD-like zone, each
from process start until its kernel answers (`xdp_data_active`), with the CPU seconds of every
thread by then; Knot DNS until it answers, as the goal's yardstick.

    /usr/bin/python3 bench/loadtime.py --base OLD/target/release/xdns [--new target/release/xdns]
                                       [--records 1000000] [--variant unsigned|nsec3-optout|nsec]
                                       [--pairs 3] [--no-knot] [--knot-checks on|off]
                                       [--perf DIR] [--label L]

Needs root. The zone is bench/genzone.py's `tld` shape (bench/out/tld-N.zone, as
bench/scale.py makes it; `--variant nsec3-optout` the same zone Knot-signed,
bench/out/tld-N-nsec3-optout.zone, signed once by bench/scale.py's `zone_file`). The builds alternate which goes first in each pair. Printed per run:
wall seconds until the kernel answers, the process's CPU seconds by then (user + system,
every thread, ended ones included), the seconds until the log says the zones are loaded,
and the CPU seconds of each named thread (`xdns-rt` builds and validates the zones from
what `xdns-scan` reads and scans beside it, `xdns-xdp` sizes the maps, runs the verifier and writes the fill,
`xdns-compile` compiles the answers beside it, `xdns-estimate` compiles half the sizing's
sample), and the phases the daemon logs with their
seconds (each run's log: bench/out/loadtime-{base,new}-PAIR.log). Then new / base of the
medians. On a shared machine the wall seconds measure the
wait for a core as much as the work: note `uptime` beside the run.

`--perf DIR` records `perf record -F 499 -g` of each run into DIR (for `perf report`;
`LOADTIME_PERF_G="--call-graph dwarf,16384"` for call graphs through inlined code). Results:
bench/out/loadtime-RECORDS[-VARIANT][-LABEL].json.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
import lab as L  # noqa: E402
import scale as S  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def thread_cpu(pid: int, seen: dict[int, tuple[str, float]]) -> None:
    """Update `seen` (tid -> (name, CPU s)) with every live thread of `pid`."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        try:
            st = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue
        name = st[st.index("(") + 1:st.rindex(")")]
        f = st[st.rindex(")") + 2:].split()
        seen[int(tid)] = (name, (int(f[11]) + int(f[12])) / TCK)


def phases(log: str) -> list[tuple[str, float]]:
    """The daemon's logged phases with a `seconds=` field, in order."""
    out = []
    for line in log.splitlines():
        m = re.search(r"\bseconds=([0-9.]+)", line)
        if not m or "XDP" not in line and "zone" not in line:
            continue
        msg = re.sub(r'\s*\b\w+=("[^"]*"|\S+)', "", line.split(": ", 1)[-1]).strip()
        out.append((msg[:70], float(m.group(1))))
    return out


def zones_loaded_at(log: str, t0_wall: float) -> float | None:
    """Seconds from the start until the log says the zones are loaded (the heap trim after
    "loading the zones", logged once every zone is read, built and validated)."""
    for line in log.splitlines():
        if 'after="loading the zones"' in line:
            ts = line.split()[0].rstrip("Z")
            try:
                t = datetime.datetime.fromisoformat(ts).replace(tzinfo=datetime.timezone.utc).timestamp()
            except ValueError:
                return None
            return t - t0_wall
    return None


def run_xdns(binary: Path, zone: Path, timeout: float, perf_out: Path | None) -> dict:
    L.XDNS_BIN = Path(binary)
    with L.Lab(prefix="load") as lab:
        t0, t0_wall = time.monotonic(), time.time()
        srv = lab.start_xdns([(S.ORIGIN, zone)], name=f"xdns-load-{int(t0)}", xdp="native", wait=False)
        perf = None
        if perf_out:
            perf = subprocess.Popen(["perf", "record", "-F", "499", *os.environ.get("LOADTIME_PERF_G", "-g").split(), "-o", str(perf_out), "-p",
                                     str(srv.proc.pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        seen: dict[int, tuple[str, float]] = {}
        deadline = t0 + timeout
        while True:
            thread_cpu(srv.proc.pid, seen)
            try:
                if lab.xdns_stats(srv).get("xdp_data_active"):
                    break
            except RuntimeError:
                pass
            if not srv.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"xdns did not fill its maps:\n{srv.stderr()[-3000:]}")
            time.sleep(0.05)
        wall = time.monotonic() - t0
        thread_cpu(srv.proc.pid, seen)
        cpu = S.group_cpu_s(srv.proc.pid)
        if perf:
            perf.send_signal(2)
            perf.wait(timeout=60)
        by_name: dict[str, float] = {}
        for name, s in seen.values():
            by_name[name] = by_name.get(name, 0.0) + s
        log = srv.stderr()
        lab.stop(srv, timeout=max(60.0, timeout))
    return {"wall_s": wall, "cpu_s": cpu, "zone_s": zones_loaded_at(log, t0_wall), "threads": by_name,
            "phases": phases(log), "log": log}


def run_knot(zone: Path, timeout: float, checks: str) -> dict:
    with L.Lab(prefix="load") as lab:
        t0 = time.monotonic()
        srv = lab.start_knot([(S.ORIGIN, zone)], name=f"knot-load-{int(t0)}", timeout=timeout,
                             semantic_checks=checks)
        wall = time.monotonic() - t0
        cpu = S.group_cpu_s(srv.proc.pid)
        lab.stop(srv, timeout=max(60.0, timeout))
    return {"wall_s": wall, "cpu_s": cpu}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, type=Path)
    ap.add_argument("--new", type=Path, default=HERE.parent / "target" / "release" / "xdns")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--variant", default="unsigned", choices=["unsigned", "nsec3-optout", "nsec"])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--no-knot", action="store_true")
    ap.add_argument("--knot-checks", choices=["on", "off"], default="on",
                    help="Knot's semantic-checks (on, as the lab; for a signed zone Knot 3.2 then "
                         "verifies every RRSIG as it loads, which xdns does not: off for the yardstick)")
    ap.add_argument("--perf", type=Path)
    ap.add_argument("--label", default="", help="results in bench/out/loadtime-RECORDS[-VARIANT][-LABEL].json")
    a = ap.parse_args()
    zone = S.zone_file(a.records, a.variant)
    timeout = max(60.0, a.records / 10_000)
    if a.perf:
        a.perf.mkdir(parents=True, exist_ok=True)
    res: dict[str, list[dict]] = {"base": [], "new": [], "knot": []}
    for i in range(a.pairs):
        order = ["base", "new"] if i % 2 == 0 else ["new", "base"]
        for which in order:
            perf_out = a.perf / f"{which}-{i}.data" if a.perf else None
            r = run_xdns(getattr(a, which), zone, timeout, perf_out)
            r["load"] = os.getloadavg()[0]
            (S.B.OUT / f"loadtime-{which}-{i}.log").write_text(r.pop("log"))
            res[which].append(r)
            th = " ".join(f"{k}={v:.2f}" for k, v in sorted(r["threads"].items(), key=lambda kv: -kv[1]) if v >= 0.05)
            zs = f"zones {r['zone_s']:6.2f} s, " if r["zone_s"] is not None else ""
            print(f"pair {i} {which:4}: {zs}kernel {r['wall_s']:6.2f} s, cpu {r['cpu_s']:6.2f} s (load {r['load']:.1f}) {th}",
                  flush=True)
            for msg, s in r["phases"]:
                print(f"      {s:8.2f} s  {msg}")
        if not a.no_knot:
            k = run_knot(zone, timeout, a.knot_checks)
            res["knot"].append(k)
            print(f"pair {i} knot: answering {k['wall_s']:6.2f} s, cpu {k['cpu_s']:6.2f} s", flush=True)
    med = {w: {m: statistics.median(r[m] for r in rs) for m in ("wall_s", "cpu_s")} for w, rs in res.items() if rs}
    for w in ("base", "new"):
        zs = [r["zone_s"] for r in res[w] if r["zone_s"] is not None]
        # the zone load's CPU: the loading thread and, where there is one, the scanning thread
        zc = [r["threads"].get("xdns-rt", 0.0) + r["threads"].get("xdns-scan", 0.0) for r in res[w]]
        med[w]["zone_s"] = statistics.median(zs) if zs else float("nan")
        med[w]["zone_cpu_s"] = statistics.median(zc)
    print(f"\n{'':6} {'wall s (median)':>16} {'cpu s (median)':>15} {'zones s':>8} {'zone cpu s':>11}")
    for w, m in med.items():
        extra = f" {m['zone_s']:8.2f} {m['zone_cpu_s']:11.2f}" if "zone_s" in m else ""
        print(f"{w:6} {m['wall_s']:16.2f} {m['cpu_s']:15.2f}{extra}")
    print(f"new / base: zones loaded {med['new']['zone_s'] / med['base']['zone_s']:.3f} "
          f"(zone cpu {med['new']['zone_cpu_s'] / med['base']['zone_cpu_s']:.3f})")
    print(f"new / base: wall {med['new']['wall_s'] / med['base']['wall_s']:.3f}, "
          f"cpu {med['new']['cpu_s'] / med['base']['cpu_s']:.3f}")
    if "knot" in med:
        for w in ("base", "new"):
            print(f"{w} / knot: wall {med[w]['wall_s'] / med['knot']['wall_s']:.2f}x, "
                  f"cpu {med[w]['cpu_s'] / med['knot']['cpu_s']:.2f}x")
    variant = "" if a.variant == "unsigned" else f"-{a.variant}"
    out = S.B.OUT / f"loadtime-{a.records}{variant}{'-' + a.label if a.label else ''}.json"
    out.write_text(json.dumps(res, indent=1))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
