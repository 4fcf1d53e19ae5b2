"""dnstap (issue 27, `[dnstap]`): the userspace query plan's queries and responses, XDP off,
read back by real dnstap readers and compared with the queries sent; with `xdp = true`, the
answers XDP sends that a telemetry rule selects (through the kernel's ring buffer).

- to a file: kdig's queries (UDP and TCP, IPv4 and IPv6) come back from `kdig -G FILE` with
  their names, types, client addresses and ports and protocols; the Frame Streams and protobuf
  fields kdig does not print (message type, server address and port, identity) are checked
  by a small decoder here; SIGHUP moves the log to another file, the first one ends with STOP;
- to a unix socket: `fstrm_capture` (fstrm-bin) does the bidirectional handshake and writes
  what it gets, read back with `kdig -G`; when it restarts, xdns connects again;
- a reader that stops reading never holds answers back: every query is answered, the
  messages that do not fit are dropped and counted (`dnstap.dropped_queue_full`);
- `xdns check` names the file and line of a bad `[dnstap]`;
- XDP: the selected answers' queries and responses byte for byte, with both ends and
  wall-clock times, read back by kdig; an unselected kernel answer absent; the kernel's
  counters (`telemetry.dnstap_xdp_*`) in `xdns stats` and `/metrics`. A full ring (drops
  counted, answers unchanged) is tested with BPF_PROG_TEST_RUN (crates/xdns-bpf/tests/telemetry.rs).
"""

from __future__ import annotations

import re
import signal
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path

import dns.message
import pytest

from lab import XDNS_BIN, Lab

CONTENT_TYPE = b"protobuf:dnstap.Dnstap"
AUTH_QUERY, AUTH_RESPONSE = 1, 2


@pytest.fixture(scope="module")
def tlab():
    with Lab(prefix="xdl") as lab:
        yield lab


# --- a small Frame Streams + protobuf reader, independent of the daemon's encoder ---

def varint(b: bytes, i: int) -> tuple[int, int]:
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def fields(b: bytes) -> dict[int, object]:
    """A protobuf message's fields (the last of each number)."""
    out, i = {}, 0
    while i < len(b):
        key, i = varint(b, i)
        n, t = key >> 3, key & 7
        if t == 0:
            out[n], i = varint(b, i)
        elif t == 2:
            ln, i = varint(b, i)
            out[n], i = b[i:i + ln], i + ln
        elif t == 5:
            out[n], i = struct.unpack("<I", b[i:i + 4])[0], i + 4
        elif t == 1:
            out[n], i = struct.unpack("<Q", b[i:i + 8])[0], i + 8
        else:
            raise ValueError(f"wire type {t}")
    return out


def frames(data: bytes) -> list:
    """A Frame Streams byte stream: control frames as ("START"...), data frames as bytes."""
    names = {1: "ACCEPT", 2: "START", 3: "STOP", 4: "READY", 5: "FINISH"}
    out, i = [], 0
    while i < len(data):
        (ln,) = struct.unpack(">I", data[i:i + 4])
        if ln == 0:
            (cl,) = struct.unpack(">I", data[i + 4:i + 8])
            (kind,) = struct.unpack(">I", data[i + 8:i + 12])
            out.append(names[kind])
            i += 8 + cl
        else:
            out.append(data[i + 4:i + 4 + ln])
            i += 4 + ln
    return out


def messages(path: Path) -> list[dict]:
    """The dnstap messages of a file, decoded."""
    out = []
    for f in frames(path.read_bytes()):
        if isinstance(f, str):
            continue
        top = fields(f)
        m = fields(top[14])
        m["identity"] = top.get(1)
        out.append(m)
    return out


