"""The `cold-delay` part of bench/resolver.py: cache misses over the remote lab tree with an
added one-way delay per authoritative server (issue 32's benchmark).

    /usr/bin/python3 bench/resolver.py --parts cold-delay [--peers xdns,unbound,...]
    /usr/bin/python3 bench/resolver.py --parts relay-ceiling      # the relay's own limit

Setup: a second tree in the lab, `tree.Tree(lab, remote=True, delay_ms=DELAY_MS)`: the same
zones in their own namespace behind a veth pair, routes and the delaying relay
(crates/xdns-lab-delay; this kernel has no netem qdisc). Every host is DELAY_MS away one way,
so each upstream query costs 2 x DELAY_MS more than on the loopback tree. Resolvers run in
the server namespace as in the other parts (same starters, prefetch off) and reach the tree
through the uplink veth.

CPU placement (2 CPUs): the resolver (taskset) and the NAPI threads of both its veths (the
client-facing one and the uplink to the tree) on SERVER_CPU; kxdpgun, the client veth's NAPI,
the relay, its veths' NAPI threads and the tree's servers on CLIENT_CPU. A veth has NAPI only
with an XDP program: each veth of the server namespace gets the one-line XDP_PASS program
(lab.xdp_pass) unless the peer attached its own (xdns-xdp on the client-facing veth,
kernel iteration on both), so every peer's receive path runs on SERVER_CPU alike instead of in
the sender's softirq on the other CPU.

The machine may be shared: `--nice N` runs all of the above at niceness N (resolver threads,
tree, relay, kxdpgun, NAPI threads, and their scheduler autogroups: with autogroups, CPU time
is shared between sessions first and every lab server is a session of its own, so without
this a resolver gets 1/k of its CPU when k-1 other sessions are busy there) so that other
users' work takes less of both CPUs; every peer of a run gets the same.

Per peer, in order:
1. Latency, one query at a time from the client namespace: `cold` = caches flushed
   (tree.flush) and one name resolved from the root (the COLD_SHAPES of resolver.py: 3 to 6
   zones); `miss` = delegations cached, a new wildcard name under wild.example. (one upstream
   query to leaf1). Mean and p99 of each (SAMPLES of each: the p99 of 40 was the single
   slowest, so one late sample decided it), the cold ones per shape too, and for xdns the
   counters that moved around each cold sample (a kernel query taken back by the timer,
   `kit` `timeout`, or raced by a redundant query; an upstream timeout of the resolver's
   own exchange, `resolver.upstream_timeouts`).
2. Misses per second: kxdpgun sends unique names under wild.example. (delegation cached, so
   each query is exactly one upstream query) at increasing rates (RATES, DURATION seconds
   each; `--delay-misses nxdomain`: unique names under good.lab., each an NXDOMAIN, the
   NXDOMAIN replies counted as resolutions instead of the NOERROR ones below); a step is
   sustained when >= 99% of the queries are resolved (a NOERROR reply:
   every name is a wildcard; a SERVFAIL for a full pending queue or the per-zone fetch quota
   is a reply but no resolution, and at 20k/s it was most of xdns-xdp's replies); the rate
   reported is the highest sustained step, in NOERROR replies/s. A step below 99% is tried once more (with new names); the
   ramp stops after the first step below 99% twice.
3. CPU per miss, at every step: busy time of SERVER_CPU from /proc/stat (user + nice + system
   + irq + softirq + steal, i.e. everything that is not idle or iowait), over the middle of the
   run (25% to 85% of it), minus the busy share measured for 1 s just before the steps with the
   resolver idle (what other users of the shared machine run there), divided by the replies
   (= misses answered) in the same window. It counts the resolver, its NAPI threads, the
   softirq work of its sockets and XDP programs, and whatever else changed on that CPU
   meanwhile. Beside it, `proc`: the run time of the resolver's threads plus its veths' NAPI
   threads (/proc/PID/task/*/schedstat, ns), which other users cannot inflate but which misses
   softirq work done outside those threads. Compared at the reference rate (the highest step
   every peer sustained) and at each peer's own highest sustained step. The /proc/stat figure
   is left out ("-") when the CPU was busier than BACKGROUND_MAX with the resolver idle.

Peers: COLD_DELAY_PEERS, one line each. Issue 32's kernel iteration is the row

    "xdns-kiter": ("xdns-xdp", {"uplink": True}),

(`uplink`: xdns's XDP program on the uplink veth too, where upstream answers arrive;
`kernel_iteration` unset: on by default; forwarding off on every interface, as on a default
host, so the kernel's next hops come from the daemon's next-hop table: bpf/README.md,
"Next hops without forwarding".) `xdns-kiter-fwd` is the same with forwarding on the server
veth and the uplink (tree.py's `forwarding`, `uplink_forwarding`): next hops from
`bpf_fib_lookup`, as before the table. `xdns-xdp` is today's path without kernel iteration
(`kernel_iteration = false`: on by default, it would take that row's misses too).

`xdns-kiter-base` is the same row run with the binary in XDNS_BIN_BASE, to compare two builds
in one run (an A/B of a kernel iteration change, both rows beside the same peers).

Goals of issue 32 (reported, never asserted): xdns-kiter CPU per miss <= 0.5 x xdns-xdp's
(today's path: XDP cache stage, misses in userspace); xdns-kiter misses/s >= 2 x Unbound's.
Without the xdns-kiter row (`--peers` leaving it out) they print "n/a"; today's xdns-xdp /
Unbound is printed as the baseline.

relay-ceiling: the relay alone. bench/noop_xdp.bpf.c on the tree's veth bounces every UDP
query (QR set) and kxdpgun, in the server namespace on the uplink, sends at increasing rates
through the relay (DELAY_MS each way): replies/s counts frames relayed both ways, with the
relay pinned alone on CLIENT_CPU (kxdpgun and the uplink's NAPI on SERVER_CPU).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

import dns.flags
import dns.rcode

import bench as B
import tree as T
from lab import Lab, run

DELAY_MS = 5.0  # one-way, every tree host: +10 ms per upstream round trip
# Issue 32's goals (reported, never asserted).
GOAL_CPU_PER_MISS_VS_XDNS = 0.5  # xdns-kiter / xdns-xdp, lower is better
GOAL_MISSES_VS_UNBOUND = 2.0     # xdns-kiter / unbound
BASELINE = "xdns-xdp"            # today's path for the per-miss goal
KITER = "xdns-kiter"

# name -> (tree.STARTERS kind, starter options). Table and chart order.
COLD_DELAY_PEERS: dict[str, tuple[str, dict]] = {
    # today's path: the XDP cache stage, misses resolved in userspace (kernel iteration is
    # on by default: off here, explicitly)
    "xdns-xdp": ("xdns-xdp", {"extra": "kernel_iteration = false"}),
    # kernel iteration on by default, forwarding off: next hops from the daemon's table
    KITER: ("xdns-xdp", {"uplink": True}),
    # the same with forwarding on: next hops from bpf_fib_lookup
    KITER + "-fwd": ("xdns-xdp", {"extra": "kernel_iteration = true", "uplink": True, "forwarding": True,
                                  "uplink_forwarding": True}),
    "xdns": ("xdns", {}),
    # the same with another build (XDNS_BIN_BASE), to compare two binaries in one run
    KITER + "-base": ("xdns-xdp", {"extra": "kernel_iteration = true", "uplink": True, "forwarding": True,
                                   "uplink_forwarding": True, "bin": os.environ.get("XDNS_BIN_BASE")}),
    "unbound": ("unbound", {}),
    "kresd": ("kresd", {}),
    "pdns": ("pdns", {}),
}

RATES = [2_000, 4_000, 6_000, 8_000, 10_000, 12_500, 15_000, 17_500, 20_000, 25_000, 30_000,
         35_000, 40_000, 50_000, 60_000, 80_000]
# /proc/stat busy time is not reported when others kept the server CPU busier than this
# with the resolver idle (what is left after subtracting is noise).
BACKGROUND_MAX = 0.5
DURATION = 4.0
SAMPLES = 120
SMOKE = {"rates": [500], "duration": 1.0, "samples": 3}
ANSWERED_MIN = 0.99
CEILING_RATES = [10_000, 20_000, 30_000, 50_000, 100_000]


# ------------------------------------------------------------------ CPU accounting
def cpu_stat(cpu: int) -> tuple[int, int]:
    """(busy, total) clock ticks of one CPU from /proc/stat: busy = all but idle and iowait."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            f = [int(x) for x in line.split()[1:]]
            user, nice, system, idle, iowait, irq, softirq, steal = f[:8]
            busy = user + nice + system + irq + softirq + steal
            return busy, busy + idle + iowait
    raise KeyError(f"cpu{cpu} not in /proc/stat")


