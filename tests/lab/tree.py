"""A fake DNS tree in the netns lab, and starters for real recursive resolvers on top of it.

    from lab import Lab
    from tree import Tree, start_unbound, start_kresd, start_pdns, start_xdns_resolver

    with Lab() as lab:
        tree = Tree(lab).start()                 # ~10 authoritative servers, root hints written
        unbound = start_unbound(lab, tree)       # listens on its own 198.18.X.N / 2001:db8:X::N
        wire = lab.udp(unbound.addr4, query)     # ask it from the client namespace
        flush(lab, unbound)                      # empty its caches (cold resolution again)
        tree.set_record("flip.short.lab.", "A", "198.19.70.2")   # change data, reload
        stop(lab, unbound)

Everything lives in the lab's server namespace: each authoritative "host" below gets its own
address pair from `Lab.new_address()` (198.18.X.N/24, 2001:db8:X::N/64), zone files are
generated into the lab's temporary directory (the addresses differ per run), and every process
is started through `Lab.server`, so `Lab.close()` stops it. The server namespace has no default
route: a resolver that tried to reach a real root server would get ENETUNREACH; besides, the only
hints any starter gives are `tree.root_hints` (the lab's roots).

Remote tree (`Tree(lab, remote=True, delay_ms=...)`): the same hosts, zones and helper
processes, in a namespace of their own, reached from the server namespace through a veth
pair with routes and a delaying relay on the path:

    [server netns] xt<id> 198.18.L.1/24 2001:db8:L::1/64; routes 198.18.T.0/24, 2001:db8:T::/64
          |                                                  via 198.18.L.2 / 2001:db8:L::2
    [relay netns]  xa<id> ==(xdns-lab-delay)== xb<id>       no addresses: an Ethernet bridge
          |
    [tree netns]   xn<id> 198.18.L.2/24 2001:db8:L::2/64; default routes via .1 / ::1
                   lo: 198.18.T.N/32, 2001:db8:T::N/128 (one pair per host, N = 2, 3, ...)

(L and T: two more of the lab's /24s and /64s.) The relay (crates/xdns-lab-delay, run in the
lab's directory as <tree name>-relay) copies every frame from one veth to the other after the
one-way delay of the host it is to or from, so a round trip to a host with delay d takes 2d
longer; everything else (ARP, neighbour discovery, TCP, the spoofer's forgeries, MAC
addresses) passes unchanged: a resolver sees the hosts' real addresses and ports. The
relay's veths carry an XDP_PASS program (lab.py's veth rule: native XDP_TX or a redirect out
of xt reaches the relay only so), so a resolver's XDP program on xt (`Tree.uplink_if`) can
send upstream queries itself, addressed with `bpf_fib_lookup` to the gateway's MAC, and a
10000-frame pfifo qdisc (the relay releases frames in bursts; a full XDP ring on the far side
then pushes back instead of dropping; XDP_TX into a full ring still drops). The
server namespace still has no default route; `Tree.udp` asks a tree host from the server
namespace (the client namespace has no route to the tree). This kernel has no netem qdisc
(`tc qdisc add ... netem` says "Specified qdisc kind is unknown"), hence the relay.

The tree (host: software, zones; "glue" = address records in the parent; data addresses in
198.19.0.0/16 and 2001:db8:f00d::/48 are data only, never contacted):

    .                          root1 (Knot) a.root-servers.lab, root2 (NSD) b.root-servers.lab
    ├── lab.                   tld-lab (NSD) ns1.nic.lab                       -- one server
    │   ├── good.lab.          leaf1 (Knot) ns1.good.lab (glue): MX, TXT, AAAA, ENT ent.good.lab
    │   │                        alias    → CNAME www.other.example.            (cross-TLD)
    │   │                        chain1   → chain2.other.example → chain3.glueless.lab → chain4.good.lab
    │   │                        dangling → CNAME nothere.other.example         (→ NXDOMAIN)
    │   ├── glueless.lab.      leaf2 (NSD) via NS ns1.dns-host.example.        -- glueless, other TLD
    │   ├── short.lab.         leaf1 (Knot) every TTL 2 s, SOA minimum 2 s     -- expiry, prefetch
    │   ├── medium.lab.        leaf1 (Knot) every TTL 12 s: hot0..hot7 A       -- prefetch benchmark
    │   ├── slow.lab.          NS ns1 = blackhole (reads, never answers), ns2 = leaf1
    │   ├── dead.lab.          NS ns1 = blackhole only: a zone whose server never answers
    │   ├── tarpit.lab.        NS ns1 = tarpit: answers every name (A 198.19.90.1, other
    │   │                        types NODATA) after TARPIT_DELAY_MS: a slow zone
    │   ├── spoof.lab.         NS ns1 = spoofer, ns2 = leaf2: forged ID, port, address, question
    │   ├── spoofonly.lab.     NS ns1 = spoofer only:         forged ID, port, address
    │   └── case-spoof.lab.    NS ns1 = spoofer, ns2 = leaf2: forged 0x20 case
    └── example.               tld-ex1 (Knot) ns1.nic.example, tld-ex2 (NSD) ns2.nic.example
        │                                                                      -- two servers
        ├── other.example.     leaf2 (NSD) ns1.other.example (glue)
        ├── dns-host.example.  leaf2 (NSD) ns1.dns-host.example (glue)         -- hosts glueless.lab
        ├── glueless.example.  leaf1 (Knot) via NS ns2.good.lab.               -- glueless, other TLD
        └── wild.example.      leaf1 (Knot) *.wild A+TXT, explicit, sub (blocks the *),
                                            *.cname → CNAME www.good.lab

The TLD is `lab.`, not `test.`: Unbound and Knot Resolver treat test. as special-use (RFC 6761)
and answer it locally with NXDOMAIN, whatever the root hints say.

NXDOMAIN exists at every level (`nosuchtld.`, `nosuch.lab.`, `nosuch.good.lab.`), NODATA at
leaves, the ENT `ent.good.lab.` and wildcards.

The spoofer (`python3 tree.py spoofer ...`, run in the server namespace) is a man-on-the-side:
for each UDP query it fetches the genuine reply from leaf2 and then sends, in this order,
forged replies carrying poison (A 198.19.255.66, AAAA 2001:db8:bad::66, TXT "poisoned", other
types NXDOMAIN) and finally the genuine reply. What it forges depends on the zone of the name:

    spoof.lab.        ID+1 from the right socket; right ID from port 5300; right ID from another
                      address (spoof2); right ID with another question name. A resolver may wait
                      for the genuine reply or give up on this server and ask leaf2.
    spoofonly.lab.    ID+1, port 5300, other address only: the resolver has no other server, so
                      it must keep waiting on its socket and take the genuine reply.
    case-spoof.lab.   right ID/port/address with the question's letter case swapped: only a
                      resolver that randomises and checks 0x20 case can tell it apart.

TCP queries to the spoofer are relayed honestly. The blackhole (`python3 tree.py blackhole`)
binds UDP and TCP port 53 and never answers (TCP connections are left in the backlog). The
tarpit (`python3 tree.py tarpit ADDR4 ADDR6 DELAY_MS`) answers UDP only, each reply sent
DELAY_MS after its query (one thread, a queue ordered by due time: thousands per second).
"""

from __future__ import annotations

import ipaddress
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab import write_knot_conf, write_nsd_conf, write_unbound_conf  # noqa: E402

PY = "/usr/bin/python3"
RELAY_BIN = Path(os.environ.get("XDNS_LAB_DELAY_BIN",
                                Path(__file__).resolve().parents[2] / "target" / "release" / "xdns-lab-delay"))

# Poison the spoofer puts in forged replies; a resolver answer containing it was poisoned.
POISON_A = "198.19.255.66"
POISON_AAAA = "2001:db8:bad::66"
POISON_TXT = '"poisoned"'

