"""Large zones (issue 30): load time, memory and answers/s of a TLD-like zone at several sizes,
xdns (with XDP, and userspace only) against Knot DNS and NSD, in one run.

    make bench-scale                       # 100k and 1M records (about 10 minutes)
    /usr/bin/python3 bench/scale.py [--sizes 100000,1000000,10000000] [--peers xdns-xdp,xdns,knot,nsd]
                                    [--duration S] [--no-reload] [--variant unsigned|nsec3-optout|nsec]
    make bench-scale VARIANT=nsec3-optout  # the signed variant (a TLD's: NSEC3, opt-out)
    /usr/bin/python3 bench/scale.py --smoke   # 20k records, 1 s runs: checks the harness (CI)

Needs root, kxdpgun, knotd, nsd, bpftool. The zone is bench/genzone.py's `tld` shape (two NS
per delegation, glue for 30%, DS for 20%, a few CNAMEs and wildcards), generated once per
size into bench/out/ and reused. `--variant nsec3-optout` (or `nsec`) serves the same zone
signed by Knot DNS (genzone.py --sign: ECDSA P-256, NSEC3 with opt-out, 0 extra iterations and
no salt as RFC 9276 asks, or NSEC), also made once into bench/out/ (`tld-N-VARIANT.zone`, the
signing's seconds beside it in `.signing.json`); every peer serves that file, and half the
queries carry DO=1 (kxdpgun's `D` flag). Knot runs with the lab's `semantic-checks: on`, under
which Knot 3.2 verifies every RRSIG of a signed zone as it loads it; `--knot-checks off` gives
Knot's default, the fair load time for a pre-signed zone.

For each size, every peer is started in turn in the lab's server namespace:
- **until answering**: from start until the zone's SOA is answered (xdns answers from
  userspace while its kernel maps fill); for xdns also **until the kernel** holds the zone
  (`xdp_data_active` in `xdns stats`); and the **CPU seconds** (user + system, every
  thread and process of the server) used by then: `cpu s` until answering, `k cpu s` until the
  kernel. On a machine shared with other work the wall-clock seconds mostly measure the wait
  for a core; the CPU seconds much less (about what an idle machine of one core would take);
- **peak RSS** (the largest VmHWM of the server's processes) once loaded, and **steady RSS**
  a few seconds later: the sum of their proportional set sizes (NSD's server child shares
  the zone pages with its parent after the fork; Pss counts them once);
- **BPF maps**: bytes_memlock of every map of xdns's program (`bpftool map show`), and
  **kernel MiB**: what the machine's kernel allocated while the server loaded, as the growth
  of `SUnreclaim` + `VmallocUsed` (/proc/meminfo) from before its start to its steady state.
  bytes_memlock counts a hash map's elements at their size, the slab at its size class (a
  1,408-byte element takes a 2 KiB object); the growth counts that, and anything else the
  machine allocated meanwhile (run it on a quiet machine; it is what the issue's goal is
  checked against too, `memory_kernel_vs_*`);
- **total per record**: (steady RSS + BPF maps) / records, the figure the issue's goal
  compares (at most 2x Knot's and NSD's); the peak RSS is compared too, alone and with the
  BPF maps added;
- **left out**: xdns answers not in the kernel's answer table (`answers_left_out`: each costs
  a hash-map lookup);
- **XDP %**: of the queries that reached xdns's XDP program during the replies/s run, the
  share it answered itself, and **dnssec pass %** the share it passed to userspace as
  `pass_dnssec` (DO=1 NXDOMAIN and wildcard answers, whose NSEC/NSEC3 proofs depend on the
  question's name: by design not in the kernel), and **tail pass %** the share the kernel
  found but passed as `pass_tail`: a reply that grows the frame by more than the lab's veth
  allows (a socket's datagram reaches a veth's XDP program with only its 64-byte alignment
  slack as tailroom, and the head grows by at most XDNS_HEAD_GROW, 192 bytes; a NIC's receive
  buffers have room: tests/system/test_differential.py); the other verdicts are printed below
  the table;
- **replies/s**: kxdpgun for `--duration` seconds with queries for delegated names (referrals),
  names under them, and absent names (NXDOMAIN); for xdns with XDP also the XDP program's
  ns/packet (`kernel.bpf_stats_enabled`);
- for xdns, **reload**: SIGHUP after bumping the SOA serial in place, the seconds until the
  kernel has the new generation, the peak RSS of the reload (`reload peak`: the high-water mark
  reset before it) and the peak of RSS + BPF maps sampled during it (`+ maps`: old and new
  generations coexist);

Ratios are printed against Knot and NSD; the goals are reported, not asserted. Results:
bench/out/scale.json and the chart bench/out/scale.png.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench as B  # noqa: E402  (the lab plumbing: kxdpgun, bpf stats, map memory)
import genzone  # noqa: E402
from lab import Lab  # noqa: E402

ORIGIN = "tld."
PEERS = ["xdns-xdp", "xdns", "knot", "nsd"]
TRIMMED = 'after="filling the XDP maps"'  # heap.rs: the fill's data freed and trimmed
RESIGN_AFTER_S = 60 * 86400  # a cached signed zone older than this is signed again
GOAL_MEMORY_VS_PEER = 2.0  # (RSS + maps) per record at most 2x Knot's and NSD's


def zone_file(records: int, variant: str = "unsigned") -> Path:
    """The zone of `records` records (before signing) in `variant`, made once into bench/out/;
    a signed variant's signing time is written beside it (`.signing.json`)."""
    B.OUT.mkdir(exist_ok=True)
    path = B.OUT / f"tld-{records}.zone"
    if not path.exists():
        B.run([sys.executable, HERE / "genzone.py", "--shape", "tld", "--records", str(records),
               "--origin", ORIGIN, "-o", path])
    if variant == "unsigned":
        return path
    signed = B.OUT / f"tld-{records}-{variant}.zone"
    # the signatures are valid 90 days (genzone.sign): an older file is signed again
    if not signed.exists() or time.time() - signed.stat().st_mtime > RESIGN_AFTER_S:
        print(f"  signing {path.name} ({variant}) with knotd ...", flush=True)
        t0 = time.monotonic()
        cpu0 = os.times()
        secs = genzone.sign(path, ORIGIN, variant, signed)
        cpu1 = os.times()
        info = {"records": records, "variant": variant, "signing_s": secs,
                "signer_cpu_s": cpu1.children_user + cpu1.children_system
                - cpu0.children_user - cpu0.children_system,
                "wall_s": time.monotonic() - t0, "bytes": signed.stat().st_size,
                "zone_records": count_records(signed)}
        signed.with_suffix(".signing.json").write_text(json.dumps(info, indent=1))
        print(f"    signed in {secs:.1f} s", flush=True)
    return signed