def task_ns(pids: list[int]) -> int:
    """CPU time, in ns, of every thread of the processes (schedstat: what the scheduler ran
    them for, softirq work done on their time included)."""
    total = 0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
        except FileNotFoundError:
            continue
        for t in tasks:
            try:
                total += int((t / "schedstat").read_text().split()[0])
            except (FileNotFoundError, IndexError, ValueError):
                pass
    return total


def background(seconds: float = 1.0) -> float:
    """Busy share of SERVER_CPU with the resolver idle: what others run there meanwhile."""
    b0 = cpu_stat(B.SERVER_CPU)
    time.sleep(seconds)
    b1 = cpu_stat(B.SERVER_CPU)
    return (b1[0] - b0[0]) / max(1, b1[1] - b0[1])


# --delay-misses: the misses/s ramp's names. "wildcard": new names under wild.example. (a
# wildcard A: NOERROR); "nxdomain": new names under good.lab. (NXDOMAIN, the SOA in authority:
# negative answers). Both one upstream query to leaf1 (Knot) each, delegation cached.
MISSES = "wildcard"
MISS_NAMES = {"wildcard": ("wild.example.", "NOERROR"), "nxdomain": ("good.lab.", "NXDOMAIN")}
NICE = 0  # --nice: niceness of everything the part runs (resolver, tree, relay, kxdpgun, NAPI)


