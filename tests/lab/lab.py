"""A throw-away network lab for xdns tests, the demo and the benchmark.

    with Lab() as lab:
        knot = lab.start_knot(ZONES)
        nsd = lab.start_nsd(ZONES)
        xdns = lab.start_xdns(ZONES)
        wire = lab.udp(xdns.addr4, query_bytes)

Layout (all names unique per run: prefix + pid + random suffix):

    [client netns]  veth xc<id>  198.18.X.100/24  2001:db8:X::100/64
          |
    [server netns]  veth xs<id>  198.18.X.1/24    2001:db8:X::1/64
                                 198.18.X.N, 2001:db8:X::N  (one pair per started server)

X is derived from a hash of pid+suffix so parallel labs use different subnets (they live in
separate namespaces anyway; distinct subnets keep captures and logs unambiguous).
IPv6 addresses are added with `nodad` so they are usable at once.

The Python process itself stays in the host namespace. Sockets for queries are created inside
the client namespace (`Lab.client_socket`: setns(2) on the calling thread, socket(), setns
back); a socket keeps the namespace it was created in.

Teardown (`close`, also run by `__exit__`, atexit and on SIGTERM/SIGINT) kills every process the
lab started (their whole process group) and deletes both namespaces, which removes the veth pair,
and any namespace made on the lab's behalf (`extra_ns`: a remote tree's, tests/lab/tree.py).

XDP: `start_xdns(xdp=...)` attaches xdns's program to the server veth. A veth delivers frames
sent by *native* XDP_TX on its peer only if it has an XDP receive ring, i.e. an XDP program of
its own: on kernel 6.18, GRO on the receiving veth does *not* do it (`ethtool -K gro on` is a
no-op, GRO being on already). A real host's or container's veth has no such program, and xdns
handles that itself (`mode = "auto"` picks generic mode there; README, "XDP and veth"), so the
lab leaves the client veth bare unless asked: `client_xdp_pass()` attaches a one-line XDP_PASS
program, compiled here with clang, to the client veth. start_xdns calls it for
`xdp="native"` (tests of native mode and the benchmark), and for any mode with
`client_xdp=True`. kxdpgun replaces it with its own program, which also passes what it does
not want, so sockets in the client namespace keep receiving XDP answers after a kxdpgun run.
"""

from __future__ import annotations

import atexit
import ctypes
import hashlib
import ipaddress
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ZONES_DIR = REPO / "tests" / "zones"
XDNS_BIN = Path(os.environ.get("XDNS_BIN", REPO / "target" / "release" / "xdns"))

# The default zones: (origin, absolute file).
DEFAULT_ZONES = [
    ("example.com.", ZONES_DIR / "example.com.zone"),
    ("example.net.", ZONES_DIR / "example.net.zone"),
]

CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)

_LIVE_LABS: list["Lab"] = []


def _cleanup_all() -> None:
    for lab in list(_LIVE_LABS):
        lab.close()


atexit.register(_cleanup_all)


def _on_signal(signum, frame):  # pragma: no cover - exercised manually
    _cleanup_all()
    # Re-raise the default behaviour: exit with the conventional code.
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def run(cmd, check=True, **kw) -> subprocess.CompletedProcess:
    """Run a host command, capturing output; raise with its stderr on failure."""
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} -> {p.returncode}: {p.stderr.strip()}")
    return p


@dataclass
class Server:
    """One DNS server started in the server namespace."""

    name: str  # "knot", "nsd", "xdns", ...
    addr4: str
    addr6: str
    proc: subprocess.Popen
    workdir: Path
    stderr_path: Path
    extra: dict = field(default_factory=dict)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