def count_records(path: Path) -> int:
    """RRs in a zone file of one record a line (genzone's, Knot's dump): lines not empty,
    not a comment and not a directive."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip() and not line.startswith((b";", b"$")):
                n += 1
    return n


def signing_info(records: int, variant: str) -> dict:
    p = (B.OUT / f"tld-{records}-{variant}.zone").with_suffix(".signing.json")
    return json.loads(p.read_text()) if p.exists() else {}


def delegations(records: int) -> int:
    """About how many delegations the tld shape makes for `records` records (2.9 each)."""
    return max(1, int(records / 2.9))


def query_file(path: Path, records: int, dnssec: bool = False) -> None:
    """kxdpgun queries: 60% a delegated name (a referral), 20% a name under one, 20% absent;
    with `dnssec` every other query has DO=1 (so 10% are DO=1 NXDOMAIN)."""
    rng = random.Random(2)
    n = delegations(records)
    lines = []
    for i in range(4000):
        d = rng.randrange(n)
        r = i % 5
        if r < 3:
            lines.append(f"d{d}.{ORIGIN} A")
        elif r == 3:
            lines.append(f"www.d{d}.{ORIGIN} AAAA")
        else:
            lines.append(f"absent{d}.{ORIGIN} A")
        if dnssec and i % 2:
            lines[-1] += " D"
    path.write_text("\n".join(lines) + "\n")


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def kernel_alloc_mib() -> float:
    """The kernel's unreclaimable slab and vmalloc memory, MiB (/proc/meminfo): where BPF
    maps live (hash map elements in slab size classes, arrays in vmalloc)."""
    f = {ln.split(":")[0]: int(ln.split()[1]) for ln in Path("/proc/meminfo").read_text().splitlines()}
    return (f["SUnreclaim"] + f["VmallocUsed"]) / 1024


def group_memory(pid: int) -> tuple[float, float]:
    """(peak, steady) MiB of a server's processes: the largest VmHWM of any of them, and the
    sum of their proportional set sizes (Pss: pages shared between NSD's processes after its
    fork are counted once)."""
    peak, pss = 0, 0
    for p in B.group_pids(pid) or [pid]:
        try:
            peak = max(peak, status_kib(p, "VmHWM"))
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    pss += int(line.split()[1])
        except OSError:
            continue
    return peak / 1024, pss / 1024


def group_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the server's processes have used so far: every thread's,
    also of threads that have ended (the process's own counters). On a machine shared with
    other work the wall-clock seconds mostly measure the wait for a core; these do not."""
    tck = os.sysconf("SC_CLK_TCK")
    total = 0
    for p in B.group_pids(pid) or [pid]:
        try:
            st = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        f = st[st.rindex(")") + 2:].split()
        total += int(f[11]) + int(f[12])  # utime, stime
    return total / tck