SHORT_TTL = 2  # seconds: every TTL in short.lab., and its negative TTL
# seconds: every TTL in medium.lab. (and its negative TTL), long enough for a prefetch window
# (10 % = 1.2 s) that a client population polling a hot set is sure to hit.
MEDIUM_TTL = 12
MEDIUM_HOT = [f"hot{i}.medium.lab." for i in range(8)]  # A 198.19.71.<i + 1>
TARPIT_DELAY_MS = 300  # every tarpit.lab. reply waits this long (below upstream timeouts)
TARPIT_A = "198.19.90.1"


@dataclass
class Host:
    """One authoritative name server host of the tree."""

    name: str           # "root1", "leaf1", ...
    software: str       # "knot" | "nsd" | "blackhole" | "spoofer"
    zones: list[str]    # origins served (the spoofer relays, the blackhole serves nothing)
    addr4: str = ""
    addr6: str = ""
    workdir: Path | None = None
    proc: subprocess.Popen | None = None
    extra: dict = field(default_factory=dict)


# host name -> (software, zones). Parent and child never share a host, so every delegation is
# really followed.
HOSTS: dict[str, tuple[str, list[str]]] = {
    "root1": ("knot", ["."]),
    "root2": ("nsd", ["."]),
    "tld-lab": ("nsd", ["lab."]),
    "tld-ex1": ("knot", ["example."]),
    "tld-ex2": ("nsd", ["example."]),
    "leaf1": ("knot", ["good.lab.", "glueless.example.", "wild.example.", "slow.lab.", "short.lab.",
                       "medium.lab."]),
    "leaf2": ("nsd", ["other.example.", "dns-host.example.", "glueless.lab.", "spoof.lab.",
                      "spoofonly.lab.", "case-spoof.lab."]),
    "blackhole": ("blackhole", []),
    "spoofer": ("spoofer", []),
    "spoof2": ("spoof2", []),  # second address of the spoofer (forged "wrong source address")
    "tarpit": ("tarpit", []),  # tarpit.lab.: answers everything, slowly (not a zone file)
}

# Spoofer modes by zone (longest suffix wins).
SPOOF_MODES = {
    "spoof.lab.": ["id", "port", "addr", "question"],
    "spoofonly.lab.": ["id", "port", "addr"],
    "case-spoof.lab.": ["case"],
}


def _file_name(origin: str) -> str:
    return "root.zone" if origin == "." else f"{origin.rstrip('.')}.zone"