def renice(pids: list[int]) -> None:
    """NICE for these threads and their scheduler autogroups: with autogroups on
    (kernel.sched_autogroup_enabled, the default), CPU time is first shared between sessions,
    and a thread's own niceness only counts within its session; the lab starts every
    server in a session of its own."""
    if NICE:
        for pid in pids:
            subprocess.run(["renice", "-n", str(NICE), "-p", str(pid)], capture_output=True)
            try:
                Path(f"/proc/{pid}/autogroup").write_text(str(NICE))
            except OSError:
                pass  # a kernel thread, or autogroups off


def pin_napi(lab: Lab, ns: str, dev: str, cpu: int) -> int:
    """Threaded NAPI on `dev` (it needs an XDP program to have NAPI), kthreads on `cpu`."""
    lab.ns_run(ns, ["sh", "-c", f"echo 1 > /sys/class/net/{dev}/threaded"], check=False)
    pids = B.napi_pids(lab, dev)
    for pid in pids:
        subprocess.run(["taskset", "-p", "-c", str(cpu), str(pid)], capture_output=True)
    renice(pids)
    return len(pids)


def pin_tree(lab: Lab, tree: T.Tree) -> None:
    """The tree's servers, the relay and the relay veths' NAPI threads on CLIENT_CPU."""
    for pid in tree.pids():
        for p in B.group_pids(pid) or [pid]:
            subprocess.run(["taskset", "-a", "-p", "-c", str(B.CLIENT_CPU), str(p)],
                           capture_output=True)
            renice([int(t.name) for t in Path(f"/proc/{p}/task").iterdir()])
    for dev in (tree.relay_a_if, tree.relay_b_if):
        pin_napi(lab, tree.relay_ns, dev, B.CLIENT_CPU)


def server_side(lab: Lab, tree: T.Tree, srv) -> list[int]:
    """Give both server-namespace veths NAPI (XDP_PASS unless the peer has its program
    there), pin their threads and the resolver to SERVER_CPU; the pids counted as `proc`."""
    for dev in (lab.server_if, tree.uplink_if):
        lab.xdp_pass(lab.server_ns, dev)
        pin_napi(lab, lab.server_ns, dev, B.SERVER_CPU)
    B.pin(srv.proc.pid, B.SERVER_CPU)
    for p in B.group_pids(srv.proc.pid):
        renice([int(t.name) for t in Path(f"/proc/{p}/task").iterdir()])
    return {"resolver": B.group_pids(srv.proc.pid),
            "napi": B.napi_pids(lab, lab.server_if) + B.napi_pids(lab, tree.uplink_if)}


def detach(lab: Lab, tree: T.Tree) -> None:
    for dev in (lab.server_if, tree.uplink_if):
        lab.server_run(["ip", "link", "set", "dev", dev, "xdp", "off"], check=False)


# ------------------------------------------------------------------ measurements
def latency(lab: Lab, tree: T.Tree, srv, samples: int, timed_ask, shapes) -> dict:
    cold, miss, failed, cold_at = [], [], 0, []
    # xdns's counters around each cold sample (outside the timed part): a slow sample that
    # waited for kernel iteration's timer (`timeout`), raced (`redundant_*`) or waited for an
    # upstream timeout of the resolver's own exchange (`resolver.upstream_timeouts`) shows here
    kit_keys = ("timeout", "redundant_sent", "redundant_won", "ring_full", "replies_spawned")
    res_keys = ("upstream_timeouts", "tcp_fallbacks", "rejected_replies", "servfails")

    def kit_of() -> dict:
        if srv.extra.get("kind") not in ("xdns", "xdns-xdp"):
            return {}
        st = lab.xdns_stats(srv)
        c = {k: v for k, v in st.get("kit", {}).items() if k in kit_keys}
        c.update({f"resolver.{k}": v for k, v in st.get("resolver", {}).items() if k in res_keys})
        return c
    cold_kit = []
    for i in range(samples):
        qname, qtype, _ = shapes[i % len(shapes)]
        T.flush(lab, srv)
        k0 = kit_of()
        ms, m = timed_ask(lab, srv.addr4, qname.format(i=f"d{i}"), qtype)
        k1 = kit_of()
        cold_kit.append({k: k1[k] - k0.get(k, 0) for k in k1 if k1[k] != k0.get(k, 0)})
        if m is not None and m.flags & dns.flags.RA and m.rcode() in (dns.rcode.NOERROR,
                                                                      dns.rcode.NXDOMAIN):
            cold.append(ms)
            cold_at.append((i, ms))
        else:
            failed += 1
    timed_ask(lab, srv.addr4, "prime.wild.example.", "A")
    for i in range(samples):
        ms, m = timed_ask(lab, srv.addr4, f"lat{i}.wild.example.", "A")
        if m is not None and m.rcode() == dns.rcode.NOERROR and m.answer:
            miss.append(ms)
        else:
            failed += 1

    def stats(xs):
        return {"n": len(xs), "mean": statistics.fmean(xs) if xs else None,
                "p50": B_pct(xs, 50), "p99": B_pct(xs, 99), "max": max(xs) if xs else None}
    # per shape (cold): where a slow tail comes from
    by_shape = {}
    for j, (qname, _, what) in enumerate(shapes):
        xs = [ms for i, ms in cold_at if i % len(shapes) == j]
        by_shape[what] = stats(xs)
    return {"cold": stats(cold), "miss": stats(miss), "failed": failed, "cold_by_shape": by_shape,
            "cold_ms": [round(ms, 2) for _, ms in cold_at], "cold_kit": cold_kit}