def rss_phases(log: str) -> list[tuple[str, int]]:
    """The daemon's resident MiB at each logged phase of its start (lines with `rss_mib=`):
    where the userspace memory goes (zones, compiled kernel data, after the fill, trimmed)."""
    out = []
    for line in log.splitlines():
        m = re.search(r"rss_mib=(\d+)", line)
        if not m:
            continue
        msg = re.sub(r'\s*\b\w+=("[^"]*"|\S+)', "", line.split(": ", 1)[-1]).strip()
        after = re.search(r'after="([^"]*)"', line)
        secs = re.search(r"\bseconds=([0-9.]+)", line)
        msg = f"{msg} ({after.group(1)})" if after else msg
        out.append((f"{msg} [{float(secs.group(1)):.1f} s]" if secs else msg, int(m.group(1))))
    return out


SOA_LINE = re.compile(rb"^\S+\s+(?:\d+\s+)?(?:IN\s+)?SOA\s+\S+\s+\S+\s+(\d+)\s", re.M)


def compiled_counts(log: str) -> dict:
    """Names and answers (bodies: a signed zone's DO=0 and DO=1 ones) compiled for the kernel,
    from the daemon's first `XDP: answers compiled` line."""
    for line in log.splitlines():
        if "XDP: answers compiled" in line:
            n, a = re.search(r"\bnames=(\d+)", line), re.search(r"\banswers=(\d+)", line)
            if n and a:
                return {"compiled_names": int(n.group(1)), "compiled_answers": int(a.group(1))}
    return {}


def bump_serial(zone: Path, serial: int) -> None:
    """Write `serial` over the SOA's serial in place (same width: the file is not rewritten).
    genzone's SOA line (`@ IN SOA ...`) or Knot's dump of a signed zone (`tld. 86400 SOA ...`);
    in a signed zone the SOA's RRSIG then no longer matches, which xdns does not check."""
    with open(zone, "r+b") as f:
        head = f.read(4096)
        m = SOA_LINE.search(head)
        if not m or len(m.group(1)) != len(str(serial)):
            raise ValueError(f"{zone}: no SOA serial of width {len(str(serial))} in its first 4 KiB")
        f.seek(m.start(1))
        f.write(str(serial).encode())