class Tree:
    """The fake DNS tree. `start()` allocates addresses, writes zones and root hints, starts
    every server and waits until each answers SOA for each of its zones.

    `remote=True` puts the tree in its own namespace behind a delaying relay (module doc,
    "Remote tree"); `delay_ms` is then the one-way delay of every host (a number) or of the
    hosts named (a dict, others 0)."""

    def __init__(self, lab, name: str = "tree", remote: bool = False,
                 delay_ms: float | dict[str, float] = 0.0):
        self.lab = lab
        self.dir = Path(lab.dir) / name
        self.hosts: dict[str, Host] = {n: Host(n, sw, list(z)) for n, (sw, z) in HOSTS.items()}
        self.root_hints = self.dir / "root.hints"
        self.serials: dict[str, int] = {}
        self.overrides: dict[str, dict[tuple[str, str], list[str]]] = {}
        self.started = False
        self.remote = remote
        if not remote and delay_ms:
            raise ValueError("delay_ms needs remote=True (the relay is on the remote tree's path)")
        if isinstance(delay_ms, dict):
            unknown = set(delay_ms) - set(self.hosts)
            if unknown:
                raise KeyError(f"delay_ms: no such tree host {sorted(unknown)}")
            self.delay_ms = {h: float(delay_ms.get(h, 0.0)) for h in self.hosts}
        else:
            self.delay_ms = {h: float(delay_ms) for h in self.hosts}
        # Where the tree's processes run: the server namespace, or the tree's own.
        self.ns = lab.server_ns
        self.relay = None  # the relay's Popen (remote)
        if remote:
            # k-th remote tree of this lab (names and subnets differ per tree)
            k = getattr(lab, "_remote_trees", 0)
            lab._remote_trees = k + 1
            sfx = str(k) if k else ""
            base = lab.server_ns.rsplit("-", 1)[0]
            self.ns = f"{base}-t{sfx}"          # the authoritative servers
            self.relay_ns = f"{base}-d{sfx}"    # the relay (a bridge with no addresses)
            self.uplink_if = f"xt{sfx}{lab.id}"[:15]   # server namespace -> relay
            self.relay_a_if = f"xa{sfx}{lab.id}"[:15]  # relay, facing the server namespace
            self.relay_b_if = f"xb{sfx}{lab.id}"[:15]  # relay, facing the tree
            self.tree_if = f"xn{sfx}{lab.id}"[:15]     # tree namespace -> relay
            link = (lab.x + 128 + 16 * k) % 512
            tree = (lab.x + 384 + 16 * k) % 512
            self.link_net4 = f"198.{18 + link // 256}.{link % 256}"
            self.link_net6 = f"2001:db8:{link:x}"
            self.net4 = f"198.{18 + tree // 256}.{tree % 256}"
            self.net6 = f"2001:db8:{tree:x}"
            v6 = lambda net, n: str(ipaddress.IPv6Address(f"{net}::{n:x}"))  # noqa: E731
            self.uplink_addr4, self.uplink_addr6 = f"{self.link_net4}.1", v6(self.link_net6, 1)
            self.gateway4, self.gateway6 = f"{self.link_net4}.2", v6(self.link_net6, 2)
            self._next_host = 2

    # ------------------------------------------------------------ public API
    def start(self) -> "Tree":
        # Resolvers started on the tree must have no way out of the lab.
        routes = self.lab.server_run(["ip", "route", "show", "default"]).stdout + \
            self.lab.server_run(["ip", "-6", "route", "show", "default"]).stdout
        if routes.strip():
            raise RuntimeError(f"server namespace has a default route: {routes}")
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.remote:
            self._remote_up()
        for h in self.hosts.values():
            h.addr4, h.addr6 = self._tree_address() if self.remote else self.lab.new_address()
            h.workdir = self.dir / h.name
            h.workdir.mkdir(exist_ok=True)
        if self.remote:
            self._start_relay()
        for origin in self.zones():
            self.serials[origin] = 1
            self._write_zone(origin)
        self.root_hints.write_text(self.root_hints_text())
        # Servers first, then the spoofer (it relays to leaf2).
        for h in self.hosts.values():
            if h.software == "knot":
                self._start_knot(h)
            elif h.software == "nsd":
                self._start_nsd(h)
        for h in self.hosts.values():
            if h.software in ("knot", "nsd"):
                for origin in h.zones:
                    self._wait(h, origin)
        self._start_blackhole(self.hosts["blackhole"])
        self._start_tarpit(self.hosts["tarpit"])
        self._start_spoofer(self.hosts["spoofer"])
        self.started = True
        return self

    def zones(self) -> list[str]:
        return sorted({z for h in self.hosts.values() for z in h.zones}, key=lambda z: z.count("."))

    def host_of(self, origin: str) -> list[Host]:
        return [h for h in self.hosts.values() if origin in h.zones]

    def addr(self, host: str) -> tuple[str, str]:
        h = self.hosts[host]
        return h.addr4, h.addr6

    def root_hints_text(self) -> str:
        out = ["; root hints of the xdns lab tree (generated by tests/lab/tree.py)"]
        for letter, host in (("a", "root1"), ("b", "root2")):
            h = self.hosts[host]
            out.append(f".                       3600000 IN NS   {letter}.root-servers.lab.")
            out.append(f"{letter}.root-servers.lab.  3600000 IN A    {h.addr4}")
            out.append(f"{letter}.root-servers.lab.  3600000 IN AAAA {h.addr6}")
        return "\n".join(out) + "\n"

    def set_record(self, owner: str, rtype: str, *rdata: str) -> None:
        """Replace the RRset (owner, rtype) in its zone (rdata empty: delete it), bump the
        serial and make every server of the zone load it; returns when all serve the new serial."""
        self.set_records([(owner, rtype, list(rdata))])

    def set_records(self, records: list[tuple[str, str, list[str]]]) -> None:
        """set_record for many RRsets at once: (owner, rtype, rdata) each; every zone touched
        is written and reloaded once (one serial bump), then waited for."""
        touched = []
        for owner, rtype, rdata in records:
            owner = owner.lower()
            origin = max((z for z in self.zones() if owner == z or owner.endswith("." + z) or z == "."),
                         key=len)
            self.overrides.setdefault(origin, {})[(owner, rtype.upper())] = list(rdata)
            if origin not in touched:
                touched.append(origin)
        for origin in touched:
            self.serials[origin] += 1
            self._write_zone(origin)
            for h in self.host_of(origin):
                if h.software == "knot":
                    self.lab.server_run(["knotc", "-s", h.workdir / "knot.sock", "zone-reload", origin])
                else:
                    h.proc.send_signal(signal.SIGHUP)
        for origin in touched:
            for h in self.host_of(origin):
                self._wait(h, origin, serial=self.serials[origin])

    def start_misbehaving(self, zones: dict[str, str], name: str = "misbehave") -> Host:
        """Start tests/lab/misbehave.py on a new address pair of the tree, serving each zone
        of `zones` (a child of lab.: "servfail.lab." -> "servfail", see that file for the
        modes), and delegate each from lab. to it: NS ns1.ZONE with glue A and AAAA (the
        server's two addresses). Returns its Host (`proc`, `addr4`, `addr6`); its log is
        lab.dir/<tree name>-<name>.stdout, one JSON line per query."""
        for z in zones:
            if not (z.endswith(".lab.") and z.count(".") == 2):
                raise ValueError(f"{z}: a child of lab. only")
        a4, a6 = self._tree_address() if self.remote else self.lab.new_address()
        h = Host(name, "misbehave", list(zones), a4, a6)
        h.proc = self._spawn([PY, Path(__file__).resolve().parent / "misbehave.py", a4, a6,
                              *(f"{z}={m}" for z, m in zones.items())], f"{self.dir.name}-{name}")
        self._wait_listening(h)
        recs = []
        for z in zones:
            recs += [(z, "NS", [f"ns1.{z}"]), (f"ns1.{z}", "A", [a4]), (f"ns1.{z}", "AAAA", [a6])]
        self.set_records(recs)
        return h

    def stop(self) -> None:
        """Stop the tree's servers now (the lab would stop them on close anyway)."""
        for h in self.hosts.values():
            if h.proc is not None and h.proc.poll() is None:
                try:
                    os.killpg(h.proc.pid, signal.SIGTERM)
                    h.proc.wait(timeout=5)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass

    def udp(self, addr: str, wire: bytes, timeout: float = 2.0) -> bytes | None:
        """Ask a tree server directly: from the client namespace (local tree), or from the
        server namespace, where resolvers run, through the relay (remote tree)."""
        return self.lab.udp(addr, wire, timeout=timeout,
                            ns=self.lab.server_ns if self.remote else None)

    def pids(self) -> list[int]:
        """Process ids of the tree's servers and of the relay (to pin them to a CPU)."""
        return [p.pid for p in [h.proc for h in self.hosts.values()] + [self.relay]
                if p is not None and p.poll() is None]

    def relay_counters(self, timeout: float = 5.0) -> dict:
        """The relay's counters (frames and bytes each way, frames held now and at most,
        kernel drops, send errors): SIGUSR1 makes it print them as one JSON line."""
        import json
        out = Path(self.lab.dir) / f"{self.dir.name}-relay.stdout"
        n = len(out.read_text().splitlines()) if out.exists() else 0
        self.relay.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = out.read_text().splitlines()
            if len(lines) > n:
                return json.loads(lines[n])
            time.sleep(0.02)
        raise TimeoutError(f"the relay printed no counters:\n{self._stderr_of(self.dir.name + '-relay')}")

    # ------------------------------------------------------------ remote tree
    def _spawn(self, cmd, name: str, cwd=None) -> subprocess.Popen:
        return self.lab._spawn(self.ns, cmd, name, cwd=cwd)[0]

    def _tree_address(self) -> tuple[str, str]:
        n = self._next_host
        self._next_host += 1
        # written as the kernel and `ss` print it (2001:db8::9 when the tree's /64 is
        # 2001:db8:0::/64), so that _wait_listening's text comparison holds
        a4, a6 = f"{self.net4}.{n}", str(ipaddress.IPv6Address(f"{self.net6}::{n:x}"))
        self.lab.ns_run(self.ns, ["ip", "addr", "add", f"{a4}/32", "dev", "lo"])
        self.lab.ns_run(self.ns, ["ip", "-6", "addr", "add", f"{a6}/128", "dev", "lo"])
        return a4, a6

    def _remote_up(self) -> None:
        """Namespaces, veths, addresses and routes of the remote tree (module doc)."""
        from lab import run
        lab = self.lab
        for ns in (self.ns, self.relay_ns):
            run(["ip", "netns", "add", ns])
            lab.extra_ns.append(ns)
        run(["ip", "link", "add", self.uplink_if, "netns", lab.server_ns, "type", "veth",
             "peer", "name", self.relay_a_if, "netns", self.relay_ns])
        run(["ip", "link", "add", self.relay_b_if, "netns", self.relay_ns, "type", "veth",
             "peer", "name", self.tree_if, "netns", self.ns])
        ns_run = lab.ns_run
        ns_run(self.ns, ["ip", "link", "set", "lo", "up"])
        for ns, dev, a4, a6 in ((lab.server_ns, self.uplink_if, self.uplink_addr4, self.uplink_addr6),
                                (self.ns, self.tree_if, self.gateway4, self.gateway6)):
            ns_run(ns, ["ip", "addr", "add", f"{a4}/24", "dev", dev])
            ns_run(ns, ["ip", "-6", "addr", "add", f"{a6}/64", "dev", dev, "nodad"])
            ns_run(ns, ["ip", "link", "set", dev, "up"])
        # The relay's veths: no addresses, no IPv6 of their own (no router solicitations or
        # MLD reports), no GRO (frames stay as sent), an XDP receive ring each (XDP_TX or
        # redirect out of the uplink reaches the relay only so: lab.py's docstring).
        for dev in (self.relay_a_if, self.relay_b_if):
            ns_run(self.relay_ns, ["sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1"])
            ns_run(self.relay_ns, ["ip", "link", "set", dev, "up"])
            ns_run(self.relay_ns, ["ethtool", "-K", dev, "gro", "off"], check=False)
            lab.xdp_pass(self.relay_ns, dev)
            # A real qdisc, so that a full XDP ring on the far side pushes back instead of
            # dropping (veth's default is noqueue); the relay releases frames in bursts.
            ns_run(self.relay_ns, ["ip", "link", "set", "dev", dev, "txqueuelen", "10000"])
            ns_run(self.relay_ns, ["tc", "qdisc", "replace", "dev", dev, "root", "pfifo",
                                   "limit", "10000"])
        ns_run(lab.server_ns, ["ip", "route", "add", f"{self.net4}.0/24", "via", self.gateway4])
        ns_run(lab.server_ns, ["ip", "-6", "route", "add", f"{self.net6}::/64", "via", self.gateway6])
        ns_run(self.ns, ["ip", "route", "add", "default", "via", self.uplink_addr4])
        ns_run(self.ns, ["ip", "-6", "route", "add", "default", "via", self.uplink_addr6])

    def _start_relay(self) -> None:
        if not RELAY_BIN.exists():
            raise FileNotFoundError(f"{RELAY_BIN} not built (run cargo build --release)")
        cmd = [RELAY_BIN, "--a", self.relay_a_if, "--b", self.relay_b_if]
        for h in self.hosts.values():
            ms = self.delay_ms[h.name]
            if ms:
                cmd += ["--delay", f"{h.addr4}={ms:g}", "--delay", f"{h.addr6}={ms:g}"]
        self.relay, _ = self.lab._spawn(self.relay_ns, cmd, f"{self.dir.name}-relay")
        # Up when it has said so (its sockets are bound before the line is printed).
        deadline = time.monotonic() + 10
        err = Path(self.lab.dir) / f"{self.dir.name}-relay.stderr"
        while "relaying" not in (err.read_text() if err.exists() else ""):
            if self.relay.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the relay did not start:\n{self._stderr_of(self.dir.name + '-relay')}")
            time.sleep(0.02)

    def _stderr_of(self, name: str) -> str:
        try:
            return (Path(self.lab.dir) / f"{name}.stderr").read_text(errors="replace")[-3000:]
        except FileNotFoundError:
            return ""

    # ------------------------------------------------------------ zone data
    def _a(self, owner: str, host: str) -> list[str]:
        h = self.hosts[host]
        return [f"{owner} A {h.addr4}", f"{owner} AAAA {h.addr6}"]

    def zone_records(self, origin: str) -> list[str]:
        """The records of one zone as master-file lines (absolute names, no TTL column)."""
        a = self._a
        if origin == ".":
            r = ["lab. NS ns1.nic.lab.",
                 "example. NS ns1.nic.example.", "example. NS ns2.nic.example.",
                 *a("a.root-servers.lab.", "root1"), *a("b.root-servers.lab.", "root2"),
                 *a("ns1.nic.lab.", "tld-lab"),
                 *a("ns1.nic.example.", "tld-ex1"), *a("ns2.nic.example.", "tld-ex2")]
            ns = ["a.root-servers.lab.", "b.root-servers.lab."]
        elif origin == "lab.":
            r = [*a("a.root-servers.lab.", "root1"), *a("b.root-servers.lab.", "root2"),
                 *a("ns1.nic.lab.", "tld-lab"),
                 "www.lab. A 198.19.1.1",
                 "good.lab. NS ns1.good.lab.", *a("ns1.good.lab.", "leaf1"),
                 "glueless.lab. NS ns1.dns-host.example.",
                 "short.lab. NS ns1.short.lab.", *a("ns1.short.lab.", "leaf1"),
                 "medium.lab. NS ns1.medium.lab.", *a("ns1.medium.lab.", "leaf1"),
                 "slow.lab. NS ns1.slow.lab.", "slow.lab. NS ns2.slow.lab.",
                 *a("ns1.slow.lab.", "blackhole"), *a("ns2.slow.lab.", "leaf1"),
                 "spoof.lab. NS ns1.spoof.lab.", "spoof.lab. NS ns2.spoof.lab.",
                 *a("ns1.spoof.lab.", "spoofer"), *a("ns2.spoof.lab.", "leaf2"),
                 "spoofonly.lab. NS ns1.spoofonly.lab.", *a("ns1.spoofonly.lab.", "spoofer"),
                 "case-spoof.lab. NS ns1.case-spoof.lab.", "case-spoof.lab. NS ns2.case-spoof.lab.",
                 *a("ns1.case-spoof.lab.", "spoofer"), *a("ns2.case-spoof.lab.", "leaf2"),
                 "dead.lab. NS ns1.dead.lab.", *a("ns1.dead.lab.", "blackhole"),
                 "tarpit.lab. NS ns1.tarpit.lab.", *a("ns1.tarpit.lab.", "tarpit")]
            ns = ["ns1.nic.lab."]
        elif origin == "example.":
            r = [*a("ns1.nic.example.", "tld-ex1"), *a("ns2.nic.example.", "tld-ex2"),
                 "other.example. NS ns1.other.example.", *a("ns1.other.example.", "leaf2"),
                 "dns-host.example. NS ns1.dns-host.example.", *a("ns1.dns-host.example.", "leaf2"),
                 "glueless.example. NS ns2.good.lab.",
                 "wild.example. NS ns1.wild.example.", *a("ns1.wild.example.", "leaf1")]
            ns = ["ns1.nic.example.", "ns2.nic.example."]
        elif origin == "good.lab.":
            r = [*a("ns1.good.lab.", "leaf1"), *a("ns2.good.lab.", "leaf1"),
                 "good.lab. MX 10 mail.good.lab.", 'good.lab. TXT "v=good"',
                 "www.good.lab. A 198.19.10.1", "www.good.lab. AAAA 2001:db8:f00d::10",
                 'www.good.lab. TXT "hello world"',
                 "mail.good.lab. A 198.19.10.2",
                 "alias.good.lab. CNAME www.other.example.",
                 "chain1.good.lab. CNAME chain2.other.example.",
                 "chain4.good.lab. A 198.19.10.4",
                 "dangling.good.lab. CNAME nothere.other.example.",
                 "x.ent.good.lab. A 198.19.10.5"]
            ns = ["ns1.good.lab."]
        elif origin == "other.example.":
            r = [*a("ns1.other.example.", "leaf2"),
                 "www.other.example. A 198.19.20.1", "www.other.example. AAAA 2001:db8:f00d::20",
                 "chain2.other.example. CNAME chain3.glueless.lab."]
            ns = ["ns1.other.example."]
        elif origin == "dns-host.example.":
            r = [*a("ns1.dns-host.example.", "leaf2")]
            ns = ["ns1.dns-host.example."]
        elif origin == "glueless.lab.":
            r = ["www.glueless.lab. A 198.19.30.1", "chain3.glueless.lab. CNAME chain4.good.lab."]
            ns = ["ns1.dns-host.example."]
        elif origin == "glueless.example.":
            r = ["www.glueless.example. A 198.19.40.1"]
            ns = ["ns2.good.lab."]
        elif origin == "wild.example.":
            r = [*a("ns1.wild.example.", "leaf1"),
                 "*.wild.example. A 198.19.50.1", '*.wild.example. TXT "wild"',
                 "explicit.wild.example. A 198.19.50.2",
                 'sub.wild.example. TXT "sub"',
                 "*.cname.wild.example. CNAME www.good.lab."]
            ns = ["ns1.wild.example."]
        elif origin == "slow.lab.":
            r = [*a("ns1.slow.lab.", "blackhole"), *a("ns2.slow.lab.", "leaf1"),
                 "www.slow.lab. A 198.19.60.1"]
            ns = ["ns1.slow.lab.", "ns2.slow.lab."]
        elif origin == "short.lab.":
            r = [*a("ns1.short.lab.", "leaf1"),
                 "www.short.lab. A 198.19.70.1", "flip.short.lab. A 198.19.70.1"]
            ns = ["ns1.short.lab."]
        elif origin == "medium.lab.":
            r = [*a("ns1.medium.lab.", "leaf1"),
                 *(f"{n} A 198.19.71.{i + 1}" for i, n in enumerate(MEDIUM_HOT))]
            ns = ["ns1.medium.lab."]
        elif origin == "spoof.lab.":
            r = [*a("ns1.spoof.lab.", "spoofer"), *a("ns2.spoof.lab.", "leaf2"),
                 "www.spoof.lab. A 198.19.80.1", "www.spoof.lab. AAAA 2001:db8:f00d::80",
                 'www.spoof.lab. TXT "genuine"']
            ns = ["ns1.spoof.lab.", "ns2.spoof.lab."]
        elif origin == "spoofonly.lab.":
            r = [*a("ns1.spoofonly.lab.", "spoofer"),
                 "www.spoofonly.lab. A 198.19.81.1", "www.spoofonly.lab. AAAA 2001:db8:f00d::81"]
            ns = ["ns1.spoofonly.lab."]
        elif origin == "case-spoof.lab.":
            r = [*a("ns1.case-spoof.lab.", "spoofer"), *a("ns2.case-spoof.lab.", "leaf2"),
                 "www.case-spoof.lab. A 198.19.82.1"]
            ns = ["ns1.case-spoof.lab.", "ns2.case-spoof.lab."]
        else:
            raise KeyError(origin)
        mname = ns[0]
        head = [f"{origin} SOA {mname} hostmaster.nic.lab. "
                f"{self.serials.get(origin, 1)} 3600 600 86400 {self._neg_ttl(origin)}"]
        head += [f"{origin} NS {n}" for n in ns]
        # Apply set_record overrides: drop the RRset, then add the new rdata.
        for (owner, rtype), rdata in self.overrides.get(origin, {}).items():
            r = [line for line in r if not (line.split()[0].lower() == owner
                                             and line.split()[1].upper() == rtype)]
            r += [f"{owner} {rtype} {d}" for d in rdata]
        return head + r

    @staticmethod
    def _neg_ttl(origin: str) -> int:
        return {"short.lab.": SHORT_TTL, "medium.lab.": MEDIUM_TTL}.get(origin, 60)

    def _write_zone(self, origin: str) -> Path:
        ttl = {"short.lab.": SHORT_TTL, "medium.lab.": MEDIUM_TTL}.get(origin, 300)
        path = self.dir / _file_name(origin)
        lines = [f"; {origin} of the xdns lab tree (generated by tests/lab/tree.py)", f"$TTL {ttl}"]
        lines += self.zone_records(origin)
        tmp = path.with_suffix(".tmp")
        tmp.write_text("\n".join(lines) + "\n")
        tmp.replace(path)
        return path

    # ------------------------------------------------------------ servers
    def _start_knot(self, h: Host) -> None:
        wd = h.workdir
        (wd / "db").mkdir(exist_ok=True)
        conf = write_knot_conf(wd, h.addr4, h.addr6,
                               [(o, self.dir / _file_name(o)) for o in h.zones], log_level="notice")
        h.proc = self._spawn(["knotd", "-c", conf], f"{self.dir.name}-{h.name}")
        h.extra["conf"] = conf

    def _start_nsd(self, h: Host) -> None:
        wd = h.workdir
        conf = write_nsd_conf(wd, h.addr4, h.addr6, [(o, self.dir / _file_name(o)) for o in h.zones])
        h.proc = self._spawn(["nsd", "-c", conf, "-d"], f"{self.dir.name}-{h.name}", cwd=self.dir)
        h.extra["conf"] = conf

    def _start_blackhole(self, h: Host) -> None:
        h.proc = self._spawn([PY, Path(__file__).resolve(), "blackhole", h.addr4, h.addr6],
                             f"{self.dir.name}-blackhole")
        self._wait_listening(h)

    def _start_tarpit(self, h: Host) -> None:
        h.proc = self._spawn([PY, Path(__file__).resolve(), "tarpit", h.addr4, h.addr6,
                              str(TARPIT_DELAY_MS)], f"{self.dir.name}-tarpit")
        self._wait_listening(h)

    def _start_spoofer(self, h: Host) -> None:
        s2 = self.hosts["spoof2"]
        leaf2 = self.hosts["leaf2"]
        h.proc = self._spawn([PY, Path(__file__).resolve(), "spoofer",
                              h.addr4, h.addr6, s2.addr4, s2.addr6, leaf2.addr4, leaf2.addr6],
                             f"{self.dir.name}-spoofer")
        self._wait_listening(h)
        # The spoofer relays to leaf2: it answers SOA like leaf2 once it is up.
        self._wait(h, "other.example.")  # not a spoofed zone: relayed as is

    def _wait_listening(self, h: Host, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if h.proc.poll() is not None:
                raise RuntimeError(f"tree {h.name} exited: {self._stderr(h)}")
            out = self.lab.ns_run(self.ns, ["ss", "-Hlnu", "sport = :53"], check=False).stdout
            if h.addr4 in out and h.addr6 in out:
                return
            time.sleep(0.05)
        raise TimeoutError(f"tree {h.name} not listening")

    def _stderr(self, h: Host) -> str:
        try:
            return (Path(self.lab.dir) / f"{self.dir.name}-{h.name}.stderr").read_text(errors="replace")[-3000:]
        except FileNotFoundError:
            return ""

    def _wait(self, h: Host, origin: str, serial: int | None = None, timeout: float = 20.0) -> None:
        import dns.message
        import dns.rcode
        import dns.rdatatype
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if h.proc is not None and h.proc.poll() is not None:
                raise RuntimeError(f"tree {h.name} exited with {h.proc.returncode}:\n{self._stderr(h)}")
            ok = True
            for a in (h.addr4, h.addr6):
                q = dns.message.make_query(origin, "SOA")
                try:
                    w = self.udp(a, q.to_wire(), timeout=0.3 + 0.004 * max(self.delay_ms.values()))
                    m = dns.message.from_wire(w) if w else None
                except Exception:
                    m = None
                if not (m and m.rcode() == dns.rcode.NOERROR and m.answer
                        and (serial is None or m.answer[0][0].serial == serial)):
                    ok = False
                    break
            if ok:
                return
            time.sleep(0.1)
        raise TimeoutError(f"tree {h.name} does not serve {origin} (serial {serial}):\n{self._stderr(h)}")


# ==================================================================== resolvers
#
# Every starter takes the lab and the tree, gets a fresh address pair, writes its config into
# lab.dir/<name>/, starts the daemon in the server namespace, waits until it resolves
# www.good.lab. A for the client namespace (RA set, the right address), and returns a
# lab.Server whose extra["kind"] is "unbound" | "kresd" | "pdns" | "xdns" (also for xdns with XDP).
#
# Common choices, the same for every peer so their answers can be compared:
# - no DNSSEC validation (the tree is unsigned; no trust anchor anywhere);
# - QNAME minimisation: left at each peer's default, which is ON for all three (relaxed mode:
#   Unbound 1.17 `qname-minimisation: yes`, kresd 5.6 on, Recursor 4.8 on). The tree has
#   ENTs and NXDOMAIN cuts, so this exercises the minimised path that operators really run;
#   answers do not depend on it;
# - prefetch off by default (`prefetch=True` turns it on where the peer has it);
# - clients allowed: 198.18.0.0/15 and 2001:db8::/32 only;
# - 0x20: Unbound `use-caps-for-id: yes` (off by default there; on here because the issue asks
#   xdns to be as safe as Unbound can be), kresd randomises case by default, Recursor has no
#   0x20 at all (see RESOLVER_TRAITS).

RESOLVER_TRAITS = {
    # checks_0x20: randomises the query's letter case and drops replies whose case differs.
    "unbound": {"checks_0x20": True},
    "kresd": {"checks_0x20": True},
    "pdns": {"checks_0x20": False},
    "xdns": {"checks_0x20": True},
    "xdns-xdp": {"checks_0x20": True},
}


def _resolver_dir(lab, name: str) -> Path:
    wd = Path(lab.dir) / name
    wd.mkdir(parents=True, exist_ok=True)
    return wd


def _mk_server(lab, kind: str, name: str, a4: str, a6: str, proc, wd: Path, extra: dict):
    from lab import Server
    srv = Server(name, a4, a6, proc, wd, Path(lab.dir) / f"{name}.stderr", dict(extra, kind=kind))
    lab.servers[name] = srv
    return srv


def wait_resolving(lab, srv, timeout: float = 20.0, qname: str = "www.good.lab.",
                   expect: str = "198.19.10.1") -> None:
    """Poll until the resolver answers qname A with `expect` (cold start includes priming)."""
    import dns.flags
    import dns.message
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if srv.proc.poll() is not None:
            raise RuntimeError(f"{srv.name} exited with {srv.proc.returncode}:\n{srv.stderr()[-3000:]}")
        for a in (srv.addr4, srv.addr6):
            q = dns.message.make_query(qname, "A")
            try:
                w = lab.udp(a, q.to_wire(), timeout=1.0)
                m = dns.message.from_wire(w) if w else None
            except Exception as e:  # noqa: BLE001 - keep polling
                m, last = None, e
            if m is None or not (m.flags & dns.flags.RA) or \
                    expect not in [rd.to_text() for rr in m.answer for rd in rr]:
                last = m
                break
        else:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{srv.name} did not resolve {qname} within {timeout}s (last: {last})\n"
                       f"--- stderr ---\n{srv.stderr()[-3000:]}")