def B_pct(xs: list[float], p: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(round(p / 100 * len(s) + 0.5)) - 1))]


def miss_step(lab: Lab, addr: str, qfile: Path, duration: float, rate: int,
              pids: dict, bg: float) -> dict:
    """One kxdpgun run of unique names; CPU sampled over 25%..85% of it."""
    cmd = ["ip", "netns", "exec", lab.client_ns, "nice", "-n", str(NICE), "taskset", "-c",
           str(B.CLIENT_CPU), "kxdpgun", "-t", str(duration), "-Q", str(rate), "-b", "10",
           "-i", str(qfile), addr]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    time.sleep(0.25 * duration)
    b0, w0 = cpu_stat(B.SERVER_CPU), time.monotonic()
    p0 = {k: task_ns(v) for k, v in pids.items()}
    time.sleep(max(0.0, t0 + 0.85 * duration - time.monotonic()))
    b1, w1 = cpu_stat(B.SERVER_CPU), time.monotonic()
    p1 = {k: task_ns(v) for k, v in pids.items()}
    try:
        out, _ = p.communicate(timeout=duration + 30)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    queries, _, replies, rps = B.kxdpgun_summary(p.returncode, out)
    rcodes = kxdpgun_rcodes(out)
    resolved = rcodes.get(MISS_NAMES[MISSES][1], 0)
    hz = os.sysconf("SC_CLK_TCK")
    window = w1 - w0
    raw = (b1[0] - b0[0]) / hz
    busy = max(0.0, raw - bg * (w1 - w0))
    part = {k: (p1[k] - p0[k]) / 1e9 for k in pids}
    proc = sum(part.values())
    # misses resolved in the window, at the run's average reply rate times the NOERROR share
    # (every name is a wildcard: anything else, SERVFAIL of a full queue or quota, is no
    # resolution; with MISSES "nxdomain", the NXDOMAIN share)
    rps = int(rps * resolved / max(1, replies))
    misses = rps * window
    return {"rate": rate, "queries": queries, "replies": resolved, "all_replies": replies,
            "rcodes": rcodes, "replies_per_s": rps, "answered": resolved / max(1, queries),
            "any_reply": replies / max(1, queries),
            "cpu_busy": busy / window, "cpu_raw_busy": raw / window, "background": bg,
            "proc_busy": proc / window,
            "cpu_us_per_miss": busy * 1e6 / misses if misses and bg <= BACKGROUND_MAX else None,
            "cpu_raw_us_per_miss": raw * 1e6 / misses if misses else None,
            "proc_us_per_miss": proc * 1e6 / misses if misses else None,
            # the two parts of proc: the resolver's threads, its veths' NAPI threads
            **{f"{k}_us_per_miss": v * 1e6 / misses if misses else None for k, v in part.items()}}


def kxdpgun_rcodes(out: str) -> dict[str, int]:
    """kxdpgun's "responded RCODE: N" lines."""
    import re
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"responded (\w+):\s*(\d+)", out)}


def misses_per_s(lab: Lab, srv, pids: dict, rates: list[int], duration: float,
                 tag: str) -> list[dict]:
    steps = []
    bg = background(0.3 if duration < 2 else 1.0)
    print(f"    server CPU busy with the resolver idle: {100 * bg:.0f}% (subtracted"
          f"{'' if bg <= BACKGROUND_MAX else '; too busy: /proc/stat per miss not reported'})",
          flush=True)
    for j, rate in enumerate(rates):
        qfile = lab.dir / f"delay-{tag}-{j}.txt"
        n = int(rate * duration * 1.1) + 100
        zone = MISS_NAMES[MISSES][0]
        qfile.write_text("".join(f"{tag}{j}x{i}.{zone} A\n" for i in range(n)))
        st = miss_step(lab, srv.addr4, qfile, duration, rate, pids, bg)
        if st["answered"] < ANSWERED_MIN:
            # once more with new names: a step lost to someone else's burst on the shared
            # machine should not end the ramp
            print(f"    {rate:>6}/s offered: {100 * st['answered']:5.1f}% resolved "
                  f"({100 * st['any_reply']:5.1f}% any reply); again",
                  flush=True)
            time.sleep(1.0)
            qfile.write_text("".join(f"{tag}{j}y{i}.{zone} A\n" for i in range(n)))
            st = miss_step(lab, srv.addr4, qfile, duration, rate, pids, bg)
        qfile.unlink()
        if not srv.alive():
            raise RuntimeError(f"{srv.name} died at {rate}/s:\n{srv.stderr()[-2000:]}")
        steps.append(st)
        print(f"    {rate:>6}/s offered: {100 * st['answered']:5.1f}% resolved "
              f"({100 * st['any_reply']:5.1f}% any reply), "
              f"{st['replies_per_s']}/s, server CPU {100 * st['cpu_raw_busy']:.0f}% "
              f"(net {100 * st['cpu_busy']:.0f}%, proc {100 * st['proc_busy']:.0f}%), "
              f"{st['cpu_us_per_miss'] if st['cpu_us_per_miss'] is not None else '-':.4} us/miss "
              f"(proc {st['proc_us_per_miss'] or 0:.1f} = resolver "
              f"{st['resolver_us_per_miss'] or 0:.1f} + NAPI {st['napi_us_per_miss'] or 0:.1f})",
              flush=True)
        if st["answered"] < ANSWERED_MIN:
            break
        time.sleep(0.5)  # let stragglers drain before the next step
    return steps