def start_peer(lab: Lab, name: str, zones, timeout: float, knot_checks: str = "on"):
    """Start a peer; returns (server, result with the load figures)."""
    t0 = time.monotonic()
    res = {}
    if name == "xdns-xdp":
        srv = lab.start_xdns(zones, name=f"xdns-scale-{int(t0)}", xdp="native", wait=False)
        lab.wait_answering(srv.addr4, ORIGIN, srv.proc, timeout=timeout)
        res["answering_s"] = time.monotonic() - t0
        res["answering_cpu_s"] = group_cpu_s(srv.proc.pid)
        lab.wait_xdp_data(srv, timeout=timeout)
        res["kernel_s"] = time.monotonic() - t0
        res["kernel_cpu_s"] = group_cpu_s(srv.proc.pid)
        # steady memory is measured once the daemon has dropped the fill's data and trimmed
        # its heap (it logs that after the kernel answers; seconds later on a loaded machine)
        deadline = time.monotonic() + timeout
        while TRIMMED not in srv.stderr() and time.monotonic() < deadline:
            time.sleep(0.2)
    elif name == "xdns":  # userspace only: the issue's "userspace path at least as fast as NSD"
        srv = lab.start_xdns(zones, name=f"xdns-udp-scale-{int(t0)}", wait=False)
        lab.wait_answering(srv.addr4, ORIGIN, srv.proc, timeout=timeout)
        res["answering_s"] = time.monotonic() - t0
        res["answering_cpu_s"] = group_cpu_s(srv.proc.pid)
    elif name == "knot":
        srv = lab.start_knot(zones, name=f"knot-scale-{int(t0)}", timeout=timeout,
                             semantic_checks=knot_checks)
        res["answering_s"] = time.monotonic() - t0
        res["answering_cpu_s"] = group_cpu_s(srv.proc.pid)
    elif name == "nsd":
        srv = lab.start_nsd(zones, name=f"nsd-scale-{int(t0)}", timeout=timeout)
        res["answering_s"] = time.monotonic() - t0
        res["answering_cpu_s"] = group_cpu_s(srv.proc.pid)
    else:
        raise ValueError(name)
    return srv, res