def start_unbound(lab, tree: Tree, name: str = "unbound", prefetch: bool = False,
                  cache_min_ttl: int = 0, extra: str = "", wait: bool = True):
    a4, a6 = lab.new_address()
    wd = _resolver_dir(lab, name)
    conf = write_unbound_conf(wd, [a4, a6], f"""    so-reuseport: no
    incoming-num-tcp: 100
    access-control: 0.0.0.0/0 refuse
    access-control: ::/0 refuse
    access-control: 198.18.0.0/15 allow
    access-control: 2001:db8::/32 allow
    root-hints: "{tree.root_hints}"
    # no DNSSEC: iterator only, no trust anchor (no auto-trust-anchor-file)
    module-config: "iterator"
    qname-minimisation: yes
    use-caps-for-id: yes
    prefetch: {"yes" if prefetch else "no"}
    cache-min-ttl: {cache_min_ttl}
    # the lab's servers are on non-loopback addresses; localhost is never a target anyway
    do-not-query-localhost: yes
    do-ip4: yes
    do-ip6: yes
    # quick failover in the lab (blackhole, spoofer); defaults are for the Internet
    infra-keep-probing: yes
    # Unbound drops a reply that took longer than discard-timeout (1900 ms) on the assumption
    # that the client has retried; the harness asks once and waits, and failing over from
    # the blackhole can take ~2 s: keep the reply.
    discard-timeout: 10000
    {extra}
""", f"""remote-control:
    control-enable: yes
    control-interface: "{wd}/control.sock"
    control-use-cert: no
""")
    proc = lab.server(["unbound", "-d", "-c", conf], name=name)
    srv = _mk_server(lab, "unbound", name, a4, a6, proc, wd, {"conf": conf})
    if wait:
        wait_resolving(lab, srv)
    return srv