class Lab:
    def __init__(self, prefix: str = "xdl", gro: bool = True, keep_dir: bool = False):
        suffix = "%06x" % random.getrandbits(24)
        self.id = f"{os.getpid() % 100000}{suffix}"
        self.server_ns = f"{prefix}-{self.id}-s"
        self.client_ns = f"{prefix}-{self.id}-c"
        # Interface names are limited to 15 bytes.
        self.server_if = f"xs{self.id}"[:15]
        self.client_if = f"xc{self.id}"[:15]
        h = int(hashlib.sha256(self.id.encode()).hexdigest(), 16)
        x = h % 512  # 198.18.0.0/15 has 512 /24s
        self.x = x
        self.net4 = f"198.{18 + x // 256}.{x % 256}"
        self.net6 = f"2001:db8:{x:x}"
        self.server_addr4 = f"{self.net4}.1"
        self.server_addr6 = self._addr6(1)
        self.client_addr4 = f"{self.net4}.100"
        self.client_addr6 = self._addr6(0x100)
        self.gro = gro
        self.keep_dir = keep_dir
        self._next_host = 2
        self._procs: list[subprocess.Popen] = []
        # More namespaces made on this lab's behalf (the remote tree's), deleted on close.
        self.extra_ns: list[str] = []
        self.servers: dict[str, Server] = {}
        self.dir = Path(tempfile.mkdtemp(prefix=f"xdns-lab-{self.id}-"))
        self._closed = False
        self._up = False

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> "Lab":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def up(self) -> None:
        _LIVE_LABS.append(self)
        if threading_is_main():
            for sig in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                    signal.signal(sig, _on_signal)
        try:
            run(["ip", "netns", "add", self.server_ns])
            run(["ip", "netns", "add", self.client_ns])
            run(["ip", "link", "add", self.server_if, "netns", self.server_ns,
                 "type", "veth", "peer", "name", self.client_if, "netns", self.client_ns])
            for ns, dev, a4, a6 in (
                (self.server_ns, self.server_if, self.server_addr4, self.server_addr6),
                (self.client_ns, self.client_if, self.client_addr4, self.client_addr6),
            ):
                self.ns_run(ns, ["ip", "link", "set", "lo", "up"])
                self.ns_run(ns, ["ip", "addr", "add", f"{a4}/24", "dev", dev])
                self.ns_run(ns, ["ip", "-6", "addr", "add", f"{a6}/64", "dev", dev, "nodad"])
                self.ns_run(ns, ["ip", "link", "set", dev, "up"])
                if self.gro and shutil.which("ethtool"):
                    self.ns_run(ns, ["ethtool", "-K", dev, "gro", "on"], check=False)
            self._up = True
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for p in reversed(self._procs):
            _stop(p)
        for ns in (self.client_ns, self.server_ns, *self.extra_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if not self.keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self in _LIVE_LABS:
            _LIVE_LABS.remove(self)

    # ---------------------------------------------------------------- helpers
    def ns_run(self, ns: str, cmd, check=True, **kw) -> subprocess.CompletedProcess:
        return run(["ip", "netns", "exec", ns, *map(str, cmd)], check=check, **kw)

    def ethtool(self, side: str, *args: str) -> None:
        ns, dev = (self.server_ns, self.server_if) if side == "server" else (self.client_ns, self.client_if)
        self.ns_run(ns, ["ethtool", "-K", dev, *args])

    def client_xdp_remove(self) -> None:
        """Take any XDP program off the client veth (a bare veth, as a container has)."""
        self.client_run(["ip", "link", "set", "dev", self.client_if, "xdp", "off"])

    def client_xdp_pass(self) -> None:
        """Give the client veth an XDP receive ring (see the module docstring): attach an
        XDP_PASS program unless some XDP program is attached already."""
        self.xdp_pass(self.client_ns, self.client_if)

    def xdp_pass(self, ns: str, dev: str) -> None:
        """Attach the one-line XDP_PASS program to `dev` in `ns` unless some XDP program is
        attached already: the veth then has an XDP receive ring (native XDP_TX or redirect on
        its peer reaches it) and a NAPI context."""
        link = self.ns_run(ns, ["ip", "link", "show", "dev", dev]).stdout
        if "prog/xdp" in link:
            return
        obj = self.dir / "xdp_pass.o"
        if not obj.exists():
            src = self.dir / "xdp_pass.c"
            src.write_text(_XDP_PASS_C)
            run(["clang", "-O2", "-target", "bpf", *_bpf_includes(), "-c", src, "-o", obj])
        self.ns_run(ns, ["ip", "link", "set", "dev", dev, "xdpdrv", "obj", obj, "sec", "xdp"])

    def _spawn(self, ns: str, cmd, name: str, cwd=None, env=None) -> tuple[subprocess.Popen, Path]:
        out = self.dir / f"{name}.stdout"
        err = self.dir / f"{name}.stderr"
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = subprocess.Popen(["ip", "netns", "exec", ns, *map(str, cmd)],
                                 stdout=fo, stderr=fe, stdin=subprocess.DEVNULL,
                                 cwd=cwd, env=env, start_new_session=True)
        self._procs.append(p)
        return p, err

    def server(self, cmd, name: str = "proc", cwd=None, env=None) -> subprocess.Popen:
        """Start a long-running process in the server namespace (stopped on close)."""
        return self._spawn(self.server_ns, cmd, name, cwd, env)[0]

    def client(self, cmd, name: str = "proc", cwd=None, env=None) -> subprocess.Popen:
        """Start a long-running process in the client namespace (stopped on close)."""
        return self._spawn(self.client_ns, cmd, name, cwd, env)[0]

    def client_run(self, cmd, check=True, **kw) -> subprocess.CompletedProcess:
        """Run a command to completion in the client namespace."""
        return self.ns_run(self.client_ns, cmd, check=check, **kw)

    def server_run(self, cmd, check=True, **kw) -> subprocess.CompletedProcess:
        return self.ns_run(self.server_ns, cmd, check=check, **kw)

    def _addr6(self, n: int) -> str:
        """Host n of the lab's /64, written the way the kernel and `ss` print it: for lab 0,
        2001:db8::9, not 2001:db8:0::9, so that text comparisons with their output hold."""
        return str(ipaddress.IPv6Address(f"{self.net6}::{n:x}"))

    def new_address(self) -> tuple[str, str]:
        """Add one more IPv4+IPv6 address to the server veth and return them."""
        n = self._next_host
        self._next_host += 1
        a4, a6 = f"{self.net4}.{n}", self._addr6(n)
        self.server_run(["ip", "addr", "add", f"{a4}/24", "dev", self.server_if])
        self.server_run(["ip", "-6", "addr", "add", f"{a6}/64", "dev", self.server_if, "nodad"])
        return a4, a6

    def client_socket(self, family=socket.AF_INET, type=socket.SOCK_DGRAM) -> socket.socket:
        """A socket living in the client namespace."""
        return self.ns_socket(self.client_ns, family, type)

    def ns_socket(self, ns: str, family=socket.AF_INET, type=socket.SOCK_DGRAM) -> socket.socket:
        """A socket living in namespace `ns` (setns on this thread, socket(), setns back)."""
        orig = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                return socket.socket(family, type)
            finally:
                _setns(orig)
        finally:
            os.close(orig)
            os.close(target)

    # ---------------------------------------------------------------- DNS I/O
    def replies(self, wire: bytes, addr: str, linger: float, port: int = 53, wait: float = 8.0) -> list[bytes]:
        """Sends `wire` once over UDP from the client namespace to `addr` and returns every
        reply received until `linger` seconds after the first (`wait` seconds without one):
        for tests that count the replies to one query (exactly one answer)."""
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        got: list[bytes] = []
        with self.client_socket(fam) as s:
            s.sendto(wire, (addr, port))
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    data, _ = s.recvfrom(65535)
                except (TimeoutError, OSError):
                    break
                got.append(data)
                if len(got) == 1:
                    deadline = min(deadline, time.monotonic() + linger)
        return got

    def ask_once(self, addr: str, qname: str, linger: float = 0.3):
        """One A question (EDNS, 1232) from the client namespace: its only answer (asserted:
        nothing more comes within `linger` s; ID and question echoed) as a dns.message, and
        the seconds it took."""
        import dns.message  # the lab itself needs no dnspython; the tests that ask do
        q = dns.message.make_query(qname, "A", use_edns=0, payload=1232)
        with self.client_socket() as s:
            t0 = time.monotonic()
            s.sendto(q.to_wire(), (addr, 53))
            s.settimeout(5.0)
            data, _ = s.recvfrom(65535)
            took = time.monotonic() - t0
            s.settimeout(linger)
            try:
                extra, _ = s.recvfrom(65535)
            except (TimeoutError, OSError):
                extra = None
        assert extra is None, f"{qname}: a second answer"
        m = dns.message.from_wire(data)
        assert m.id == q.id and m.question == q.question, m
        return m, took

    def udp(self, addr: str, wire: bytes, port: int = 53, timeout: float = 2.0,
            ns: str | None = None) -> bytes | None:
        """Send one UDP datagram (from the client namespace, or `ns`) and return the first
        reply (None on timeout)."""
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with self.ns_socket(ns or self.client_ns, fam, socket.SOCK_DGRAM) as s:
            s.settimeout(timeout)
            s.sendto(wire, (addr, port))
            try:
                data, _ = s.recvfrom(65535)
                return data
            except socket.timeout:
                return None

    def tcp(self, addr: str, wire: bytes, port: int = 53, timeout: float = 3.0,
            ns: str | None = None) -> bytes | None:
        """Send one length-prefixed query over TCP (from the client namespace, or `ns`) and
        return the reply (None if closed)."""
        fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
        with self.ns_socket(ns or self.client_ns, fam, socket.SOCK_STREAM) as s:
            s.settimeout(timeout)
            s.connect((addr, port))
            s.sendall(len(wire).to_bytes(2, "big") + wire)
            try:
                hdr = _recv_exact(s, 2)
                if hdr is None:
                    return None
                return _recv_exact(s, int.from_bytes(hdr, "big"))
            except (socket.timeout, ConnectionResetError):
                return None

    def wait_answering(self, addr: str, zone: str, proc: subprocess.Popen | None = None,
                       timeout: float = 20.0) -> None:
        """Poll with an SOA query until the server gives an authoritative answer."""
        q = _soa_query(zone)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode} before answering")
            try:
                r = self.udp(addr, q, timeout=0.3)
            except OSError:
                r = None
            # NOERROR, AA set, at least one answer
            if r and len(r) >= 12 and r[:2] == q[:2] and (r[3] & 0x0F) == 0 and (r[2] & 0x04) \
                    and int.from_bytes(r[6:8], "big") >= 1:
                return
            time.sleep(0.1)
        raise TimeoutError(f"{addr} did not answer SOA {zone} within {timeout}s")

    # ---------------------------------------------------------------- servers
    def start_knot(self, zones=DEFAULT_ZONES, name: str = "knot", xdp: bool = False,
                   timeout: float = 20.0, semantic_checks: str = "on") -> Server:
        """Start knotd. `xdp=True` adds Knot's XDP mode on the server veth (`xdp: listen:
        <veth>@53`): its AF_XDP workers answer UDP port 53 for *every* address of the veth, so
        no other DNS peer of the lab can be reached over UDP while it runs."""
        a4, a6 = self.new_address()
        xdp_cfg = f"xdp:\n    listen: {self.server_if}@53\n    udp: on\n" if xdp else ""
        wd = self.dir / name
        (wd / "db").mkdir(parents=True)
        conf = write_knot_conf(wd, a4, a6, [(o, Path(p).resolve()) for o, p in zones],
                               extra=xdp_cfg, semantic_checks=semantic_checks)
        proc, err = self._spawn(self.server_ns, ["knotd", "-c", conf], name)
        srv = Server(name, a4, a6, proc, wd, err, {"conf": conf})
        self._wait_all(srv, zones, timeout)
        self.servers[name] = srv
        return srv

    def start_nsd(self, zones=DEFAULT_ZONES, name: str = "nsd", timeout: float = 20.0) -> Server:
        a4, a6 = self.new_address()
        wd = self.dir / name
        wd.mkdir(parents=True)
        conf = write_nsd_conf(wd, a4, a6, zones)
        # NSD resolves $INCLUDE against its working directory: run it from the zone's directory.
        cwd = Path(zones[0][1]).resolve().parent
        proc, err = self._spawn(self.server_ns, ["nsd", "-c", conf, "-d"], name, cwd=cwd)
        srv = Server(name, a4, a6, proc, wd, err, {"conf": conf})
        self._wait_all(srv, zones, timeout)
        self.servers[name] = srv
        return srv

    def write_xdns_config(self, zones=DEFAULT_ZONES, name: str = "xdns", addrs=None,
                          extra: str = "", xdp: str | None = None,
                          more_interfaces: list[str] = ()) -> tuple[Path, str, str]:
        """Write xdns.toml for a new address pair (or `addrs`).

        `extra` is TOML inserted before the zones (top-level keys first, then tables).
        `xdp` = "native" | "generic" | "auto" attaches xdns's XDP program to the server veth
        (`[xdp] interfaces = [server_if]`), "default" the same with no `mode` key (as a user
        would write it); None = userspace only. One XDP program per interface: only one XDP
        xdns (or other XDP peer) can run in a lab at a time. `more_interfaces`: more
        interfaces of the server namespace in `[xdp] interfaces` (a remote tree's uplink).
        """
        a4, a6 = addrs if addrs else self.new_address()
        if xdp is not None:
            mode = "" if xdp == "default" else f'mode = "{xdp}"\n'
            ifs = ", ".join(f'"{i}"' for i in [self.server_if, *more_interfaces])
            extra += f'\n[xdp]\ninterfaces = [{ifs}]\n{mode}'

        wd = self.dir / name
        wd.mkdir(parents=True, exist_ok=True)
        conf = wd / "xdns.toml"
        zone_cfg = "".join(
            f'\n[[zone]]\nname = "{origin}"\nfile = "{Path(path).resolve()}"\n'
            for origin, path in zones)
        conf.write_text(
            f'# generated by tests/lab/lab.py\n'
            f'listen = ["{a4}:53", "[{a6}]:53"]\n'
            f'control = "{wd}/control.sock"\n'
            f'metrics = "{a4}:9153"\n'
            f'{extra}{zone_cfg}')
        return conf, a4, a6

    def start_knot_primary(self, zones, name: str, key: tuple[str, str, str] | None = None,
                           notify: list[str] = (), via: str | None = None,
                           allow: str = "198.18.0.0/15", addrs=None, signing: bool = False,
                           policy: list[str] = (), timeout: float = 20.0) -> Server:
        """Start knotd as a primary of `zones` ((origin, zone file) pairs; the files are
        copied into its directory, so tests may edit them): transfers (AXFR, and IXFR from
        its journal of `knotc zone-begin/set/commit` changes) allowed from `allow`, TSIG
        required when `key` = (name, algorithm, base64 secret) is given, NOTIFY sent to
        each `notify` address (`ADDR@PORT`) on every new serial, from `via` (else from its
        own IPv4 address: in one namespace the kernel would otherwise pick the target's).
        `signing`: Knot signs the zones (ECDSA P-256, NSEC) and re-signs what each change
        touches (its RRSIGs, the NSEC neighbours, the SOA), as a signing primary does; with
        `policy`, more options of its signing policy (KNOT_NSEC3_OPTOUT: NSEC3 opt-out)."""
        a4, a6 = addrs if addrs else self.new_address()
        wd = self.dir / name
        (wd / "db").mkdir(parents=True)
        copied = []
        for origin, path in zones:
            dst = wd / f"{origin.rstrip('.') or 'root'}.zone"
            shutil.copy(path, dst)
            for inc in Path(path).resolve().parent.glob("*.inc"):  # $INCLUDEd files
                shutil.copy(inc, wd / inc.name)
            copied.append((origin, dst))
        key_cfg = ""
        key_ref = ""
        if key:
            key_cfg = f"key:\n  - id: {key[0]}\n    algorithm: {key[1]}\n    secret: {key[2]}\n"
            key_ref = f"    key: {key[0]}\n"
        remotes = "".join(f"  - id: n{i}\n    address: {t}\n    via: {via or a4}\n{key_ref}"
                          for i, t in enumerate(notify))
        remote_cfg = f"remote:\n{remotes}" if notify else ""
        acl_cfg = f"acl:\n  - id: xfr\n    address: {allow}\n    action: transfer\n{key_ref}"
        notify_ref = f"    notify: [{', '.join(f'n{i}' for i in range(len(notify)))}]\n" if notify else ""
        zone_cfg = "".join(f'  - domain: "{o}"\n    file: "{p}"\n    acl: xfr\n{notify_ref}'
                           for o, p in copied)
        sign_cfg = sign_ref = ""
        if signing:
            sign_cfg = knot_signing_conf(wd / "keys", {"lab": list(policy)})
            # signing a zone journals all its signatures as one change: a 1M-record zone's is
            # far above Knot's default per-zone journal limit (100 MiB; "not enough space")
            sign_ref = "    dnssec-signing: on\n    dnssec-policy: lab\n    journal-max-usage: 4G\n"
        conf = wd / "knot.conf"
        conf.write_text(f"""# generated by tests/lab/lab.py (start_knot_primary)
server:
    rundir: "{wd}"
    listen: [ {a4}@53, {a6}@53 ]
    udp-workers: 1
    tcp-workers: 2
    background-workers: 1
{key_cfg}{sign_cfg}{remote_cfg}{acl_cfg}control:
    listen: "{wd}/knot.sock"
database:
    storage: "{wd}/db"
log:
  - target: stderr
    any: info
template:
  - id: default
    storage: "{wd}"
    semantic-checks: on
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: changes
    serial-policy: increment
{sign_ref}zone:
{zone_cfg}""")
        proc, err = self._spawn(self.server_ns, ["knotd", "-c", conf], name)
        srv = Server(name, a4, a6, proc, wd, err, {"conf": conf, "zones": copied})
        self._wait_all(srv, zones, timeout)
        self.servers[name] = srv
        return srv

    def knotc(self, srv: Server, *args: str) -> str:
        """Run `knotc -c CONF ARGS...` against a Knot started by this lab; its output."""
        return run(["knotc", "-c", str(srv.extra["conf"]), *args], timeout=30).stdout

    def start_xdns(self, zones=DEFAULT_ZONES, name: str = "xdns", extra: str = "",
                   wait: bool = True, xdp: str | None = None, timeout: float = 20.0,
                   client_xdp: bool | None = None, addrs=None) -> Server:
        """Start `xdns serve`; `xdp` as in `write_xdns_config`. `client_xdp`: give the client
        veth an XDP program first (`client_xdp_pass`); None = only for `xdp="native"`, which
        needs it to deliver (see the module docstring)."""
        if not XDNS_BIN.exists():
            raise FileNotFoundError(f"{XDNS_BIN} not built (run cargo build --release)")
        conf, a4, a6 = self.write_xdns_config(zones, name, addrs=addrs, extra=extra, xdp=xdp)
        if client_xdp if client_xdp is not None else xdp == "native":
            self.client_xdp_pass()
        env = dict(os.environ, RUST_BACKTRACE="1")
        proc, err = self._spawn(self.server_ns, [XDNS_BIN, "serve", "--config", conf], name, env=env)
        srv = Server(name, a4, a6, proc, conf.parent, err,
                     {"conf": conf, "control": conf.parent / "control.sock", "xdp": xdp})
        if wait:
            self._wait_all(srv, zones, timeout)
            if xdp is not None:
                self.wait_xdp_data(srv, timeout)
        self.servers[name] = srv
        return srv

    def xdns_takeover(self, srv: Server, name: str, conf: Path | None = None,
                      wait: bool = True, timeout: float = 20.0) -> Server:
        """Start `xdns serve --takeover` on `srv`'s configuration (or `conf`, which must use the
        same control socket) under process name `name`. With `wait`, return once the old
        process has exited (the new one then serves alone). The new Server keeps srv's
        addresses."""
        conf = conf or srv.extra["conf"]
        env = dict(os.environ, RUST_BACKTRACE="1")
        proc, err = self._spawn(self.server_ns, [XDNS_BIN, "serve", "--config", conf,
                                                 "--takeover"], name, env=env)
        new = Server(name, srv.addr4, srv.addr6, proc, srv.workdir, err,
                     dict(srv.extra, conf=conf))
        if wait:
            try:
                srv.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{srv.name} did not exit after a takeover by {name}\n"
                                   f"--- {name} stderr ---\n{new.stderr()[-3000:]}") from None
            if not new.alive():
                raise RuntimeError(f"{name} exited with {proc.returncode} after taking over\n"
                                   f"--- stderr ---\n{new.stderr()[-3000:]}")
            self.wait_xdp_data(new, timeout)
        self.servers[name] = new
        return new

    def xdns_stats(self, srv: Server) -> dict:
        """`xdns stats --json` of a running xdns (its control socket is a path: any netns)."""
        import json
        p = run([XDNS_BIN, "stats", "--control", srv.extra["control"], "--json"], timeout=10)
        return json.loads(p.stdout)

    def xdns_metrics(self, srv: Server) -> str:
        """The Prometheus text of a running xdns started by `start_xdns` (`/metrics` on port
        9153 of its address, asked from the client namespace)."""
        with self.client_socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.settimeout(3)
            s.connect((srv.addr4, 9153))
            s.sendall(b"GET /metrics HTTP/1.0\r\nHost: x\r\n\r\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def wait_xdp_data(self, srv: Server, timeout: float = 20.0) -> None:
        """Return once a running xdns with XDP on has its zone data in the kernel maps (at
        once with XDP off). A fresh start attaches the program first and fills the maps while
        userspace answers: answering alone does not mean the kernel does."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self.xdns_stats(srv).get("xdp_data_active", True):
                    return
            except RuntimeError as e:
                # started without waiting: the control socket may not exist or listen yet (it
                # can appear between the failed connect and a look at the path, so the error
                # decides, not the path)
                if "connecting to" in str(e) and srv.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise
            if time.monotonic() > deadline or not srv.alive():
                raise RuntimeError(f"{srv.name}: XDP data not active after {timeout} s\n"
                                   f"--- stderr ---\n{srv.stderr()[-3000:]}")
            time.sleep(0.05)

    def _wait_all(self, srv: Server, zones, timeout: float = 20.0) -> None:
        try:
            for origin, _ in zones:
                self.wait_answering(srv.addr4, origin, srv.proc, timeout)
                self.wait_answering(srv.addr6, origin, srv.proc, timeout)
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeError(f"{srv.name}: {e}\n--- stderr ---\n{srv.stderr()[-3000:]}") from None

    def stop(self, srv: Server, sig=signal.SIGTERM, timeout: float = 10.0) -> int:
        """Send `sig` to a server and wait for it; returns its exit code."""
        srv.proc.send_signal(sig)  # ip netns exec execs the command: same pid
        return srv.proc.wait(timeout=timeout)


_XDP_PASS_C = """\
/* generated by tests/lab/lab.py: gives a veth an XDP receive ring, passes everything */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int xdp_pass(struct xdp_md *ctx) { return XDP_PASS; }
char LICENSE[] SEC("license") = "GPL";
"""


def write_nsd_conf(wd: Path, a4: str, a6: str, zones, primary: str | None = None,
                   key: tuple[str, str, str] | None = None, allow_notify: str | None = None,
                   verbosity: int = 1) -> Path:
    """Write `wd/nsd.conf` for an nsd answering on port 53 of a4/a6 with `zones`, no control
    socket, one server process, no response rate limiting. Without `primary`, `zones` are
    (origin, zone file) pairs (zonesdir is the first file's directory); with `primary` (an
    address), they are origins that nsd transfers from it (a secondary: `request-xfr`, TSIG
    with `key` = (name, algorithm, base64 secret) when given, NOTIFY accepted from the
    `allow_notify` prefix), the transferred copies kept in `wd`. Used by Lab.start_nsd, the
    lab tree's NSD hosts, the transfer tests and bench/axfr.py."""
    if primary is None:
        zonesdir = Path(zones[0][1]).resolve().parent
        zone_cfg = "".join(f'zone:\n    name: "{origin}"\n    zonefile: "{Path(path).resolve()}"\n'
                           for origin, path in zones)
    else:
        zonesdir = wd
        kname = key[0] if key else "NOKEY"
        notify = f"    allow-notify: {allow_notify} {kname}\n" if allow_notify else ""
        zone_cfg = "".join(f'zone:\n    name: "{origin}"\n    zonefile: "{wd}/{origin}zone"\n'
                           f"    request-xfr: {primary} {kname}\n{notify}" for origin in zones)
    key_cfg = f'key:\n    name: "{key[0]}"\n    algorithm: {key[1]}\n    secret: "{key[2]}"\n' if key else ""
    conf = wd / "nsd.conf"
    conf.write_text(f"""# generated by tests/lab/lab.py
server:
    ip-address: {a4}
    ip-address: {a6}
    port: 53
    username: ""
    chroot: ""
    database: ""
    zonesdir: "{zonesdir}"
    zonelistfile: "{wd}/zone.list"
    xfrdfile: "{wd}/xfrd.state"
    xfrdir: "{wd}"
    pidfile: "{wd}/nsd.pid"
    server-count: 1
    verbosity: {verbosity}
    hide-version: no
    reuseport: no
    # Debian's NSD enables response rate limiting by default; benchmarks and floods from one
    # client would be throttled ("ratelimit block" in the log).
    rrl-ratelimit: 0
    rrl-whitelist-ratelimit: 0
remote-control:
    control-enable: no
{key_cfg}{zone_cfg}""")
    return conf


# Knot DNS signing policy options for NSEC3 as a TLD publishes it: opt-out, no extra
# iterations, no salt (RFC 9276).
KNOT_NSEC3_OPTOUT = ["nsec3: on", "nsec3-iterations: 0", "nsec3-salt-length: 0", "nsec3-opt-out: on"]


def knot_signing_conf(keys: Path, policies: dict[str, list[str]]) -> str:
    """Knot DNS's `keystore:` (PEM keys under `keys`) and `policy:` sections: one policy per
    entry of `policies` (id -> its option lines besides keystore and algorithm), each signing
    with ECDSA P-256, as the lab, the tests and bench/genzone.py all sign."""
    out = f'keystore:\n  - id: ks\n    backend: pem\n    config: "{keys}"\npolicy:\n'
    for pid, lines in policies.items():
        out += f"  - id: {pid}\n    keystore: ks\n    algorithm: ecdsap256sha256\n"
        out += "".join(f"    {line}\n" for line in lines)
    return out


def write_knot_conf(wd: Path, a4: str, a6: str, zones, extra: str = "",
                    log_level: str = "info", primary: str | None = None,
                    key: tuple[str, str, str] | None = None, allow_notify: str | None = None,
                    journal: str = "none", semantic_checks: str = "on") -> Path:
    """Write `wd/knot.conf` for a knotd answering on port 53 of a4/a6 with `zones`, control
    socket `wd/knot.sock`, one worker of each kind, zone files never written back, the
    journal's content `journal` (none | changes | all), `semantic-checks` as given (on: Knot
    3.2 also verifies every RRSIG of a signed zone as it loads it; off: Knot's default). Without `primary`, `zones` are
    (origin, absolute zone file) pairs, read whole; with `primary` (an address), they are
    origins that knotd transfers from it (a secondary: TSIG with `key` = (name, algorithm,
    base64 secret) when given, NOTIFY accepted from the `allow_notify` prefix). `extra` is
    more top-level config (e.g. an `xdp:` section). Used by Lab.start_knot, the lab tree's
    Knot hosts, the transfer tests and bench/axfr.py."""
    key_cfg = key_ref = acl_cfg = acl_ref = remote_cfg = ""
    if key:
        key_cfg = f"key:\n  - id: {key[0]}\n    algorithm: {key[1]}\n    secret: {key[2]}\n"
        key_ref = f"    key: {key[0]}\n"
    if primary is None:
        zone_cfg = "".join(f'  - domain: "{origin}"\n    file: "{path}"\n' for origin, path in zones)
    else:
        remote_cfg = f"remote:\n  - id: primary\n    address: {primary}@53\n{key_ref}"
        if allow_notify:
            acl_cfg = f"acl:\n  - id: notify\n    address: {allow_notify}\n{key_ref}    action: notify\n"
            acl_ref = "    acl: notify\n"
        zone_cfg = "".join(f'  - domain: "{origin}"\n    master: primary\n{acl_ref}' for origin in zones)
    conf = wd / "knot.conf"
    conf.write_text(f"""# generated by tests/lab/lab.py
server:
    rundir: "{wd}"
    listen: [ {a4}@53, {a6}@53 ]
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
{extra}{key_cfg}{remote_cfg}{acl_cfg}control:
    listen: "{wd}/knot.sock"
database:
    storage: "{wd}/db"
log:
  - target: stderr
    any: {log_level}
template:
  - id: default
    storage: "{wd}"
    semantic-checks: {semantic_checks}
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: {journal}
zone:
{zone_cfg}""")
    return conf


def write_unbound_conf(wd: Path, addrs, server: str, tail: str = "") -> Path:
    """Write `wd/unbound.conf` for an unbound in the foreground answering on port 53 of each
    of `addrs`: one thread, no user switch or chroot, pid file and working directory in `wd`,
    logging to stderr at verbosity 1. `server` is more of the `server:` clause (access
    control, modules, root hints or stub zones' options), each line indented four spaces;
    `tail` follows it (e.g. `stub-zone:` or `remote-control:` clauses). Used by the lab
    tree's recursive Unbound, the in-path tests' stub resolver and the DNSSEC tests'
    validator."""
    listen = "".join(f"    interface: {a}@53\n" for a in addrs)
    conf = wd / "unbound.conf"
    conf.write_text(f"""# generated by tests/lab/lab.py
server:
{listen}    do-daemonize: no
    username: ""
    chroot: ""
    directory: "{wd}"
    pidfile: "{wd}/unbound.pid"
    use-syslog: no
    logfile: ""
    verbosity: 1
    num-threads: 1
{server}{tail}""")
    return conf


def _bpf_includes() -> list[str]:
    """clang -target bpf needs the multiarch include dir for <asm/types.h> (Debian)."""
    machine = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    return [f"-I/usr/include/{machine or 'x86_64-linux-gnu'}"]


def threading_is_main() -> bool:
    import threading
    return threading.current_thread() is threading.main_thread()


def _stop(p: subprocess.Popen) -> None:
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait(timeout=5)


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def _soa_query(zone: str) -> bytes:
    qid = random.getrandbits(16)
    name = b"".join(bytes([len(l)]) + l.encode() for l in zone.rstrip(".").split(".")) + b"\0"
    return qid.to_bytes(2, "big") + b"\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00" + name + b"\x00\x06\x00\x01"


if __name__ == "__main__":  # manual smoke: python3 tests/lab/lab.py
    with Lab() as lab:
        k = lab.start_knot()
        n = lab.start_nsd()
        print(f"knot {k.addr4} {k.addr6}, nsd {n.addr4} {n.addr6}: both answer")
        sys.exit(0)


class PathLab(Lab):
    """Three namespaces for the in-path cache (issue 26): a client, a router that forwards
    (IPv4 and IPv6), and the servers, each side its own subnet:

        [client netns] xc<id> 198.18.C.100 ─ xr<id> 198.18.C.254 [router netns]
        [router netns] xu<id> 198.18.S.254 ─ xs<id> 198.18.S.1 (+ .N per server) [server netns]

    Everything `Lab` starts in the server namespace (Knot, Unbound, NSD, scripts) works the
    same; the client reaches it through the router. `start_inpath` runs `xdns serve` with an
    `[inpath]` section in the router namespace; `router_run` runs commands there.
    """

    def __init__(self, prefix: str = "xdl", **kw):
        super().__init__(prefix=prefix, **kw)
        self.router_ns = f"{prefix}-{self.id}-r"
        self.router_cif = f"xr{self.id}"[:15]   # the router's client-facing veth
        self.router_uif = f"xu{self.id}"[:15]   # the router's server-facing veth
        c = self.x
        s = (self.x + 256) % 512
        self.cnet4 = f"198.{18 + c // 256}.{c % 256}"
        self.cnet6 = f"2001:db8:{c:x}"
        # the server side: Lab's net4/net6 (new_address and the servers' helpers use them)
        self.net4 = f"198.{18 + s // 256}.{s % 256}"
        self.net6 = f"2001:db8:{s:x}"
        self.server_addr4 = f"{self.net4}.1"
        self.server_addr6 = self._addr6(1)
        self.client_addr4 = f"{self.cnet4}.100"
        self.client_addr6 = str(ipaddress.IPv6Address(f"{self.cnet6}::100"))
        self.router_caddr4 = f"{self.cnet4}.254"
        self.router_caddr6 = str(ipaddress.IPv6Address(f"{self.cnet6}::fe"))
        self.router_uaddr4 = f"{self.net4}.254"
        self.router_uaddr6 = self._addr6(0xfe)

    def up(self) -> None:
        _LIVE_LABS.append(self)
        if threading_is_main():
            for sig in (signal.SIGTERM, signal.SIGINT):
                if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
                    signal.signal(sig, _on_signal)
        try:
            for ns in (self.server_ns, self.client_ns, self.router_ns):
                run(["ip", "netns", "add", ns])
            run(["ip", "link", "add", self.client_if, "netns", self.client_ns,
                 "type", "veth", "peer", "name", self.router_cif, "netns", self.router_ns])
            run(["ip", "link", "add", self.server_if, "netns", self.server_ns,
                 "type", "veth", "peer", "name", self.router_uif, "netns", self.router_ns])
            for ns, dev, a4, a6, gw4, gw6 in (
                (self.server_ns, self.server_if, self.server_addr4, self.server_addr6,
                 self.router_uaddr4, self.router_uaddr6),
                (self.client_ns, self.client_if, self.client_addr4, self.client_addr6,
                 self.router_caddr4, self.router_caddr6),
                (self.router_ns, self.router_cif, self.router_caddr4, self.router_caddr6, None, None),
                (self.router_ns, self.router_uif, self.router_uaddr4, self.router_uaddr6, None, None),
            ):
                self.ns_run(ns, ["ip", "link", "set", "lo", "up"])
                self.ns_run(ns, ["ip", "addr", "add", f"{a4}/24", "dev", dev])
                self.ns_run(ns, ["ip", "-6", "addr", "add", f"{a6}/64", "dev", dev, "nodad"])
                self.ns_run(ns, ["ip", "link", "set", dev, "up"])
                if gw4:
                    self.ns_run(ns, ["ip", "route", "add", "default", "via", gw4])
                    self.ns_run(ns, ["ip", "-6", "route", "add", "default", "via", gw6])
                if self.gro and shutil.which("ethtool"):
                    self.ns_run(ns, ["ethtool", "-K", dev, "gro", "on"], check=False)
            self.router_run(["sysctl", "-qw", "net.ipv4.ip_forward=1"])
            self.router_run(["sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"])
            self._up = True
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self._closed:
            return
        super().close()
        subprocess.run(["ip", "netns", "del", self.router_ns], capture_output=True)

    def router_run(self, cmd, check=True, **kw) -> subprocess.CompletedProcess:
        """Run a command to completion in the router namespace."""
        return self.ns_run(self.router_ns, cmd, check=check, **kw)

    def router(self, cmd, name: str = "proc", cwd=None, env=None) -> subprocess.Popen:
        """Start a long-running process in the router namespace (stopped on close)."""
        return self._spawn(self.router_ns, cmd, name, cwd, env)[0]

    def write_inpath_config(self, name: str = "inpath", servers=None, extra: str = "") -> Path:
        """xdns.toml with only `[inpath]` (client and upstream veths of the router; `servers`
        defaults to the server subnet, both families). `extra`: more `[inpath]` keys."""
        servers = servers or [f"{self.net4}.0/24", f"{self.net6}::/64"]
        wd = self.dir / name
        wd.mkdir(parents=True, exist_ok=True)
        conf = wd / "xdns.toml"
        conf.write_text(
            "# generated by tests/lab/lab.py (PathLab)\n"
            f'control = "{wd}/control.sock"\n'
            f'metrics = "127.0.0.1:9153"\n'
            "\n[inpath]\n"
            f'client_interfaces = ["{self.router_cif}"]\n'
            f'upstream_interfaces = ["{self.router_uif}"]\n'
            f"servers = [{', '.join(repr(s).replace(chr(39), chr(34)) for s in servers)}]\n"
            f"{extra}")
        return conf

    def start_inpath(self, name: str = "inpath", servers=None, extra: str = "",
                     timeout: float = 20.0) -> Server:
        """`xdns serve` with only `[inpath]` in the router namespace; returns once its
        control socket answers and the program is attached to both veths."""
        if not XDNS_BIN.exists():
            raise FileNotFoundError(f"{XDNS_BIN} not built (run cargo build --release)")
        conf = self.write_inpath_config(name, servers, extra)
        env = dict(os.environ, RUST_BACKTRACE="1")
        proc, err = self._spawn(self.router_ns, [XDNS_BIN, "serve", "--config", conf], name, env=env)
        srv = Server(name, self.router_caddr4, self.router_caddr6, proc, conf.parent, err,
                     {"conf": conf, "control": conf.parent / "control.sock"})
        deadline = time.monotonic() + timeout
        while True:
            if not srv.alive():
                raise RuntimeError(f"{name} exited with {proc.returncode}\n--- stderr ---\n{srv.stderr()[-3000:]}")
            if srv.extra["control"].exists():
                try:
                    if "inpath" in self.xdns_stats(srv):
                        break
                except (RuntimeError, ValueError):
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name}: no control socket after {timeout} s\n{srv.stderr()[-3000:]}")
            time.sleep(0.05)
        self.servers[name] = srv
        return srv

    def router_xdp(self) -> dict[str, bool]:
        """Whether each router veth has an XDP program attached now."""
        import re
        out = {}
        for dev in (self.router_cif, self.router_uif):
            link = self.router_run(["ip", "link", "show", "dev", dev]).stdout
            out[dev] = re.search(r"\bxdp(generic|drv|offload)?(/id:|\s)|prog/xdp", link) is not None
        return out