def measure_size(lab: Lab, records: int, peers: list[str], duration: float, reload: bool,
                 variant: str = "unsigned", knot_checks: str = "on") -> dict:
    zone = zone_file(records, variant)
    zones = [(ORIGIN, zone)]
    qfile = lab.dir / f"queries-{records}.txt"
    query_file(qfile, records, dnssec=variant != "unsigned")
    # Knot with semantic checks verifies every RRSIG of a signed zone as it loads (far slower
    # than the unsigned zone: docs/perf/2026-11-30-signed-scale.md): more room for the signed variants
    timeout = max(60.0, records / 10_000) * (1 if variant == "unsigned" else 8)
    # per record: of the file served (a signed zone has its RRSIGs, NSEC3s, DNSKEYs too), the
    # same count for every peer
    zone_records = records if variant == "unsigned" else (
        signing_info(records, variant).get("zone_records") or count_records(zone))
    out = {}
    for name in peers:
        print(f"  {records:>9} records: {name} ...", flush=True)
        kernel0 = kernel_alloc_mib()
        srv, res = start_peer(lab, name, zones, timeout, knot_checks)
        try:
            res["peak_mib"], _ = group_memory(srv.proc.pid)
            time.sleep(3)
            _, res["steady_mib"] = group_memory(srv.proc.pid)
            res["kernel_mib"] = max(0.0, kernel_alloc_mib() - kernel0)
            res["maps_mib"] = 0.0
            if name == "xdns-xdp":
                mem = B.xdns_memory(lab, srv)
                res["maps_mib"] = mem["bytes_total"] / 2**20
                res["records"] = mem["records"]
                table = lab.xdns_stats(srv).get("xdp_table", {})
                res["left_out"] = table.get("answers_left_out")
                res["in_table"] = table.get("answers_in_table")
                res["maps_mib_by_map"] = {k: round(v / 2**20, 2) for k, v in sorted(
                    mem["maps"].items(), key=lambda kv: -kv[1]) if v >= 2**20}
                res["rss_phases"] = rss_phases(srv.stderr())
                res.update(compiled_counts(srv.stderr()))
            res["records"] = res.get("records") or zone_records
            res["bytes_per_record"] = (res["steady_mib"] + res["maps_mib"]) * 2**20 / res["records"]
            res["kernel_bytes_per_record"] = (res["steady_mib"] + res["kernel_mib"]) * 2**20 / res["records"]
            tgt = B.Target(name, srv.addr4, srv, xdns=name.startswith("xdns"))
            run = B.measure(lab, tgt, qfile, duration, 2_000_000)
            res["replies_per_s"] = run["replies_per_s"]
            res["reply_pct"] = 100.0 * run["replies"] / max(1, run["queries"])
            if run.get("prog_cnt"):
                res["kernel_ns_per_pkt"] = run["prog_ns"] / run["prog_cnt"]
            if run.get("xdp_delta"):
                seen = sum(run["xdp_delta"].values())
                res["xdp_pct"] = 100.0 * run["xdp_delta"].get("answered", 0) / max(1, seen)
                res["pass_dnssec_pct"] = 100.0 * run["xdp_delta"].get("pass_dnssec", 0) / max(1, seen)
                # found in the kernel but too large to grow the lab veth's frame (see the docstring)
                res["pass_tail_pct"] = 100.0 * run["xdp_delta"].get("pass_tail", 0) / max(1, seen)
                res["xdp_verdicts"] = {k: v for k, v in run["xdp_delta"].items() if v}
            if name == "xdns-xdp" and reload:
                res.update(reload_once(lab, srv, zone, timeout))
        finally:
            if srv.alive():
                lab.stop(srv, timeout=max(60.0, timeout))  # 10M: freeing GBs of zone and maps
            B.detach_xdp(lab)
        print(f"    {json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in res.items()})}",
              flush=True)
        out[name] = res
    return out


def reload_once(lab: Lab, srv, zone: Path, timeout: float) -> dict:
    """SIGHUP with a new serial: seconds until the kernel's new generation, and the memory of
    the reload itself: the RSS high-water mark reset just before it (`clear_refs` 5), so that
    the first load's peak does not stand for it; the BPF maps and RSS + maps sampled every
    half second while both generations exist (a sample can miss a peak shorter than that)."""
    fills = srv.stderr().count("XDP: kernel maps filled")
    prog = B.xdp_prog_id(lab)
    bump_serial(zone, 2)
    peak_maps = peak_total = 0.0

    def sample() -> None:
        nonlocal peak_maps, peak_total
        maps = sum(B.map_memory(prog).values()) / 2**20 if prog else 0.0
        rss = status_kib(srv.proc.pid, "VmRSS") / 1024
        peak_maps, peak_total = max(peak_maps, maps), max(peak_total, rss + maps)

    def result(secs) -> dict:
        return {"reload_s": secs, "reload_peak_mib": status_kib(srv.proc.pid, "VmHWM") / 1024,
                "reload_maps_peak_mib": peak_maps, "reload_memory_peak_mib": peak_total}
    try:
        Path(f"/proc/{srv.proc.pid}/clear_refs").write_text("5")
        t0 = time.monotonic()
        srv.proc.send_signal(signal.SIGHUP)
        deadline = t0 + timeout
        while srv.stderr().count("XDP: kernel maps filled") <= fills:
            if "XDP reload failed" in srv.stderr() or time.monotonic() > deadline:
                return result(None)
            sample()
            time.sleep(0.5)
        secs = time.monotonic() - t0
        sample()
        return result(secs)
    finally:
        bump_serial(zone, 1)


def fmt(v, spec=".1f") -> str:
    return "-" if v is None else format(v, spec)