def start_kresd(lab, tree: Tree, name: str = "kresd", prefetch: bool = False,
                cache_min_ttl: int | None = 0, extra: str = "", wait: bool = True):
    """Knot Resolver 5. `cache_min_ttl` defaults to 0 (kresd's own default is 5 s, which would
    hide the short-TTL zone's expiry); None keeps kresd's default."""
    a4, a6 = lab.new_address()
    wd = _resolver_dir(lab, name)
    (wd / "cache").mkdir(exist_ok=True)
    conf = wd / "kresd.conf"
    conf.write_text(f"""-- generated by tests/lab/tree.py
net.listen('{a4}', 53, {{ kind = 'dns' }})
net.listen('{a6}', 53, {{ kind = 'dns' }})
net.ipv4 = true
net.ipv6 = true
-- no DNSSEC: drop the root trust anchor sandbox.lua loads from /usr/share/dns/root.key
trust_anchors.remove('.')
modules.load('hints > iterate')
hints.root_file('{tree.root_hints}')
modules.load('view')
view:addr('198.18.0.0/15', policy.all(policy.PASS))
view:addr('2001:db8::/32', policy.all(policy.PASS))
view:addr('0.0.0.0/0', policy.all(policy.REFUSE))
view:addr('::/0', policy.all(policy.REFUSE))
cache.open(20 * MB, 'lmdb://{wd}/cache')
{"cache.min_ttl(%d)" % cache_min_ttl if cache_min_ttl is not None else ""}
{"modules.load('predict')" if prefetch else "-- prefetch (predict module) off"}
{extra}
""")
    proc = lab.server(["kresd", "-n", "-c", conf, wd], name=name, cwd=wd)
    srv = _mk_server(lab, "kresd", name, a4, a6, proc, wd, {"conf": conf})
    if wait:
        wait_resolving(lab, srv)
    return srv