def cold_delay(lab: Lab, peers: list[str], smoke: bool, timed_ask, shapes,
               samples: int | None = None, rates: list[int] | None = None) -> dict:
    """`samples`, `rates`: other than SAMPLES and RATES (--delay-samples, --delay-rates)."""
    cfg = dict(SMOKE) if smoke else {"rates": RATES, "duration": DURATION, "samples": SAMPLES}
    if samples is not None:
        cfg["samples"] = samples
    if rates is not None:
        cfg["rates"] = rates
    old_nice = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, NICE or old_nice)  # this process: the latency asks
    renice([os.getpid()])
    try:
        return _cold_delay(lab, peers, cfg, timed_ask, shapes)
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, old_nice)


def _cold_delay(lab: Lab, peers: list[str], cfg: dict, timed_ask, shapes) -> dict:
    tree = T.Tree(lab, name="tree-remote", remote=True, delay_ms=DELAY_MS).start()
    pin_tree(lab, tree)
    lab.client_xdp_pass()
    pin_napi(lab, lab.client_ns, lab.client_if, B.CLIENT_CPU)
    out = {}
    for name in peers:
        kind, opts = COLD_DELAY_PEERS[name]
        srv = T.STARTERS[kind](lab, tree, name=f"{name}-delay", **opts)
        try:
            pids = server_side(lab, tree, srv)
            print(f"  {name}: latency ({cfg['samples']} cold, {cfg['samples']} misses)", flush=True)
            lat = latency(lab, tree, srv, cfg["samples"], timed_ask, shapes)
            print(f"  {name}: misses/s", flush=True)
            steps = misses_per_s(lab, srv, pids, cfg["rates"], cfg["duration"],
                                 name.replace("-", "")) if cfg["rates"] else []
        finally:
            if srv.alive():
                T.stop(lab, srv)
            detach(lab, tree)
        ok = [s for s in steps if s["answered"] >= ANSWERED_MIN]
        best = max(ok, key=lambda s: s["rate"]) if ok else None
        out[name] = {"latency": lat, "steps": steps,
                     "sustained_rate": best["rate"] if best else 0,
                     "sustained_replies_per_s": best["replies_per_s"] if best else 0,
                     "limited_by_rates": bool(best) and best["rate"] == cfg["rates"][-1],
                     "cpu_us_per_miss_best": best["cpu_us_per_miss"] if best else None,
                     "proc_us_per_miss_best": best["proc_us_per_miss"] if best else None}
    # The reference rate: the highest step every peer sustained (so CPU per miss is compared
    # at one load), else the first.
    common = [r for r in cfg["rates"] if all(
        any(s["rate"] == r and s["answered"] >= ANSWERED_MIN for s in p["steps"])
        for p in out.values())]
    ref_rate = max(common) if common else (cfg["rates"][0] if cfg["rates"] else None)
    for p in out.values():
        ref = next((s for s in p["steps"] if s["rate"] == ref_rate), None)
        p["cpu_us_per_miss_ref"] = ref["cpu_us_per_miss"] if ref else None
        p["proc_us_per_miss_ref"] = ref["proc_us_per_miss"] if ref else None
        p["resolver_us_per_miss_ref"] = ref["resolver_us_per_miss"] if ref else None
        p["napi_us_per_miss_ref"] = ref["napi_us_per_miss"] if ref else None
        p["ref_answered"] = ref["answered"] if ref else None
    relay = tree.relay_counters()
    return {"delay_ms": DELAY_MS, "ref_rate": ref_rate, "rates": cfg["rates"],
            "duration": cfg["duration"], "samples": cfg["samples"], "peers": out, "relay": relay}