def report(results: dict, variant: str = "unsigned") -> dict:
    print(f"\n== large zones ({variant}): load, memory, answers (lower is better except replies/s)")
    for size in results:
        info = signing_info(int(size), variant) if variant != "unsigned" else {}
        if info:
            print(f"{size:>9} records signed ({variant}) by knotd in {info['signing_s']:.1f} s "
                  f"({info['signer_cpu_s']:.1f} CPU s), {info['bytes'] / 2**20:.0f} MiB file")
    hdr = (f"{'records':>9} {'peer':9} {'answering s':>11} {'kernel s':>9} {'cpu s':>6} {'k cpu s':>7} {'peak MiB':>9} "
           f"{'steady MiB':>10} {'maps MiB':>9} {'kernel MiB':>10} {'B/record':>9} {'left out':>9} {'replies/s':>10} "
           f"{'ns/pkt':>7} {'XDP %':>6} {'dnssec pass %':>13} {'tail pass %':>11} {'reload s':>9} {'reload peak':>11} "
           f"{'+ maps':>8}")
    print(hdr)
    goals = {}
    for size, peers in results.items():
        for name, r in peers.items():
            print(f"{size:>9} {name:9} {fmt(r.get('answering_s'), '.2f'):>11} {fmt(r.get('kernel_s'), '.2f'):>9} "
                  f"{fmt(r.get('answering_cpu_s'), '.2f'):>6} {fmt(r.get('kernel_cpu_s'), '.2f'):>7} "
                  f"{fmt(r['peak_mib']):>9} {fmt(r['steady_mib']):>10} {fmt(r['maps_mib']):>9} "
                  f"{fmt(r.get('kernel_mib')):>10} "
                  f"{fmt(r['bytes_per_record'], '.0f'):>9} {fmt(r.get('left_out'), 'd'):>9} "
                  f"{fmt(r.get('replies_per_s'), 'd'):>10} {fmt(r.get('kernel_ns_per_pkt'), '.0f'):>7} "
                  f"{fmt(r.get('xdp_pct')):>6} {fmt(r.get('pass_dnssec_pct')):>13} {fmt(r.get('pass_tail_pct')):>11} "
                  f"{fmt(r.get('reload_s'), '.2f'):>9} {fmt(r.get('reload_peak_mib')):>11} "
                  f"{fmt(r.get('reload_memory_peak_mib'), '.0f'):>8}")
        g = goals.setdefault(size, {})
        if peers.get("xdns", {}).get("replies_per_s") and peers.get("nsd", {}).get("replies_per_s"):
            g["userspace_replies_vs_nsd"] = peers["xdns"]["replies_per_s"] / peers["nsd"]["replies_per_s"]
        x = peers.get("xdns-xdp")
        if not x:
            continue
        for peer in ("knot", "nsd"):
            p = peers.get(peer)
            if not p:
                continue
            g[f"memory_vs_{peer}"] = x["bytes_per_record"] / p["bytes_per_record"]
            if x.get("kernel_bytes_per_record") and p.get("kernel_bytes_per_record"):
                g[f"memory_kernel_vs_{peer}"] = x["kernel_bytes_per_record"] / p["kernel_bytes_per_record"]
            g[f"peak_vs_{peer}"] = x["peak_mib"] / p["peak_mib"]
            g[f"peak_with_maps_vs_{peer}"] = (x["peak_mib"] + x["maps_mib"]) / p["peak_mib"]
            g[f"until_kernel_vs_{peer}_answering"] = x["kernel_s"] / p["answering_s"]
            g[f"kernel_cpu_vs_{peer}_answering_cpu"] = x["kernel_cpu_s"] / max(p["answering_cpu_s"], 0.01)
        if peers.get("nsd", {}).get("replies_per_s"):
            g["replies_vs_nsd"] = x["replies_per_s"] / peers["nsd"]["replies_per_s"]
    for size, peers in results.items():
        x = peers.get("xdns-xdp")
        if not x or "maps_mib_by_map" not in x:
            continue
        print(f"\n== xdns-xdp at {size} records: BPF map MiB by map (>= 1 MiB), daemon RSS by phase")
        if x.get("xdp_verdicts"):
            print(f"  XDP verdicts of the replies/s run: {x['xdp_verdicts']}")
        if x.get("compiled_answers"):
            print(f"  kernel answers compiled: {x['compiled_answers']:,} for {x['compiled_names']:,} names; "
                  f"in the answer table {fmt(x.get('in_table'), ',')}, left out {fmt(x.get('left_out'), ',')}")
        for k, v in x["maps_mib_by_map"].items():
            print(f"  {k:28} {v:9.1f}")
        for msg, mib in x.get("rss_phases", []):
            print(f"  rss {mib:6d} MiB  {msg}")
    print("\n== issue 30 goals (reported, not asserted)")
    for size, g in goals.items():
        for peer in ("knot", "nsd"):
            if f"memory_vs_{peer}" in g:
                m = g[f"memory_vs_{peer}"]
                print(f"{size:>9} records: memory (steady RSS + maps) vs {peer:4} {m:6.2f}x "
                      f"(goal <= {GOAL_MEMORY_VS_PEER}x: {'met' if m <= GOAL_MEMORY_VS_PEER else 'NOT met'})")
                if f"memory_kernel_vs_{peer}" in g:
                    mk = g[f"memory_kernel_vs_{peer}"]
                    print(f"{size:>9} records: memory (steady RSS + kernel MiB) vs {peer:4} {mk:6.2f}x "
                          f"(goal <= {GOAL_MEMORY_VS_PEER}x: {'met' if mk <= GOAL_MEMORY_VS_PEER else 'NOT met'})")
                pk, pm = g[f"peak_vs_{peer}"], g[f"peak_with_maps_vs_{peer}"]
                print(f"{size:>9} records: peak RSS vs {peer:4} {pk:6.2f}x "
                      f"(goal <= {GOAL_MEMORY_VS_PEER}x: {'met' if pk <= GOAL_MEMORY_VS_PEER else 'NOT met'}); "
                      f"peak RSS + maps vs {peer}'s peak {pm:6.2f}x")
        if "until_kernel_vs_knot_answering" in g:
            t = g["until_kernel_vs_knot_answering"]
            print(f"{size:>9} records: until the kernel answers vs knot until answering "
                  f"{t:6.2f}x (goal <= 1: {'met' if t <= 1 else 'NOT met'})")
            c = g["kernel_cpu_vs_knot_answering_cpu"]
            print(f"{size:>9} records: CPU seconds until the kernel answers vs knot's until answering "
                  f"{c:6.2f}x (about the ratio on an idle machine of one core)")
        if "replies_vs_nsd" in g:
            print(f"{size:>9} records: xdns-xdp replies/s vs nsd {g['replies_vs_nsd']:6.2f}x")
        if "userspace_replies_vs_nsd" in g:
            u = g["userspace_replies_vs_nsd"]
            print(f"{size:>9} records: xdns (userspace) replies/s vs nsd {u:6.2f}x "
                  f"(goal >= 1: {'met' if u >= 1 else 'NOT met'})")
    return goals