def start_pdns(lab, tree: Tree, name: str = "pdns", prefetch: bool = False,
               extra: str = "", wait: bool = True):
    """PowerDNS Recursor 4.8 (old-style recursor.conf)."""
    a4, a6 = lab.new_address()
    wd = _resolver_dir(lab, name)
    conf = wd / "recursor.conf"
    conf.write_text(f"""# generated by tests/lab/tree.py
local-address={a4}, {a6}
local-port=53
allow-from=198.18.0.0/15, 2001:db8::/32
hint-file={tree.root_hints}
dnssec=off
# the default dont-query list contains 2001:db8::/32 (documentation prefix): the lab uses it
dont-query=
# query from IPv4 and IPv6 (the default is IPv4 only)
query-local-address=0.0.0.0, ::
socket-dir={wd}
daemon=no
write-pid=no
disable-syslog=yes
log-timestamp=no
loglevel=4
threads=1
pdns-distributes-queries=no
reuseport=no
qname-minimization=yes
refresh-on-ttl-perc={10 if prefetch else 0}
# no security polling (it would ask the lab's root for secpoll.powerdns.com)
security-poll-suffix=
{extra}
""")
    proc = lab.server(["pdns_recursor", f"--config-dir={wd}"], name=name, cwd=wd)
    srv = _mk_server(lab, "pdns", name, a4, a6, proc, wd, {"conf": conf})
    if wait:
        wait_resolving(lab, srv)
    return srv