# ------------------------------------------------------------------ relay ceiling
def relay_ceiling(lab: Lab, smoke: bool) -> dict:
    """kxdpgun (server namespace, uplink) -> relay -> no-op XDP bounce on the tree's veth."""
    tree = T.Tree(lab, name="tree-ceiling", remote=True, delay_ms=DELAY_MS)
    tree.hosts = {"root1": tree.hosts["root1"]}  # one address to aim at; no servers started
    tree.delay_ms = {"root1": DELAY_MS}
    tree.dir.mkdir(parents=True, exist_ok=True)
    tree._remote_up()
    h = tree.hosts["root1"]
    h.addr4, h.addr6 = tree._tree_address()
    tree._start_relay()
    obj = lab.dir / "noop_xdp.o"
    if not obj.exists():
        run(["clang", "-O2", "-g", "-Wall", "-Werror", "-target", "bpf", *B._bpf_includes(),
             "-c", B.NOOP_SRC, "-o", obj])
    lab.ns_run(tree.ns, ["ip", "link", "set", "dev", tree.tree_if, "xdpdrv", "obj", obj,
                         "sec", "xdp"])
    lab.xdp_pass(lab.server_ns, tree.uplink_if)
    pin_napi(lab, lab.server_ns, tree.uplink_if, B.SERVER_CPU)
    for dev in (tree.relay_a_if, tree.relay_b_if):
        pin_napi(lab, tree.relay_ns, dev, B.CLIENT_CPU)
    pin_napi(lab, tree.ns, tree.tree_if, B.CLIENT_CPU)
    B.pin(tree.relay.pid, B.CLIENT_CPU)
    # Resolve the gateway's MAC once (kxdpgun reads the neighbour table).
    lab.server_run(["ping", "-c", "1", "-W", "1", tree.gateway4], check=False)
    qfile = lab.dir / "ceiling.txt"
    qfile.write_text("".join(f"c{i}.wild.example. A\n" for i in range(1000)))
    rates = [CEILING_RATES[0] // 10] if smoke else CEILING_RATES
    duration = 1.0 if smoke else 3.0
    steps = []
    relay_pids = [tree.relay.pid]
    for rate in rates:
        cmd = ["ip", "netns", "exec", lab.server_ns, "taskset", "-c", str(B.SERVER_CPU),
               "kxdpgun", "-t", str(duration), "-Q", str(rate), "-b", "10", "-F", str(B.SERVER_CPU),
               "-I", tree.uplink_if, "-i", str(qfile), h.addr4]
        c0 = tree.relay_counters()
        t0 = task_ns(relay_pids)
        w0 = time.monotonic()
        p = run(cmd, check=False, timeout=duration + 30)
        w1 = time.monotonic()
        c1 = tree.relay_counters()
        queries, _, replies, rps = B.kxdpgun_summary(p.returncode, p.stdout + p.stderr)
        frames = (c1["a_to_b_frames"] - c0["a_to_b_frames"]) + (c1["b_to_a_frames"] - c0["b_to_a_frames"])
        cpu = (task_ns(relay_pids) - t0) / 1e9
        st = {"rate": rate, "queries": queries, "replies": replies,
              "replies_per_s": rps, "answered": replies / max(1, queries),
              "relay_frames": frames, "relay_cpu_s": cpu, "wall_s": w1 - w0,
              "relay_us_per_frame": cpu * 1e6 / frames if frames else None,
              "max_held": c1["max_held"],
              "rx_drops": (c1["rx_drops_a"] + c1["rx_drops_b"])}
        steps.append(st)
        print(f"  relay: {rate:>7}/s offered, {st['replies_per_s']}/s back "
              f"({100 * st['answered']:.1f}%), relay CPU {cpu:.2f} s for {frames} frames "
              f"= {st['relay_us_per_frame'] or 0:.2f} us/frame, kernel drops {st['rx_drops']}",
              flush=True)
    best = max((s for s in steps if s["answered"] >= ANSWERED_MIN), key=lambda s: s["rate"],
               default=None)
    per_frame = [s["relay_us_per_frame"] for s in steps if s["relay_us_per_frame"]]
    return {"delay_ms": DELAY_MS, "steps": steps,
            "sustained_queries_per_s": best["rate"] if best else 0,
            "us_per_frame": min(per_frame) if per_frame else None,
            # one CPU's worth of frames, and misses (4 frames each: query and reply, in and out)
            "frames_per_cpu_s": 1e6 / min(per_frame) if per_frame else None}


# ------------------------------------------------------------------ report
def summary(cd: dict) -> dict:
    p = cd.get("peers", {})

    def div(a, b):
        return a / b if a and b else None
    g = lambda n, k: p.get(n, {}).get(k)  # noqa: E731
    return {
        "kiter_cpu_per_miss_vs_xdns": div(g(KITER, "cpu_us_per_miss_ref"), g(BASELINE, "cpu_us_per_miss_ref")),
        "kiter_proc_per_miss_vs_xdns": div(g(KITER, "proc_us_per_miss_ref"), g(BASELINE, "proc_us_per_miss_ref")),
        "baseline_proc_per_miss_vs_unbound": div(g(BASELINE, "proc_us_per_miss_ref"),
                                                 g("unbound", "proc_us_per_miss_ref")),
        "kiter_misses_vs_unbound": div(g(KITER, "sustained_replies_per_s"), g("unbound", "sustained_replies_per_s")),
        "baseline_misses_vs_unbound": div(g(BASELINE, "sustained_replies_per_s"),
                                          g("unbound", "sustained_replies_per_s")),
        "baseline_cpu_per_miss_vs_unbound": div(g(BASELINE, "cpu_us_per_miss_ref"),
                                                g("unbound", "cpu_us_per_miss_ref")),
        "xdns_cpu_per_miss_vs_baseline": div(g("xdns", "cpu_us_per_miss_ref"),
                                             g(BASELINE, "cpu_us_per_miss_ref")),
    }


def report(cd: dict, ceiling: dict, smoke: bool) -> dict:
    f = lambda v, fmt="{:.1f}": fmt.format(v) if v is not None else "-"  # noqa: E731
    sm = {}
    if cd:
        print(f"\n== cold cache over the remote tree, {cd['delay_ms']:g} ms one-way per server "
              f"(+{2 * cd['delay_ms']:g} ms per upstream round trip)")
        print(f"{'resolver':10} {'cold mean':>9} {'cold p99':>9} {'miss mean':>9} {'miss p99':>9} "
              f"{'misses/s':>9} {'us/miss@' + str(cd['ref_rate']):>12} {'proc':>6} "
              f"{'us/miss@max':>11} {'proc':>6}")
        for n, r in cd["peers"].items():
            lat = r["latency"]
            rate = f"{r['sustained_replies_per_s']}{'+' if r['limited_by_rates'] else ''}"
            print(f"{n:10} {f(lat['cold']['mean']):>9} {f(lat['cold']['p99']):>9} "
                  f"{f(lat['miss']['mean']):>9} {f(lat['miss']['p99']):>9} {rate:>9} "
                  f"{f(r['cpu_us_per_miss_ref']):>12} {f(r['proc_us_per_miss_ref']):>6} "
                  f"{f(r['cpu_us_per_miss_best']):>11} {f(r['proc_us_per_miss_best']):>6}")
        for n, r in cd["peers"].items():
            bs = r["latency"].get("cold_by_shape", {})
            print(f"  {n} cold by shape, mean/max ms: " + ", ".join(
                f"{w.split(' (')[-1].rstrip(')')} {f(x['mean'])}/{f(x['max'])}" for w, x in bs.items()))
            ck = r["latency"].get("cold_kit", [])
            if any(ck):
                tot = {}
                for d in ck:
                    for k, v in d.items():
                        tot[k] = tot.get(k, 0) + v
                slow = [(i, d) for i, d in enumerate(ck) if d.get("timeout") or d.get("resolver.upstream_timeouts")]
                print(f"  {n} counters moved during the cold samples: {tot} (samples that waited "
                      f"for a timeout: {slow})")
        print("(latency in ms from the client namespace, one query at a time; cold: caches flushed, "
              "3-6 zones from the root;\n miss: delegations cached, one upstream query. misses/s: "
              "NOERROR replies/s at the highest offered rate with >= 99% resolved\n (+: every rate tried "
              "was sustained). us/miss: busy time of the server CPU (/proc/stat) per resolved miss, "
              "at\n the reference rate and at the peer's highest sustained rate; proc: the "
              "resolver's threads + its veths' NAPI threads only)")
        print(f"proc per miss at {cd['ref_rate']}/s, split: " + ", ".join(
            f"{n} {f(r.get('resolver_us_per_miss_ref'))} + {f(r.get('napi_us_per_miss_ref'))}"
            for n, r in cd["peers"].items()) + "  (resolver threads + NAPI threads, us)")
        c = cd.get("relay", {})
        print(f"relay: {c.get('a_to_b_frames')} frames to the tree, {c.get('b_to_a_frames')} back, "
              f"at most {c.get('max_held')} held, kernel drops {c.get('rx_drops_a', 0) + c.get('rx_drops_b', 0)}, "
              f"send errors {c.get('send_errors')}")
        sm = summary(cd)
        print("\n== issue 32 goals (reported, not asserted)")
        print(f"xdns-kiter / xdns-xdp, CPU per miss          "
              f"{B.goal(sm['kiter_cpu_per_miss_vs_xdns'], GOAL_CPU_PER_MISS_VS_XDNS, higher_is_better=False)}")
        print(f"  same, resolver + NAPI threads only         "
              f"{B.goal(sm['kiter_proc_per_miss_vs_xdns'], GOAL_CPU_PER_MISS_VS_XDNS, higher_is_better=False)}")
        print(f"xdns-kiter / unbound, misses/s               "
              f"{B.goal(sm['kiter_misses_vs_unbound'], GOAL_MISSES_VS_UNBOUND)}")
        print(f"  today: xdns-xdp / unbound, misses/s        {B.ratio(sm['baseline_misses_vs_unbound'], 1)}")
        print(f"  today: xdns-xdp / unbound, CPU per miss    {B.ratio(sm['baseline_cpu_per_miss_vs_unbound'], 1)}")
        print(f"  today: same, resolver + NAPI threads only  {B.ratio(sm['baseline_proc_per_miss_vs_unbound'], 1)}")
        print(f"  today: xdns / xdns-xdp, CPU per miss       {B.ratio(sm['xdns_cpu_per_miss_vs_baseline'], 1)}")
    if ceiling:
        print(f"\n== the relay alone ({ceiling['delay_ms']:g} ms each way; kxdpgun -> relay -> "
              "no-op XDP bounce -> relay)")
        for s in ceiling["steps"]:
            print(f"  {s['rate']:>7}/s offered: {s['replies_per_s']:>7}/s back "
                  f"({100 * s['answered']:.1f}%), {f(s['relay_us_per_frame'], '{:.2f}')} us of relay "
                  f"CPU per frame, drops {s['rx_drops']}")
        print(f"  ceiling: {f(ceiling['frames_per_cpu_s'], '{:,.0f}')} frames per relay CPU-second "
              f"= {f(ceiling['frames_per_cpu_s'] and ceiling['frames_per_cpu_s'] / 4, '{:,.0f}')} "
              "misses/s (4 frames per miss)")
    if smoke and (cd or ceiling):
        print("(smoke mode: one low rate, few samples; the numbers are not meaningful)")
    return sm


def chart(cd: dict, sm: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = list(cd["peers"])
    rs = [cd["peers"][n] for n in names]
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(17, 4.8))
    xs = range(len(names))
    w = 0.2
    for j, (what, stat, c) in enumerate((("cold", "mean", "tab:blue"), ("cold", "p99", "lightsteelblue"),
                                         ("miss", "mean", "tab:purple"), ("miss", "p99", "thistle"))):
        vs = [r["latency"][what][stat] or 0 for r in rs]
        pos = [x + (j - 1.5) * w for x in xs]
        ax1.bar(pos, vs, width=w, color=c, label=f"{what} {stat}")
        for x, v in zip(pos, vs):
            ax1.text(x, v, f"{v:.0f}", ha="center", va="bottom", fontsize=6)
    ax1.set_xticks(list(xs), names)
    ax1.set_ylabel("ms")
    ax1.legend(fontsize=7)
    ax1.set_title(f"resolution latency, {cd['delay_ms']:g} ms one-way per server")
    vals = [r["sustained_replies_per_s"] / 1e3 for r in rs]
    ax2.bar(names, vals, color=[B.peer_color(n) for n in names])
    for i, (v, r) in enumerate(zip(vals, rs)):
        ax2.text(i, v, f"{v:.1f}k{'+' if r['limited_by_rates'] else ''}", ha="center", va="bottom",
                 fontsize=8)
    ax2.set_ylim(0, max(vals + [0.001]) * 1.3)
    ax2.set_ylabel("thousand misses/s (>= 99% resolved)")
    ax2.set_title("cache misses per second (delegation cached)")
    if sm.get("baseline_misses_vs_unbound"):
        ax2.text(0.01, 0.97, f"xdns-xdp = {sm['baseline_misses_vs_unbound']:.2f}x unbound "
                 f"(goal for xdns-kiter: >= {GOAL_MISSES_VS_UNBOUND}x)", transform=ax2.transAxes,
                 va="top", fontsize=8)
    ref = [r["cpu_us_per_miss_ref"] for r in rs]
    proc = [r["proc_us_per_miss_ref"] or 0 for r in rs]
    res = [r.get("resolver_us_per_miss_ref") or 0 for r in rs]
    napi = [r.get("napi_us_per_miss_ref") or 0 for r in rs]
    colors = [B.peer_color(n) for n in names]
    ax3.bar([x - 0.2 for x in xs], [v or 0 for v in ref], width=0.4, color=colors,
            label="server CPU busy (/proc/stat)")
    ax3.bar([x + 0.2 for x in xs], res, width=0.4, color=colors, alpha=0.6, hatch="//",
            label="resolver threads")
    ax3.bar([x + 0.2 for x in xs], napi, width=0.4, bottom=res, color=colors, alpha=0.3,
            hatch="..", label="its veths' NAPI threads")
    for i, (a, b) in enumerate(zip(ref, proc)):
        ax3.text(i - 0.2, a or 0, f"{a:.0f}" if a is not None else "n/a", ha="center",
                 va="bottom", fontsize=7)
        ax3.text(i + 0.2, b, f"{b:.0f}", ha="center", va="bottom", fontsize=7)
    ax3.set_xticks(list(xs), names)
    ax3.set_ylabel("us of CPU per miss")
    ax3.legend(fontsize=7, loc="upper right")
    ax3.set_title(f"CPU per miss at {cd['ref_rate']}/s (xdns-kiter goal: "
                  f"<= {GOAL_CPU_PER_MISS_VS_XDNS}x {BASELINE})")
    ax3.set_ylim(0, max([v or 0 for v in ref] + proc + [1]) * 1.4)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