def kdig_read(path: Path) -> list[dict]:
    """`kdig -G FILE +qr`: each message's direction, address, port, protocol, name, type."""
    p = subprocess.run(["kdig", "-G", str(path), "+qr"], capture_output=True, text=True, timeout=20)
    assert p.returncode == 0, p.stderr
    out, question = [], None
    for line in p.stdout.splitlines():
        m = re.match(r";; (\S+)\s+(?:\d+\s+)?IN\s+(\S+)$", line)
        if m:
            question = (m.group(1).lower(), m.group(2))
            continue
        m = re.match(r";; (From|To) (\S+)@(\d+)\((UDP|TCP)\)", line)
        if m:
            out.append({"dir": m.group(1), "addr": m.group(2), "port": int(m.group(3)),
                        "proto": m.group(4), "question": question})
            question = None
    return out


# --- helpers ---

def config(key: str, value: str, extra: str = "") -> str:
    return f'\n[dnstap]\n{key} = "{value}"\nidentity = "xdl-tap"\n{extra}'


def kdig(lab: Lab, srv, name: str, qtype: str, tcp: bool, v6: bool) -> None:
    """Ask with kdig from the client (an answer must come)."""
    server = srv.addr6 if v6 else srv.addr4
    args = ["kdig", f"@{server}", name, qtype, "+retry=0", "+timeout=3"]
    if tcp:
        args.append("+tcp")
    p = lab.client_run(args, check=False, timeout=10)
    assert p.returncode == 0 and "status:" in p.stdout, p.stdout + p.stderr


def stats(lab: Lab, srv) -> dict:
    return lab.xdns_stats(srv).get("dnstap", {})


def wait(cond, timeout: float = 10.0, what: str = ""):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


QUERIES = [  # name, type, tcp, IPv6
    ("www.example.com.", "A", False, False),
    ("nope.example.com.", "AAAA", True, False),
    ("example.net.", "SOA", False, True),
    ("www.example.com.", "TXT", True, True),
]


def check_against_queries(lab: Lab, srv, path: Path, queries) -> None:
    """The file ends with each query and its response, as sent: kdig's view and ours. Before
    them only the lab's readiness probes (SOA of each zone over UDP/IPv4, answered)."""
    k = 2 * len(queries)
    all_seen, all_ours = kdig_read(path), messages(path)
    assert len(all_seen) == len(all_ours) >= k, (len(all_seen), len(all_ours))
    for s in all_seen[:-k]:
        assert s["question"] in {("example.com.", "SOA"), ("example.net.", "SOA")} and s["proto"] == "UDP", s
    seen, ours = all_seen[-k:], all_ours[-k:]
    for n, (name, qtype, tcp, v6) in enumerate(queries):
        q, r = seen[2 * n], seen[2 * n + 1]
        client = lab.client_addr6 if v6 else lab.client_addr4
        proto = "TCP" if tcp else "UDP"
        assert q == {"dir": "From", "addr": client, "port": q["port"], "proto": proto,
                     "question": (name, qtype)}, q
        assert r == dict(q, dir="To"), (q, r)
        assert q["port"] > 0
    assert [m[1] for m in all_ours] == [AUTH_QUERY, AUTH_RESPONSE] * (len(all_ours) // 2)
    for n, (name, qtype, tcp, v6) in enumerate(queries):
        for m in ours[2 * n:2 * n + 2]:
            server = srv.addr6 if v6 else srv.addr4
            assert socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, m[5]) == server
            assert m[7] == 53
            assert m[2] == (2 if v6 else 1) and m[3] == (2 if tcp else 1)
            assert m["identity"] == b"xdl-tap"
        q, r = ours[2 * n], ours[2 * n + 1]
        assert q[6] == r[6] == seen[2 * n]["port"]
        assert dns.message.from_wire(q[10]).question[0].name.to_text() == name
        assert dns.message.from_wire(r[14]).id == dns.message.from_wire(q[10]).id
        # the response carries its query's time and its own, not earlier
        assert (r[12], r[13]) >= (r[8], r[9]) == (q[8], q[9])