def start_xdns_resolver(lab, tree: Tree, name: str = "xdns-resolver", prefetch: bool = False,
                        extra: str = "", wait: bool = True, xdp: str | None = None,
                        root_hints: Path | None = None, uplink: bool = False,
                        forwarding: bool = False, uplink_forwarding: bool = False,
                        bin: Path | None = None):
    """xdns as a pure resolver (no zones):

        listen = ["198.18.X.N:53", "[2001:db8:X::N]:53"]
        [resolver]
        root_hints = "<lab dir>/tree/root.hints"
        allow = ["198.18.0.0/15", "2001:db8::/32"]

    plus `prefetch_percent = 0` unless `prefetch` (prefetch off, as for the peers). The hints
    path is absolute (xdns resolves a relative one against the config file's directory).
    `extra` is more TOML inside [resolver] (fanout, timeouts, cache size...), `xdp` as in
    Lab.write_xdns_config, `root_hints` another hints file than the tree's. `uplink` (a
    remote tree, with `xdp`): the XDP program goes on the tree's uplink veth too
    (`[xdp] interfaces = [server veth, uplink]`), where upstream answers arrive.
    `forwarding` (with `uplink`): IPv4 and IPv6 forwarding on the server veth, for kernel
    iteration (`kernel_iteration = true` in `extra`): its queries leave by the uplink, not by
    the veth the client's query came in, and bpf_fib_lookup finds that next hop only as a
    router forwarding from the veth would (bpf/README.md, "Kernel iteration").
    `uplink_forwarding` (with `forwarding`): forwarding on the uplink too. A referral's
    response arrives on the uplink, and the kernel's next query goes back out of it; in this
    lab bpf_fib_lookup's output lookup through the uplink (with the source address of the
    server veth) finds no next hop, so without it every referral is passed to userspace
    (`pass_kit_no_hop`) and only the first query of a miss is the kernel's. With it, the
    forwarding lookup from the uplink finds the gateway and the kernel follows referrals
    (`kit_referral_followed`, the `kit` group's `hops`). `bin`: another xdns binary than
    XDNS_BIN (two builds compared in one bench run)."""
    from lab import XDNS_BIN
    if bin is not None:
        XDNS_BIN = Path(bin)
    if not XDNS_BIN.exists():
        raise FileNotFoundError(f"{XDNS_BIN} not built (run cargo build --release)")
    resolver = (f'\n[resolver]\nroot_hints = "{root_hints or tree.root_hints}"\n'
                f'allow = ["198.18.0.0/15", "2001:db8::/32"]\n'
                f'prefetch_percent = {10 if prefetch else 0}\n{extra}\n')
    kw = {"xdp": xdp} if xdp is not None else {}
    if uplink:
        if not (tree.remote and xdp is not None):
            raise ValueError("uplink=True needs a remote tree and xdp")
        kw["more_interfaces"] = [tree.uplink_if]
    if forwarding:
        if not uplink:
            raise ValueError("forwarding=True needs uplink=True")
        for key in (f"net.ipv4.conf.{lab.server_if}.forwarding", f"net.ipv6.conf.{lab.server_if}.forwarding"):
            lab.server_run(["sysctl", "-qw", f"{key}=1"])
    if uplink_forwarding:
        if not forwarding:
            raise ValueError("uplink_forwarding=True needs forwarding=True")
        for key in (f"net.ipv4.conf.{tree.uplink_if}.forwarding", f"net.ipv6.conf.{tree.uplink_if}.forwarding"):
            lab.server_run(["sysctl", "-qw", f"{key}=1"])
    conf, a4, a6 = lab.write_xdns_config([], name, extra=resolver, **kw)
    if xdp is not None:
        lab.client_xdp_pass()  # XDP_TX frames reach the client veth only with an XDP ring there
    env = dict(os.environ, RUST_BACKTRACE="1")
    proc = lab.server([XDNS_BIN, "serve", "--config", conf], name=name, env=env)
    srv = _mk_server(lab, "xdns", name, a4, a6, proc, conf.parent,
                     {"conf": conf, "control": conf.parent / "control.sock", "xdp": xdp})
    if wait:
        wait_resolving(lab, srv)
        if xdp is not None:
            lab.wait_xdp_data(srv)
    return srv


def start_xdns_xdp_resolver(lab, tree: Tree, name: str = "xdns-xdp", **kw):
    """start_xdns_resolver with its XDP program on the server veth (native mode): cache hits
    are answered in the kernel. One XDP program per interface: one such resolver per lab."""
    return start_xdns_resolver(lab, tree, name=name, xdp="native", **kw)


STARTERS = {"unbound": start_unbound, "kresd": start_kresd, "pdns": start_pdns,
            "xdns": start_xdns_resolver, "xdns-xdp": start_xdns_xdp_resolver}