def chart(results: dict, path: Path, variant: str = "unsigned") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(results)
    peers = [p for p in PEERS if any(p in results[s] for s in sizes)]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    w = 0.8 / max(1, len(peers))
    for i, p in enumerate(peers):
        xs = [j + i * w for j in range(len(sizes))]
        rss = [results[s].get(p, {}).get("steady_mib", 0) * 2**20 / int(s) for s in sizes]
        maps = [results[s].get(p, {}).get("maps_mib", 0) * 2**20 / int(s) for s in sizes]
        c = B.peer_color(p)
        ax1.bar(xs, rss, width=w, color=c, label=f"{p} RSS")
        ax1.bar(xs, maps, width=w, bottom=rss, color=c, alpha=0.45, hatch="//",
                label=f"{p} BPF maps" if any(maps) else None)
        t = [results[s].get(p, {}).get("kernel_s") or results[s].get(p, {}).get("answering_s", 0)
             for s in sizes]
        ax2.bar(xs, t, width=w, color=c, label=p + (" (until the kernel)" if p == "xdns-xdp" else ""))
    for ax in (ax1, ax2):
        ax.set_xticks([j + w * (len(peers) - 1) / 2 for j in range(len(sizes))], [f"{int(s):,}" for s in sizes])
        ax.set_xlabel("records (TLD-like zone" + ("" if variant == "unsigned" else f", {variant}") + ")")
        ax.legend(fontsize=7)
    ax1.set_ylabel("bytes per record (steady)")
    ax1.set_title("memory per record")
    ax2.set_ylabel("seconds")
    ax2.set_title("start until answering")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"chart: {path}")