def test_file_read_back_by_kdig_and_sighup_moves_it(tlab: Lab):
    wd = tlab.dir / "tap-file"
    wd.mkdir(exist_ok=True)
    first, second = wd / "first.dnstap", wd / "second.dnstap"
    srv = tlab.start_xdns(name="xdns-tap-file", extra=config("file", str(first)))
    try:
        for q in QUERIES:
            kdig(tlab, srv, *q)
        base = wait(lambda: stats(tlab, srv).get("sent"), what="dnstap.sent")
        conf = srv.extra["conf"]
        conf.write_text(conf.read_text().replace(str(first), str(second)))
        srv.proc.send_signal(signal.SIGHUP)
        wait(lambda: second.exists(), what="the second file")
        kdig(tlab, srv, "www.example.com.", "A", False, False)
        wait(lambda: stats(tlab, srv).get("sent", 0) >= base + 2, what="the message after SIGHUP")
    finally:
        assert tlab.stop(srv) == 0, srv.stderr()[-3000:]
    # the first stream: START (with the content type), the messages, STOP (the reload)
    f = frames(first.read_bytes())
    assert f[0] == "START" and f[-1] == "STOP", f[:1] + f[-1:]
    assert first.read_bytes().find(CONTENT_TYPE) > 0
    check_against_queries(tlab, srv, first, QUERIES)
    # the second stream: only the query after the reload, and STOP at the stop
    assert len(messages(second)) == 2
    check_against_queries(tlab, srv, second, [("www.example.com.", "A", False, False)])
    assert frames(second.read_bytes())[-1] == "STOP"


