"""Malformed input: 100,000 random and mutated UDP packets must not hurt xdns.

Every reply must parse with dnspython, be a response (QR=1) and carry the ID of a query sent
just before; afterwards xdns must still be alive, answer the whole corpus like before, and its
stderr must not contain a panic. The seed is printed; XDNS_FUZZ_SEED=<n> replays a run.
"""

from __future__ import annotations

import collections
import os
import random
import select
import socket
import struct
import time

import dns.exception
import dns.message

import corpus
from lab import DEFAULT_ZONES
from test_differential import compare, summarize

PACKETS = int(os.environ.get("XDNS_FUZZ_PACKETS", "100000"))
TIME_BUDGET = 90.0  # seconds for the whole flood, whatever the machine
VALID = [c.wire for c in corpus.CASES]


def _label_offsets(w: bytes) -> list[int]:
    """Offsets of the label-length bytes of the question name (if it parses)."""
    out, i = [], 12
    while i < len(w) and w[i] != 0 and len(out) < 128:
        if w[i] >= 0xC0:
            break
        out.append(i)
        i += w[i] + 1
    return out


def mutate(rng: random.Random) -> bytes:
    kind = rng.randrange(8)
    w = bytearray(rng.choice(VALID))
    if kind == 0:  # bit flips
        for _ in range(rng.randint(1, 8)):
            i = rng.randrange(len(w))
            w[i] ^= 1 << rng.randrange(8)
    elif kind == 1:  # truncation
        w = w[:rng.randrange(len(w))]
    elif kind == 2:  # label length corruption
        offs = _label_offsets(bytes(w))
        if offs:
            w[rng.choice(offs)] = rng.choice([0, 1, 63, 64, 100, 191, 0xC0, 0xFF, rng.randrange(256)])
    elif kind == 3:  # compression pointer loops in the question name
        style = rng.randrange(3)
        if style == 0:
            w[12:14] = b"\xc0\x0c"  # points at itself
        elif style == 1:
            w = w[:12] + b"\x01a\xc0\x0e\x00\x01\x00\x01"  # pointer to its own label run
        else:
            w = w[:12] + b"\xc0\x12\x00\x01\x00\x01\xc0\x0c\x00\x01\x00\x01"  # mutual
            w[4:6] = b"\x00\x02"
    elif kind == 4:  # huge counts
        for off in rng.sample([4, 6, 8, 10], rng.randint(1, 4)):
            w[off:off + 2] = rng.choice([b"\xff\xff", b"\x80\x00", b"\x00\x02", b"\x00\x40"])
    elif kind == 5:  # pure random bytes
        w = bytearray(rng.randbytes(rng.choice([0, 1, 11, 12, 13, 17, 50, 300, 512, 1400])))
    elif kind == 6:  # random tail appended / garbage OPT
        w += rng.randbytes(rng.randint(1, 40))
        if rng.random() < 0.5:
            w[10:12] = b"\x00\x01"
            w += b"\x00\x00\x29\xff\xff\x00\x00\x00\x00\xff\xff"
    else:  # header bits (opcode, flags, rcode) randomized
        w[2] = rng.randrange(256)
        w[3] = rng.randrange(256)
    return bytes(w)


def parse_reply(wire: bytes) -> dns.message.Message:
    # dnspython refuses unassigned opcodes (3, 6-15) that xdns legitimately echoes in NOTIMP
    # replies; the opcode bits do not change the wire layout, so parse with them cleared.
    w = bytearray(wire)
    if len(w) >= 3:
        w[2] &= 0x87
    return dns.message.from_wire(bytes(w))