def flush(lab, srv) -> None:
    """Empty the resolver's caches (records, negative answers), so the next query is a cold
    resolution again. Server state: Unbound and xdns forget it too (flush_infra; `xdns flush`);
    kresd and PowerDNS Recursor 4.8 keep what they learnt about servers (RTTs, the silent
    blackhole), having no command to drop it."""
    kind = srv.extra["kind"]
    wd = srv.workdir
    if kind == "unbound":
        c = ["unbound-control", "-c", srv.extra["conf"]]
        run_ = lambda *a: subprocess.run([*c, *a], capture_output=True, text=True, timeout=10)
        for args in (("flush_zone", "."), ("flush_negative",), ("flush_infra", "all"),
                     ("flush_requestlist",)):
            p = run_(*args)
            if p.returncode != 0:
                raise RuntimeError(f"unbound-control {' '.join(args)}: {p.stdout}{p.stderr}")
    elif kind == "kresd":
        _kresd_control(srv, "cache.clear()")
    elif kind == "pdns":
        p = subprocess.run(["rec_control", f"--socket-dir={wd}", "wipe-cache", ".$"],
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            raise RuntimeError(f"rec_control wipe-cache: {p.stdout}{p.stderr}")
    elif kind in ("xdns", "xdns-xdp"):
        # `xdns flush`: answers, delegations, addresses, NXDOMAIN cuts, failures and RTTs
        # (the root hints stay), in userspace and in the kernel cache.
        from lab import XDNS_BIN
        p = subprocess.run([XDNS_BIN, "flush", "--control", srv.extra["control"]],
                           capture_output=True, text=True, timeout=10)
        if p.returncode != 0:
            raise RuntimeError(f"xdns flush: {p.stdout}{p.stderr}")
    else:
        raise KeyError(kind)


def _kresd_control(srv, cmd: str, timeout: float = 5.0) -> str:
    ctl = srv.workdir / "control" / str(srv.proc.pid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(ctl))
        s.sendall(cmd.encode() + b"\n")
        out = b""
        try:
            while not out.endswith(b"> ") and b"\n" not in out[-1:]:
                chunk = s.recv(4096)
                if not chunk:
                    break
                out += chunk
        except socket.timeout:
            pass
        return out.decode(errors="replace")


def ask_a(lab, addr: str, name: str, address: str, timeout: float = 3.0):
    """Ask `name` A (RD, EDNS) from the client and check a recursive NOERROR answer holding
    exactly `address`; returns the dns.message.Message."""
    import dns.flags
    import dns.message
    import dns.rcode

    q = dns.message.make_query(name, "A", use_edns=0, payload=1232)
    wire = lab.udp(addr, q.to_wire(), timeout=timeout)
    assert wire is not None, f"no answer for {name}"
    m = dns.message.from_wire(wire)
    assert m.id == q.id and m.flags & dns.flags.RA, m
    assert m.rcode() == dns.rcode.NOERROR, m
    assert [rd.to_text() for rr in m.answer for rd in rr] == [address], m
    return m


def stop(lab, srv, timeout: float = 10.0) -> int:
    """Stop a resolver cleanly and return its exit code (0 for each of them). Recursor 4.8
    does not trap SIGTERM (it would die with -15): it is asked to `quit-nicely` instead."""
    if srv.extra["kind"] == "pdns" and srv.alive():
        subprocess.run(["rec_control", f"--socket-dir={srv.workdir}", "quit-nicely"],
                       capture_output=True, timeout=timeout)
        return srv.proc.wait(timeout=timeout)
    return lab.stop(srv, timeout=timeout)


# ==================================================================== helper processes
# Run as `python3 tree.py blackhole|spoofer ...` inside the server namespace.

def _blackhole(addrs: list[str]) -> None:
    socks = []
    for a in addrs:
        fam = socket.AF_INET6 if ":" in a else socket.AF_INET
        u = socket.socket(fam, socket.SOCK_DGRAM)
        u.bind((a, 53))
        t = socket.socket(fam, socket.SOCK_STREAM)
        t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        t.bind((a, 53))
        t.listen(64)  # never accepted: handshakes complete, nothing is ever read or answered
        socks += [u, t]
    import selectors
    sel = selectors.DefaultSelector()
    for s in socks:
        if s.type == socket.SOCK_DGRAM:
            sel.register(s, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            key.fileobj.recvfrom(65535)  # and drop it


def _tarpit_reply(q: bytes, addr: bytes) -> bytes | None:
    """The tarpit's reply to query `q` (raw bytes; None for anything but one question):
    AA, the question as sent (letter case included), type A: one A record `addr`, TTL 60;
    other types: NODATA. No OPT (a reply without EDNS is valid to an EDNS query)."""
    if len(q) < 17 or q[2] & 0x80 or q[4:6] != b"\x00\x01":
        return None
    i = 12
    while i < len(q) and q[i] != 0:
        if q[i] & 0xC0:
            return None
        i += 1 + q[i]
    if i + 5 > len(q):
        return None
    question = q[12:i + 5]
    qtype = q[i + 1:i + 3]
    a = qtype == b"\x00\x01"
    flags = bytes([0x84 | (q[2] & 0x01), 0x00])
    head = q[:2] + flags + b"\x00\x01" + (b"\x00\x01" if a else b"\x00\x00") + b"\x00\x00\x00\x00"
    ans = b"\xc0\x0c\x00\x01\x00\x01\x00\x00\x00\x3c\x00\x04" + addr if a else b""
    return head + question + ans


def _tarpit(a4: str, a6: str, delay_ms: str) -> None:
    import collections
    import selectors
    delay = int(delay_ms) / 1000
    addr = socket.inet_aton(TARPIT_A)
    sel = selectors.DefaultSelector()
    for a in (a4, a6):
        fam = socket.AF_INET6 if ":" in a else socket.AF_INET
        u = socket.socket(fam, socket.SOCK_DGRAM)
        u.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        u.bind((a, 53))
        u.setblocking(False)
        sel.register(u, selectors.EVENT_READ)
    due: collections.deque = collections.deque()  # (when, socket, peer, reply), in time order
    while True:
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, s, peer, r = due.popleft()
            try:
                s.sendto(r, peer)
            except OSError:
                pass
        timeout = max(0.0, due[0][0] - now) if due else None
        for key, _ in sel.select(timeout):
            s = key.fileobj
            for _ in range(256):
                try:
                    q, peer = s.recvfrom(4096)
                except BlockingIOError:
                    break
                r = _tarpit_reply(q, addr)
                if r is not None:
                    due.append((time.monotonic() + delay, s, peer, r))


def _zone_mode(qname: str) -> list[str]:
    q = qname.lower()
    best = None
    for z in SPOOF_MODES:
        if q == z or q.endswith("." + z):
            if best is None or len(z) > len(best):
                best = z
    return SPOOF_MODES[best] if best else []


def _forged(query, rdtype_override=None):
    """A forged reply to `query` carrying poison."""
    import dns.flags
    import dns.message
    import dns.rcode
    import dns.rdatatype
    import dns.rrset
    r = dns.message.make_response(query)
    r.flags |= dns.flags.AA
    q = query.question[0]
    if q.rdtype == dns.rdatatype.A:
        r.answer.append(dns.rrset.from_text(q.name, 3600, "IN", "A", POISON_A))
    elif q.rdtype == dns.rdatatype.AAAA:
        r.answer.append(dns.rrset.from_text(q.name, 3600, "IN", "AAAA", POISON_AAAA))
    elif q.rdtype == dns.rdatatype.TXT:
        r.answer.append(dns.rrset.from_text(q.name, 3600, "IN", "TXT", POISON_TXT))
    else:
        r.set_rcode(dns.rcode.NXDOMAIN)
    return r


def _swapcase_name(name):
    import dns.name
    return dns.name.Name([l.swapcase() for l in name.labels])


def _spoofer(a4: str, a6: str, s2_4: str, s2_6: str, b4: str, b6: str) -> None:
    import dns.message
    import dns.name

    def sock(addr, port, typ=socket.SOCK_DGRAM):
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        s = socket.socket(fam, typ)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((addr, port))
        return s

    fams = {a4: (s2_4, b4), a6: (s2_6, b6)}
    main = {a: sock(a, 53) for a in (a4, a6)}
    wrong_port = {a: sock(a, 5300) for a in (a4, a6)}
    wrong_addr = {a: sock(fams[a][0], 53) for a in (a4, a6)}

    def relay(wire: bytes, backend: str, tcp: bool = False) -> bytes | None:
        fam = socket.AF_INET6 if ":" in backend else socket.AF_INET
        with socket.socket(fam, socket.SOCK_STREAM if tcp else socket.SOCK_DGRAM) as s:
            s.settimeout(2.0)
            try:
                if tcp:
                    s.connect((backend, 53))
                    s.sendall(len(wire).to_bytes(2, "big") + wire)
                    n = int.from_bytes(recv_n(s, 2), "big")
                    return recv_n(s, n)
                s.sendto(wire, (backend, 53))
                return s.recv(65535)
            except (OSError, ValueError):
                return None

    def handle_udp(a: str, wire: bytes, peer) -> None:
        genuine = relay(wire, fams[a][1])
        try:
            q = dns.message.from_wire(wire)
            modes = _zone_mode(q.question[0].name.to_text()) if q.question else []
        except Exception:  # noqa: BLE001 - relay whatever it is
            q, modes = None, []
        for m in modes:
            f = _forged(q)
            s = main[a]
            if m == "id":
                f.id = (q.id + 1) & 0xFFFF
            elif m == "port":
                s = wrong_port[a]
            elif m == "addr":
                s = wrong_addr[a]
            elif m == "question":
                name = q.question[0].name
                other = dns.name.Name([b"zz" + name.labels[0]] + list(name.labels[1:]))
                f.question[0].name = other  # answer still poisons the real name
            elif m == "case":
                name = q.question[0].name
                swapped = _swapcase_name(name)
                if swapped.labels == name.labels:
                    continue  # no letters to flip
                f.question[0].name = swapped
                for rr in f.answer:
                    rr.name = swapped
            try:
                s.sendto(f.to_wire(), peer)
            except OSError:
                pass
        if genuine is not None:
            main[a].sendto(genuine, peer)

    def serve_udp(a: str) -> None:
        s = main[a]
        while True:
            wire, peer = s.recvfrom(65535)
            threading.Thread(target=handle_udp, args=(a, wire, peer), daemon=True).start()

    def serve_tcp(a: str) -> None:
        ls = sock(a, 53, socket.SOCK_STREAM)
        ls.listen(64)
        while True:
            c, _ = ls.accept()
            threading.Thread(target=tcp_conn, args=(a, c), daemon=True).start()

    def tcp_conn(a: str, c: socket.socket) -> None:
        with c:
            c.settimeout(10)
            try:
                while True:
                    hdr = recv_n(c, 2)
                    wire = recv_n(c, int.from_bytes(hdr, "big"))
                    r = relay(wire, fams[a][1], tcp=True)
                    if r is None:
                        return
                    c.sendall(len(r).to_bytes(2, "big") + r)
            except (OSError, ValueError):
                return

    for a in (a4, a6):
        threading.Thread(target=serve_udp, args=(a,), daemon=True).start()
        threading.Thread(target=serve_tcp, args=(a,), daemon=True).start()
    signal.sigwait({signal.SIGTERM, signal.SIGINT})


def recv_n(s: socket.socket, n: int) -> bytes:
    """Exactly `n` bytes from `s` (ValueError if it closes first): the lab's DNS-over-TCP
    servers (here and tests/lab/misbehave.py) read their length-prefixed messages with it."""
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ValueError("closed")
        buf += chunk
    return buf


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "blackhole":
        _blackhole(argv[1:])
    elif argv and argv[0] == "tarpit":
        _tarpit(*argv[1:4])
    elif argv and argv[0] == "spoofer":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        _spoofer(*argv[1:7])
    elif argv and argv[0] == "demo":  # manual smoke: python3 tests/lab/tree.py demo
        from lab import Lab
        with Lab() as lab:
            tree = Tree(lab).start()
            print(tree.root_hints.read_text())
            for kind in ("unbound", "kresd", "pdns"):
                srv = STARTERS[kind](lab, tree)
                print(f"{kind} resolves on {srv.addr4} {srv.addr6}")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