def start_capture(path: Path, sock: Path) -> subprocess.Popen:
    p = subprocess.Popen(["fstrm_capture", "-t", CONTENT_TYPE.decode(), "-u", str(sock), "-w", str(path)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wait(lambda: sock.exists(), what="fstrm_capture's socket")
    return p


def stop_capture(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGINT)
    p.wait(timeout=10)


def test_socket_to_fstrm_capture_and_reader_restart(tlab: Lab):
    wd = tlab.dir / "tap-sock"
    wd.mkdir(exist_ok=True)
    sock, cap1, cap2 = wd / "tap.sock", wd / "cap1.fstrm", wd / "cap2.fstrm"
    reader = start_capture(cap1, sock)
    srv = tlab.start_xdns(name="xdns-tap-sock", extra=config("socket", str(sock)))
    try:
        wait(lambda: stats(tlab, srv).get("connections") == 1, what="the handshake")
        before = stats(tlab, srv)["sent"]
        for q in QUERIES[:2]:
            kdig(tlab, srv, *q)
        wait(lambda: stats(tlab, srv)["sent"] == before + 4, what="4 messages sent")
        stop_capture(reader)
        # the reader restarts: xdns notices it went away and connects to the new one
        sock.unlink(missing_ok=True)
        reader = start_capture(cap2, sock)
        wait(lambda: stats(tlab, srv).get("connections") == 2, timeout=10, what="a second handshake")
        before = stats(tlab, srv)["sent"]
        for q in QUERIES[2:]:
            kdig(tlab, srv, *q)
        wait(lambda: stats(tlab, srv)["sent"] == before + 4, what="4 more messages sent")
    finally:
        assert tlab.stop(srv) == 0, srv.stderr()[-3000:]
        stop_capture(reader)
    assert "panicked" not in srv.stderr()
    # the first capture holds the readiness probes and the first two queries; the second
    # capture the last two (nothing else was asked meanwhile)
    check_against_queries(tlab, srv, cap1, QUERIES[:2])
    assert len(messages(cap2)) == 4
    check_against_queries(tlab, srv, cap2, QUERIES[2:])


class StalledReader:
    """A Frame Streams reader that takes the handshake and then never reads again."""

    def __init__(self, path: Path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(str(path))
        self.sock.listen(16)
        self.conns = []
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        c, _ = self.sock.accept()
        self.conns.append(c)
        c.settimeout(10)
        hdr = c.recv(8)
        assert hdr[:4] == b"\0\0\0\0", hdr
        (ln,) = struct.unpack(">I", hdr[4:8])
        body = c.recv(ln)
        assert struct.unpack(">I", body[:4])[0] == 4 and CONTENT_TYPE in body  # READY
        accept = struct.pack(">III", 1, 1, len(CONTENT_TYPE)) + CONTENT_TYPE
        c.sendall(struct.pack(">II", 0, len(accept)) + accept)
        # ... and read nothing more

    def close(self):
        for c in self.conns:
            c.close()
        self.sock.close()


def test_a_reader_that_stops_reading_never_blocks_answers(tlab: Lab):
    wd = tlab.dir / "tap-stall"
    wd.mkdir(exist_ok=True)
    path = wd / "stall.sock"
    reader = StalledReader(path)
    srv = tlab.start_xdns(name="xdns-tap-stall", extra=config("socket", str(path), "queue = 64\n"))
    try:
        wait(lambda: stats(tlab, srv).get("connections") == 1, what="the handshake")
        q = dns.message.make_query("www.example.com.", "TXT")
        n, answered, slowest = 3000, 0, 0.0
        with tlab.client_socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.settimeout(1.0)
            t0 = time.monotonic()
            for i in range(n):
                q.id = i & 0xFFFF
                t = time.monotonic()
                s.sendto(q.to_wire(), (srv.addr4, 53))
                try:
                    while True:
                        r = dns.message.from_wire(s.recvfrom(4096)[0])
                        if r.id == q.id:
                            answered += 1
                            break
                except socket.timeout:
                    pass
                slowest = max(slowest, time.monotonic() - t)
            took = time.monotonic() - t0
        st = stats(tlab, srv)
        print(f"\n{n} queries in {took:.2f} s, slowest {slowest * 1000:.1f} ms; dnstap {st}")
        # each answer within the 1 s timeout: none waited for the writer, which is stuck in
        # a write for up to 2 s before it gives the connection up
        assert answered == n, f"{answered} of {n} answered"
        assert st["dropped_queue_full"] > 0, st
        assert st["sent"] + st["dropped_queue_full"] + st["dropped_no_reader"] <= 2 * n + 20, st
    finally:
        assert tlab.stop(srv) == 0, srv.stderr()[-3000:]
        reader.close()
    assert "panicked" not in srv.stderr()


def test_check_names_a_bad_dnstap_section(tlab: Lab):
    wd = tlab.dir / "tap-check"
    wd.mkdir(exist_ok=True)
    conf = wd / "bad.toml"
    conf.write_text('listen = ["127.0.0.1:53"]\n\n[dnstap]\nsocket = "/run/x.sock"\nfile = "x.dnstap"\n')
    p = subprocess.run([XDNS_BIN, "check", "--config", conf], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1
    assert f"{conf}:3: [dnstap] has both `socket` and `file`" in p.stderr, p.stderr
    conf.write_text('listen = ["127.0.0.1:53"]\n[dnstap]\nfile = "x.dnstap"\nqueue = 0\n')
    p = subprocess.run([XDNS_BIN, "check", "--config", conf], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and f"{conf}:4: [dnstap] queue 0 out of range" in p.stderr, p.stderr
    conf.write_text('listen = ["127.0.0.1:53"]\n[dnstap]\nfile = "x.dnstap"\nxdp = "yes"\n')
    p = subprocess.run([XDNS_BIN, "check", "--config", conf], capture_output=True, text=True, timeout=20)
    assert p.returncode == 1 and f"{conf}:4:" in p.stderr and "bool" in p.stderr, p.stderr


CLIENT_QUERY, CLIENT_RESPONSE, RESOLVER_QUERY, RESOLVER_RESPONSE = 5, 6, 3, 4


def test_resolver_logs_its_clients_and_its_upstream_queries():
    """xdns as a resolver on the lab's fake tree: a name asked twice (a miss, then a cache
    hit) is two CLIENT_QUERY/CLIENT_RESPONSE pairs to the client's port, and its resolution
    RESOLVER_QUERY messages to the tree's servers (port 53) with the RESOLVER_RESPONSE that
    holds the answer."""
    from tree import Tree, ask_a, start_xdns_resolver, stop

    name, address = "dnstap1.wild.example.", "198.19.50.1"
    with Lab(prefix="xdl") as lab:
        tree = Tree(lab).start()
        path = lab.dir / "resolver.dnstap"
        srv = start_xdns_resolver(lab, tree, name="xdns-tap-resolver",
                                  extra=f'\n[dnstap]\nfile = "{path}"\nidentity = "xdl-tap"\n')
        try:
            first = ask_a(lab, srv.addr4, name, address)
            second = ask_a(lab, srv.addr4, name, address)
            wait(lambda: lab.xdns_stats(srv).get("dnstap", {}).get("sent", 0) > 0, what="dnstap.sent")
        finally:
            assert stop(lab, srv) == 0, srv.stderr()[-3000:]
        ours = messages(path)
        kinds = {m[1] for m in ours}
        assert AUTH_QUERY not in kinds and AUTH_RESPONSE not in kinds, kinds

        def about(m, field):
            return dns.message.from_wire(m[field]).question[0].name.to_text().lower() == name

        queries = [m for m in ours if m[1] == CLIENT_QUERY and about(m, 10)]
        answers = [m for m in ours if m[1] == CLIENT_RESPONSE and about(m, 14)]
        assert len(queries) == len(answers) == 2, (len(queries), len(answers))
        for q, a, sent in zip(queries, answers, (first, second)):
            assert socket.inet_ntoa(q[4]) == lab.client_addr4 and q[6] == a[6] > 0
            assert socket.inet_ntoa(q[5]) == srv.addr4 and q[7] == 53
            r = dns.message.from_wire(a[14])
            assert r.id == sent.id and [rd.to_text() for rr in r.answer for rd in rr] == [address]
        upstream = [m for m in ours if m[1] == RESOLVER_QUERY]
        replies = [m for m in ours if m[1] == RESOLVER_RESPONSE]
        assert upstream and all(m[7] == 53 for m in upstream), upstream[:1]
        tree_addrs = {h.addr4 for h in tree.hosts.values()} | {h.addr6 for h in tree.hosts.values()}
        for m in upstream + replies:
            family = socket.AF_INET6 if len(m[5]) == 16 else socket.AF_INET
            assert socket.inet_ntop(family, m[5]) in tree_addrs
        final = [m for m in replies
                 if [rd.to_text() for rr in dns.message.from_wire(m[14]).answer for rd in rr] == [address]]
        assert final, "no upstream reply with the answer"
        # kdig reads the same file: the client's two queries and answers are there
        seen = [s for s in kdig_read(path) if s["question"] == (name, "A") and s["addr"] == lab.client_addr4]
        assert [s["dir"] for s in seen].count("From") == 2 and [s["dir"] for s in seen].count("To") == 2, seen


def test_xdp_answers_selected_by_telemetry_rules_read_back_by_kdig(tlab: Lab):
    """`[dnstap] xdp = true`: the answers XDP sends that a telemetry rule selects come
    through the kernel's ring buffer as AUTH_QUERY/AUTH_RESPONSE pairs: the query's bytes as
    sent, the answer's as received, the client's address and port, ours, UDP, wall-clock
    times (the kernel's monotonic clock moved), read back by kdig. The kernel answered them
    (its counters moved by exactly the queries sent). A query the rule does not select,
    answered by XDP too, is nowhere in the file."""
    wd = tlab.dir / "tap-xdp"
    wd.mkdir(exist_ok=True)
    path = wd / "xdp.dnstap"
    extra = (config("file", str(path), "xdp = true\n")
             + '\n[telemetry]\nrules = ["qname=example.com"]\n')
    srv = tlab.start_xdns(name="xdns-tap-xdp", xdp="native", extra=extra)
    sent = []  # (query bytes, answer bytes, client (addr, port), server addr, family)
    try:
        st0 = tlab.xdns_stats(srv)
        answered0 = dict(st0.get("xdp", {})).get("answered", 0)
        tel0 = st0["telemetry"]
        sent0 = st0.get("dnstap", {}).get("sent", 0)
        t_start = time.time()
        asks = [("www.example.com.", "A", False, 0x1234), ("www.example.com.", "TXT", True, 0x2345),
                ("nope.example.com.", "AAAA", False, 0x3456), ("example.net.", "SOA", False, 0x4567)]
        for name, qtype, v6, qid in asks:
            fam = socket.AF_INET6 if v6 else socket.AF_INET
            q = dns.message.make_query(name, qtype, use_edns=0)
            q.id = qid
            wire = q.to_wire()
            with tlab.client_socket(fam, socket.SOCK_DGRAM) as s:
                s.settimeout(3)
                s.bind((tlab.client_addr6 if v6 else tlab.client_addr4, 0))
                server = srv.addr6 if v6 else srv.addr4
                s.sendto(wire, (server, 53))
                ans, _ = s.recvfrom(4096)
                sent.append((wire, ans, s.getsockname()[:2], server, fam, name))
            assert dns.message.from_wire(ans).id == qid
        # three selected (under example.com), one not (example.net)
        wait(lambda: tlab.xdns_stats(srv)["telemetry"]["dnstap_xdp_read"] >= tel0["dnstap_xdp_read"] + 3,
             what="three events read")
        wait(lambda: stats(tlab, srv).get("sent", 0) >= sent0 + 6, what="six messages written")
        st1 = tlab.xdns_stats(srv)
        assert dict(st1["xdp"]).get("answered", 0) - answered0 == 4, st1["xdp"]
        tel1 = st1["telemetry"]
        for k, want in (("dnstap_xdp_events", 3), ("dnstap_xdp_ring_full", 0), ("dnstap_xdp_too_long", 0),
                        ("dnstap_xdp_read", 3)):
            assert tel1[k] - tel0[k] == want, (k, tel0, tel1)
        metrics = tlab.xdns_metrics(srv)
        assert f'xdns_telemetry_total{{counter="dnstap_xdp_events"}} {tel1["dnstap_xdp_events"]}' in metrics
        assert 'xdns_telemetry_total{counter="dnstap_xdp_ring_full"} 0' in metrics
    finally:
        assert tlab.stop(srv) == 0, srv.stderr()[-3000:]
    assert "panicked" not in srv.stderr()
    ours = messages(path)
    by_query = {bytes(m[10]): m for m in ours if m[1] == AUTH_QUERY}
    by_answer = {bytes(m[14]): m for m in ours if m[1] == AUTH_RESPONSE}
    for wire, ans, (caddr, cport), server, fam, name in sent[:3]:
        q, r = by_query.get(wire), by_answer.get(ans)
        assert q is not None and r is not None, (name, len(ours))
        for m in (q, r):
            assert socket.inet_ntop(fam, m[4]) == caddr and m[6] == cport, m
            assert socket.inet_ntop(fam, m[5]) == server and m[7] == 53, m
            assert m[2] == (2 if fam == socket.AF_INET6 else 1) and m[3] == 1, m
            assert m["identity"] == b"xdl-tap"
        # wall-clock times: the query's within the test, the response's after it
        assert t_start - 1 <= q[8] + q[9] / 1e9 <= time.time() + 1, (t_start, q[8])
        assert (r[8], r[9]) == (q[8], q[9]) and (r[12], r[13]) >= (q[8], q[9])
    wire, ans = sent[3][0], sent[3][1]
    assert wire not in by_query and ans not in by_answer, "the unselected query was logged"
    # a real reader: kdig reads the same file, our three questions from our client ports
    seen = kdig_read(path)
    for wire, ans, (caddr, cport), server, fam, name in sent[:3]:
        qtype = dns.message.from_wire(wire).question[0].rdtype
        qt = dns.rdatatype.to_text(qtype)
        mine = [s for s in seen if s["addr"] == caddr and s["port"] == cport]
        assert [(s["dir"], s["question"], s["proto"]) for s in mine] == [
            ("From", (name, qt), "UDP"), ("To", (name, qt), "UDP")], mine
    assert not [s for s in seen if s["question"] == ("example.net.", "SOA") and s["port"] == sent[3][2][1]]