def flood(lab, addr: str, rng: random.Random, packets: int) -> tuple[int, int, list[str]]:
    """Send `packets` mutated queries to addr:53; returns (sent, replies, problems)."""
    s = lab.client_socket(socket.AF_INET6 if ":" in addr else socket.AF_INET, socket.SOCK_DGRAM)
    s.setblocking(False)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    dest = (addr, 53)
    recent: collections.deque[int] = collections.deque(maxlen=4096)
    recent_set: collections.Counter[int] = collections.Counter()
    sent = replies = 0
    bad: list[str] = []
    next_id = 0
    deadline = time.monotonic() + TIME_BUDGET

    def drain(wait: float) -> None:
        nonlocal replies
        while True:
            r, _, _ = select.select([s], [], [], wait)
            if not r:
                return
            wait = 0
            try:
                data = s.recv(65535)
            except BlockingIOError:
                return
            replies += 1
            if len(bad) > 20:
                continue
            try:
                m = parse_reply(data)
            except (dns.exception.DNSException, ValueError, struct.error, IndexError) as e:
                bad.append(f"unparseable reply ({type(e).__name__}: {e}): {data[:64].hex()}")
                continue
            if not m.flags & 0x8000:
                bad.append(f"reply without QR: {data[:64].hex()}")
            if recent_set[m.id] == 0:
                bad.append(f"reply ID {m.id} matches no recent query: {data[:64].hex()}")

    with s:
        while sent < packets and time.monotonic() < deadline:
            for _ in range(32):
                pkt = mutate(rng)
                if len(pkt) >= 2:  # unique ID per in-flight query, so echo is checkable
                    pkt = next_id.to_bytes(2, "big") + pkt[2:]
                    if len(recent) == recent.maxlen:
                        recent_set[recent[0]] -= 1
                    recent.append(next_id)
                    recent_set[next_id] += 1
                    next_id = (next_id + 1) & 0xFFFF
                try:
                    s.sendto(pkt, dest)
                    sent += 1
                except BlockingIOError:
                    break
            drain(0.0005)
        drain(1.0)
    print(f"{addr}: sent {sent}, replies {replies}")
    return sent, replies, bad


def test_malformed_flood(lab, knot, nsd):
    seed = int(os.environ.get("XDNS_FUZZ_SEED", random.randrange(1 << 32)))
    print(f"XDNS_FUZZ_SEED={seed}")
    srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-fuzz")
    sent, replies, bad = flood(lab, srv.addr4, random.Random(seed), PACKETS)

    assert sent >= PACKETS, f"only {sent} packets sent in {TIME_BUDGET}s"
    assert replies > 0.05 * sent, f"suspiciously few replies: {replies} for {sent}"
    assert not bad, "\n".join(bad)
    assert srv.alive(), f"xdns died: {srv.proc.returncode}\n{srv.stderr()[-3000:]}"
    assert "panicked" not in srv.stderr(), srv.stderr()[-3000:]

    # Still answers the corpus exactly like before the flood.
    failures = []
    for c in corpus.CASES:
        k = summarize(lab.udp(knot.addr4, c.wire, timeout=1.0))
        n = summarize(lab.udp(nsd.addr4, c.wire, timeout=1.0))
        x = summarize(lab.udp(srv.addr4, c.wire, timeout=1.0))
        _, msg = compare(k, n, x, c.id)
        if msg:
            failures.append(c.id)
    # The differential test reports the details; here only changes caused by the flood matter,
    # so compare against the same cases sent to a fresh instance.
    fresh = lab.start_xdns(DEFAULT_ZONES, name="xdns-fresh")
    regressions = []
    for c in corpus.CASES:
        a = summarize(lab.udp(srv.addr4, c.wire, timeout=1.0))
        b = summarize(lab.udp(fresh.addr4, c.wire, timeout=1.0))
        if a != b:
            regressions.append(f"{c.id}: after flood {a} vs fresh {b}")
    assert not regressions, "\n".join(regressions)
    health = [cid for cid in corpus.HEALTH if cid in failures]
    assert not health, f"basic answers wrong after the flood: {health}"
    assert srv.alive() and "panicked" not in srv.stderr()
