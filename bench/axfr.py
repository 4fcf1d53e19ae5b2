"""AXFR of a large zone as a secondary (issue 28): xdns against Knot DNS and NSD as
secondaries of the same Knot DNS primary, in the same run.

    /usr/bin/python3 bench/axfr.py [--records 1000000] [--runs 3] [--no-xdp] [--no-nsd]

Needs root, knotd and nsd. The zone (N `hN A` records, bench/ixfr.py's `plain` shape) is
generated once into bench/out/. Each run starts each secondary with no copy of the zone, in
turn (xdns, Knot, NSD, then again), and times from the process's start to the zone's last
record answered (**served**, polled every 10 ms over UDP). xdns runs with XDP on (`default`
mode: generic on the lab veth) unless `--no-xdp`; **kernel** is then the time until the XDP
program itself answers that record (the `answered` verdict counter grows with the answer),
which is what "served" means for xdns: its row's ratio to Knot uses it. xdns also reports
its log line's phases (`fetched_ms`: the TCP stream received and parsed into the zone;
`built_ms`: validated; `ms`: swapped in, kernel included) and the XDP thread's (`sized`:
the kernel data estimated; `grow`: the program loaded again with zone maps sized for it,
then filled, the answers compiled as they are written, and switched to; `grow_load`: the
first part of `grow`, the object opened and its zone maps made; `grow_verifier`: the verifier's
run, on a thread of its own beside the fill (a binary before it: the verifier ran in
`grow_load`, before the fill); `grow_waited`: how long the filled maps waited for the verifier;
`fill`: filled into the maps of the day).
Peak RSS (VmHWM) per secondary (NSD's is its first process's only: the transfer and the zone's
load run in processes it forks, not counted).
Each xdns run's log is kept in bench/out/axfr-xdns-RUN.log. `XDNS_BIN` picks the binary;
`--base BIN` runs a second one (a build of another commit, for before/after) in each run
beside it, in alternating order, as `xdns-base` (log bench/out/axfr-xdns-base-RUN.log), with
the ratio of the medians (`ratio_to_base`). Results: a table on stdout,
bench/out/axfr-RECORDS[-LABEL].json and the chart bench/out/axfr-RECORDS[-LABEL].png, ratios
to Knot's median. With XDP, the summary also gives each xdns's userspace median and its
ratios to Knot and to the base (`userspace_ratio_to_knot`, `userspace_ratio_to_base`).
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
import lab as L  # noqa: E402
from lab import XDNS_BIN, Lab, write_knot_conf, write_nsd_conf  # noqa: E402

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
    conf = write_knot_conf(wd, a4, a6, [ORIGIN], primary=primary)
    return lab.server(["knotd", "-c", conf], name=name), a4


def nsd_secondary(lab: Lab, name: str, primary: str):
    a4, a6 = lab.new_address()
    wd = lab.dir / name
    wd.mkdir()
    conf = write_nsd_conf(wd, a4, a6, [ORIGIN], primary=primary)
    return lab.server(["nsd", "-c", conf, "-d"], name=name, cwd=wd), a4


def wait_kernel(lab: Lab, srv, name: str, timeout: float, period: float = 0.1) -> float | None:
    """Seconds (from now) until the XDP program answers `name` A itself: the `answered`
    verdict counter grows across a query answered NOERROR with data. None if it never does
    within `timeout` (the kernel maps did not take the zone: see the log). One `xdns stats`
    call per `period`: each call sums every thread's counters (65,536 per query type), and
    two calls every 20 ms took 4.5 % of the daemon's CPU samples while its kernel maps were
    compiled and filled, on a 2-core machine."""
    q = dns.message.make_query(name, "A")
    q.flags = 0
    wire = q.to_wire()
    t0 = time.monotonic()
    before = lab.xdns_stats(srv)["xdp"].get("answered", 0)
    while time.monotonic() - t0 < timeout:
        r = lab.udp(srv.addr4, wire, timeout=0.2)
        after = lab.xdns_stats(srv)["xdp"].get("answered", 0)
        if r is not None and after > before:
            m = dns.message.from_wire(r)
            if m.rcode() == dns.rcode.NOERROR and m.answer:
                return time.monotonic() - t0
        before = after
        time.sleep(period)
    return None


def kernel_phases(log: str) -> dict:
    """The XDP thread's phases for the transferred zone, from the daemon's log (seconds): the
    kernel data sized (the estimate), the answers compiled for it, and the maps grown for them
    (the program loaded again: a verifier run, `grow_load_s`; then the fill, the compile
    streamed into it, and the links switched) or filled into the maps of the day. Since the
    compile is streamed into the fill, `compile_s` ends with the fill: it is the fill's time,
    not a phase of its own."""
    out = {}
    for ln in log.splitlines():
        m = re.search(r"(?<![a-z_])seconds=([0-9.e-]+)", ln)
        if not m:
            continue
        for field in ("verifier", "waited"):
            f = re.search(rf"\b{field}_seconds=([0-9.e-]+)", ln)
            if f and "XDP: grown program loaded" in ln:
                out[f"grow_{field}_s"] = round(float(f.group(1)), 2)
        if "XDP: answers compiled" in ln and not re.search(r"names=0\b", ln):
            out["compile_s"] = round(float(m.group(1)), 2)
        elif "XDP: grown program loaded" in ln:
            out["grow_load_s"] = round(float(m.group(1)), 2)
        elif "XDP: kernel maps grown" in ln:
            out["grow_s"] = round(float(m.group(1)), 2)
        elif "XDP: kernel data sized" in ln and not re.search(r"names=0\b", ln):
            out["sized_s"] = round(float(m.group(1)), 2)
        elif "XDP: kernel maps filled" in ln and "compile_s" in out:
            out["fill_s"] = round(float(m.group(1)), 2)
    return out


def stop(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except Exception:
        proc.kill()
        proc.wait()


def chart(res: dict, summary: dict, records: int, path: Path) -> None:
    """Served time per secondary (bars: median; dots: each run), xdns's kernel time beside
    its userspace one, and peak RSS."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [(label, key, who) for label, key, who in [
        ("xdns (userspace)", "served_s", "xdns"), ("xdns (kernel)", "kernel_s", "xdns"),
        ("base (userspace)", "served_s", "xdns-base"), ("base (kernel)", "kernel_s", "xdns-base"),
        ("Knot DNS", "served_s", "knot"), ("NSD", "served_s", "nsd")]
        if [r[key] for r in res.get(who, []) if r.get(key) is not None]]
    colors = {"xdns (userspace)": "navajowhite", "xdns (kernel)": "tab:orange", "base (userspace)": "lightsteelblue",
              "base (kernel)": "tab:blue", "Knot DNS": "dimgray", "NSD": "silver"}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.4), gridspec_kw={"width_ratios": [2.2, 1]})
    for i, (label, key, who) in enumerate(rows):
        vals = [r[key] for r in res[who] if r.get(key) is not None]
        med = statistics.median(vals)
        ax1.bar(i, med, color=colors[label])
        ax1.plot([i] * len(vals), vals, "o", color="black", ms=3)
        ratio = med / summary["knot"]["median_s"] if "knot" in summary else None
        ax1.text(i, max(vals), f"{med:.2f} s" + (f"\n{ratio:.2f}x Knot" if ratio else ""), ha="center", va="bottom", fontsize=8)
    if res.get("xdns") and not any(r.get("kernel_s") is not None for r in res["xdns"]) and summary["xdns"].get("kernel_answered_runs") == 0:
        ax1.text(0.01, 0.97, "xdns's XDP program never answered the transferred zone (kernel maps sized at start)",
                 transform=ax1.transAxes, va="top", fontsize=8, color="tab:red")
    ax1.set_xticks(range(len(rows)), [r[0] for r in rows], fontsize=8)
    ax1.set_ylabel("seconds from process start")
    ax1.set_title(f"AXFR of {records:,} records: start to last record answered")
    ax1.set_ylim(0, max([r[k] for _, k, w in rows for r in res[w] if r.get(k) is not None] + [0.1]) * 1.3)
    who = [w for w in ("xdns", "xdns-base", "knot", "nsd") if res.get(w)]
    rss = [statistics.median(r["peak_rss_mb"] or 0 for r in res[w]) for w in who]
    shade = {"xdns": "tab:orange", "xdns-base": "tab:blue", "knot": "dimgray", "nsd": "silver"}
    ax2.bar(who, rss, color=[shade[w] for w in who])
    for i, v in enumerate(rss):
        ax2.text(i, v, f"{v:.0f}", ha="center", va="bottom", fontsize=8)
    ax2.set_title("peak RSS (MB)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(res: dict, summary: dict) -> str:
    lines = ["| secondary | served (s, runs) | median (s) | ratio to Knot | peak RSS (MB) | notes |",
             "|---|---|---|---|---|---|"]
    for who, label in [("xdns", "xdns"), ("xdns-base", "xdns base"), ("knot", "Knot DNS"), ("nsd", "NSD")]:
        runs = res.get(who) or []
        if not runs:
            continue
        sm = summary[who]
        served = ", ".join(f"{r['served_s']:.2f}" for r in runs)
        notes = ""
        if who.startswith("xdns"):
            if any(r.get("kernel_s") is not None for r in runs):
                served = ", ".join(f"{r['served_s']:.2f}/{r['kernel_s']:.2f}" if r.get("kernel_s") is not None
                                   else f"{r['served_s']:.2f}/-" for r in runs)
                label += " (userspace/kernel)"
            ph = runs[-1].get("phases_ms", {})
            notes = "last run: " + ", ".join(f"{k} {v}" for k, v in ph.items())
            kp = [r.get("kernel_phases_s") or {} for r in runs]
            for k in ("sized_s", "grow_load_s", "grow_verifier_s", "grow_waited_s", "grow_s", "fill_s"):
                if any(k in p for p in kp):
                    notes += f"; XDP {k[:-2]} " + ", ".join(f"{p[k]:.1f}" if k in p else "-" for p in kp) + " s"
            if sm.get("userspace_ratio_to_knot") is not None:
                notes += f"; userspace median {sm['userspace_median_s']:.2f} s, {sm['userspace_ratio_to_knot']}x Knot"
            if sm.get("kernel_answered_runs") == 0:
                notes += "; the XDP program never answered the zone"
        if who == "knot":
            notes = "Knot's AXFR: " + ", ".join(f"{r['knot_axfr_s']}" for r in runs if "knot_axfr_s" in r) + " s"
        ratio = sm.get("ratio_to_knot")
        lines.append(f"| {label} | {served} | {sm['median_s']:.2f} | {ratio if ratio is not None else '-'} | "
                     f"{statistics.median(r['peak_rss_mb'] or 0 for r in runs):.0f} | {notes} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--xdp", action=argparse.BooleanOptionalAction, default=True,
                    help="xdns with XDP (default mode); served = the kernel answers")
    ap.add_argument("--nsd", action=argparse.BooleanOptionalAction, default=True, help="NSD as a secondary")
    ap.add_argument("--knot", action=argparse.BooleanOptionalAction, default=True, help="Knot as a secondary")
    ap.add_argument("--timeout", type=float, default=600, help="seconds a secondary has to serve the zone")
    ap.add_argument("--kernel-timeout", type=float, default=120,
                    help="seconds after userspace serves for the XDP program to answer")
    ap.add_argument("--label", default="", help="added to the result files' names (before/after)")
    ap.add_argument("--base", default="", help="also run this xdns binary (before/after), in turn with XDNS_BIN in each run")
    ap.add_argument("--perf", default="", help="record `perf record -g` of the first xdns run into this file")
    args = ap.parse_args()
    zone = zone_file(args.records, "plain")
    last = f"h{args.records - 4}.{ORIGIN}"
    timeout = args.timeout
    res: dict[str, list] = {"xdns": [], "xdns-base": [], "knot": [], "nsd": []}
    B.OUT.mkdir(exist_ok=True)
    with Lab(prefix="axb") as lab:
        knot = lab.start_knot_primary([(ORIGIN, zone)], name="knot-primary")
        try:
            for run in range(args.runs):
                # xdns (and the base binary, in alternating order from run to run)
                xdns_bins = [("xdns", XDNS_BIN)] + ([("xdns-base", Path(args.base))] if args.base else [])
                if run % 2:
                    xdns_bins.reverse()
                for who, xbin in xdns_bins:
                    L.XDNS_BIN = xbin
                    name = f"{who}-{run}"
                    extra = f'\n[[zone]]\nname = "{ORIGIN}"\nprimaries = ["{knot.addr4}@53"]\n'
                    t0 = time.monotonic()
                    srv = lab.start_xdns([], name=name, extra=extra, xdp="default" if args.xdp else None,
                                         wait=False, timeout=timeout)
                    perf = None
                    if args.perf and run == 0 and who == "xdns":
                        import subprocess
                        perf = subprocess.Popen(["perf", "record", "-g", "-F", "999", "-o", args.perf, "-p", str(srv.proc.pid)],
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    try:
                        wait_record(lab, srv.addr4, last, srv.proc, timeout)
                    except (TimeoutError, RuntimeError):
                        print(srv.stderr()[-3000:])
                        print(knot.stderr()[-3000:])
                        raise
                    served = time.monotonic() - t0
                    kernel = None
                    if args.xdp:
                        k = wait_kernel(lab, srv, last, args.kernel_timeout)
                        kernel = k and time.monotonic() - t0
                    # the log line comes right after the swap
                    line = ""
                    for _ in range(1200):  # after the kernel's reload, which takes seconds
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
                         "kernel_phases_s": kernel_phases(srv.stderr()), "peak_rss_mb": peak_mb(srv.proc.pid)}
                    print(f"run {run} {who}: {json.dumps(r)}", flush=True)
                    res[who].append(r)
                    lab.stop(srv, timeout=60)
                    (B.OUT / f"axfr-{who}-{run}.log").write_text(srv.stderr())
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
    res = {k: v for k, v in res.items() if v}

    def served_of(who: str, r: dict) -> float:
        # xdns with XDP serves once its kernel answers (a run whose kernel never did counts
        # its userspace time and is flagged in the table)
        if who.startswith("xdns") and args.xdp and r.get("kernel_s") is not None:
            return r["kernel_s"]
        return r["served_s"]

    med = {k: statistics.median(served_of(k, r) for r in v) for k, v in res.items()}
    summary = {k: {"median_s": round(m, 3), "ratio_to_knot": round(m / med["knot"], 2) if "knot" in med else None}
               for k, m in med.items()}
    for who in ("xdns", "xdns-base"):
        if args.xdp and who in res:
            summary[who]["kernel_answered_runs"] = sum(r.get("kernel_s") is not None for r in res[who])
    if "xdns" in med and "xdns-base" in med:
        summary["xdns"]["ratio_to_base"] = round(med["xdns"] / med["xdns-base"], 3)
    # with XDP, `median_s` is the kernel's: userspace serving has its own median and ratios
    if args.xdp:
        for who in ("xdns", "xdns-base"):
            if who in res:
                um = statistics.median(r["served_s"] for r in res[who])
                summary[who]["userspace_median_s"] = round(um, 3)
                if "knot" in med:
                    summary[who]["userspace_ratio_to_knot"] = round(um / med["knot"], 2)
        if "xdns" in res and "xdns-base" in res:
            summary["xdns"]["userspace_ratio_to_base"] = round(
                summary["xdns"]["userspace_median_s"] / summary["xdns-base"]["userspace_median_s"], 3)
    print()
    print(table(res, summary))
    print("\nsummary:", json.dumps(summary))
    stem = f"axfr-{args.records}{'-' + args.label if args.label else ''}"
    out = B.OUT / f"{stem}.json"
    out.write_text(json.dumps({"records": args.records, "xdns_bin": str(XDNS_BIN), "base_bin": args.base, "xdp": args.xdp,
                               "runs": res, "summary": summary}, indent=1))
    try:
        chart(res, summary, args.records, B.OUT / f"{stem}.png")
        print("written", out, "and", B.OUT / f"{stem}.png")
    except ImportError:
        print("written", out, "(matplotlib missing: no chart)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