def report_files(files: list[Path]) -> int:
    """The table and chart of earlier runs (e.g. 100k and 1M in one run, 10M in another)."""
    results, variant = {}, "unsigned"
    for f in files:
        d = json.loads(f.read_text())
        variant = d.get("variant", "unsigned")
        results.update(d["results"])
    results = dict(sorted(results.items(), key=lambda kv: int(kv[0])))
    goals = report(results, variant)
    name = ("scale" if variant == "unsigned" else f"scale-{variant}") + "-merged"
    (B.OUT / f"{name}.json").write_text(json.dumps(
        {"variant": variant, "results": results, "goals": goals, "from": [str(f) for f in files]}, indent=1))
    chart(results, B.OUT / f"{name}.png", variant)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--no-reload", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="20k records, 1 s runs (CI)")
    ap.add_argument("--report", metavar="JSON,...",
                    help="run nothing: print the table and draw the chart of earlier runs' JSON files "
                         "(sizes merged, later files win), into bench/out/scale[-VARIANT]-merged.*")
    ap.add_argument("--knot-checks", choices=["on", "off"], default="on",
                    help="Knot's semantic-checks (on, as the lab: for a signed zone Knot 3.2 then "
                         "verifies every RRSIG as it loads; off: Knot's default)")
    ap.add_argument("--variant", default="unsigned", choices=["unsigned", *sorted(genzone.SIGNED)],
                    help="the zone unsigned, or signed by Knot DNS (NSEC3 with opt-out, or NSEC)")
    a = ap.parse_args()
    sizes = [20_000] if a.smoke else [int(s) for s in a.sizes.split(",")]
    duration = 1.0 if a.smoke else a.duration
    peers = [p for p in a.peers.split(",") if p]
    unknown = set(peers) - set(PEERS)
    if unknown:
        ap.error(f"unknown peers {sorted(unknown)}; known: {PEERS}")
    if a.report:
        return report_files([Path(f) for f in a.report.split(",")])
    results = {}
    with Lab(prefix="xdl") as lab, B.BpfStats():
        lab.client_xdp_pass()  # kxdpgun's AF_XDP needs the client veth to run XDP (native peers)
        for size in sizes:
            results[str(size)] = measure_size(lab, size, peers, duration, not a.no_reload, a.variant,
                                              a.knot_checks)
    goals = report(results, a.variant)
    B.OUT.mkdir(exist_ok=True)
    name = "scale" if a.variant == "unsigned" else f"scale-{a.variant}"
    signing = {s: signing_info(int(s), a.variant) for s in results} if a.variant != "unsigned" else {}
    (B.OUT / f"{name}.json").write_text(json.dumps(
        {"variant": a.variant, "results": results, "goals": goals, "signing": signing}, indent=1))
    chart(results, B.OUT / f"{name}.png", a.variant)
    if a.smoke:
        for size, peers_res in results.items():
            for name, r in peers_res.items():
                assert r.get("replies_per_s", 0) > 0, f"{name} gave no replies at {size}"
                if name == "xdns-xdp":
                    assert r.get("xdp_pct", 0) > 0, "xdns-xdp answered nothing in XDP"
        print("\n(smoke mode: a small zone and short runs; numbers are not meaningful)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
