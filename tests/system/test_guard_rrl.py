"""RRL and cookies on the kernel's answers (issue 25, bpf/rrl.h), side by side with Knot DNS.

xdns with XDP on (generic mode on the lab's veth: the kernel answers) and `[guard] rrl`, and
knotd with mod-rrl at the same rate and slip, get the same flood from one client address:

- each answers about `rate` whole answers a second, and slips (TC=1, the question only, no
  OPT) every `slip`-th limited one; both are printed, and xdns's limiting is the kernel's
  (`xdp.drop_rrl`, `xdp.answered_slip`);
- a client of the flooded /24 that presents a valid server cookie (learnt from a first
  answer, as `kdig +cookie` does) is never limited: the kernel verifies the cookie and, fresh,
  answers with it echoed (`xdp_guard.cookie_echoed`), as userspace would;
- another client (another prefix) is answered whole while the flood goes on;
- an allowlisted client of the flooded /24 is never limited: its answers are the kernel's
  (`xdp.answered`), whole, however fast it asks (`[guard] allowlist`: never rate limited);
- the daemon rotates the cookie secret (`cookie_secret_lifetime`): a cookie outlives one
  rotation in the kernel and in userspace, not two;
- a resolver with RRL and cookies and no detection starts, its kernel cache answers are
  limited, and a client with a server cookie gets them with the cookie echoed.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
import time

import dns.edns
import dns.flags
import dns.message

import resolver_corpus as corpus
from lab import DEFAULT_ZONES, Lab, write_knot_conf
from tree import Tree, start_xdns_resolver, stop

RATE = 20
SLIP = 2
FLOOD = 400


def flood(lab: Lab, addr: str, src: str, n: int = FLOOD, seconds: float = 2.0,
          qname: str = "www.example.com.", qtype: str = "A") -> tuple[int, int, int, float, list, int]:
    """Send `n` queries for `qname` `qtype` from `src` over `seconds`; (whole, slipped,
    lost, elapsed, the slips' wire, whole answers to the second half of the queries)."""
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    with lab.client_socket(fam, socket.SOCK_DGRAM) as s:
        s.bind((src, 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.setblocking(False)
        got: dict[int, bytes] = {}

        def drain():
            while True:
                try:
                    w = s.recv(65535)
                except BlockingIOError:
                    return
                got[int.from_bytes(w[:2], "big")] = w

        t0 = time.monotonic()
        for i in range(n):
            q = dns.message.make_query(qname, qtype)
            q.id = i
            s.sendto(q.to_wire(), (addr, 53))
            drain()
            pause = t0 + seconds * (i + 1) / n - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        elapsed = time.monotonic() - t0
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            drain()
            time.sleep(0.02)
    whole = slipped = late = 0
    slips = []
    for i, w in got.items():
        m = dns.message.from_wire(w)
        if m.flags & dns.flags.TC:
            slipped += 1
            slips.append(w)
        elif m.answer:
            whole += 1
            late += i >= n // 2
    return whole, slipped, n - len(got), elapsed, slips, late


def ask(lab: Lab, addr: str, src: str, options=(), timeout: float = 1.0):
    fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
    q = dns.message.make_query("www.example.com.", "A", use_edns=0, options=list(options))
    with lab.client_socket(fam, socket.SOCK_DGRAM) as s:
        s.bind((src, 0))
        s.settimeout(timeout)
        s.sendto(q.to_wire(), (addr, 53))
        try:
            return dns.message.from_wire(s.recvfrom(65535)[0])
        except socket.timeout:
            return None


def start_knot_rrl(lab: Lab):
    """knotd with mod-rrl (rate-limit RATE, slip SLIP) on every zone."""
    a4, a6 = lab.new_address()
    wd = lab.dir / "knot-rrl"
    (wd / "db").mkdir(parents=True)
    from pathlib import Path
    conf = write_knot_conf(wd, a4, a6, [(o, Path(p).resolve()) for o, p in DEFAULT_ZONES],
                           extra=f"mod-rrl:\n  - id: flood\n    rate-limit: {RATE}\n    slip: {SLIP}\n")
    text = conf.read_text().replace("    journal-content: none\n",
                                    "    journal-content: none\n    global-module: mod-rrl/flood\n")
    conf.write_text(text)
    proc, err = lab._spawn(lab.server_ns, ["knotd", "-c", conf], "knot-rrl")
    from lab import Server
    srv = Server("knot-rrl", a4, a6, proc, wd, err, {"conf": conf})
    lab._wait_all(srv, DEFAULT_ZONES)
    lab.servers["knot-rrl"] = srv
    return srv


def test_kernel_rrl_beside_knot_and_cookies_bypass_it():
    with Lab(prefix="xdl") as lab:
        net = ipaddress.ip_interface(f"{lab.client_addr4}/24").network
        flooder, cookie_client, trusted = (str(net.network_address + 160 + i) for i in range(3))
        for a in (flooder, cookie_client, trusted):
            lab.client_run(["ip", "addr", "add", f"{a}/32", "dev", lab.client_if], check=False)
        knot = start_knot_rrl(lab)
        (lab.dir / "trusted.txt").write_text(f"{trusted}\n")
        srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-rrl", xdp="generic",
                             extra=f"\n[guard]\nrrl = {{ rate = {RATE}, slip = {SLIP} }}\ncookies = true\n"
                                   f'allowlist = "{lab.dir}/trusted.txt"\n')
        before = lab.xdns_stats(srv)["xdp"]

        results = {}
        for name, s in (("xdns", srv), ("knot", knot)):
            results[name] = flood(lab, s.addr4, flooder)
            time.sleep(1.5)  # the accounts fill up again before the next flood
        for name, (whole, slipped, lost, elapsed, _, late) in results.items():
            print(f"{name}: {FLOOD} queries in {elapsed:.2f} s at rate {RATE}, slip {SLIP}: "
                  f"{whole} whole ({late} in the last second), {slipped} slipped (TC=1), {lost} dropped")
        # the burst differs: xdns (as its userspace RRL) holds one second's worth, Knot 3.2's
        # mod-rrl four (RRL_CAPACITY); once it is spent both answer `rate` a second
        burst = {"xdns": 1, "knot": 4}
        for name, (whole, slipped, lost, elapsed, _, late) in results.items():
            assert whole <= RATE * (elapsed + burst[name]) + 5, (name, whole)
            assert RATE * 0.5 <= late <= RATE * 1.5 + 2, (name, late)
            limited = FLOOD - whole
            # every other limited answer slips (allow for losses on a loaded host)
            assert slipped >= limited * 0.3 and lost >= limited * 0.3, (name, slipped, lost)
        xl, kl = results["xdns"][5], results["knot"][5]
        assert abs(xl - kl) <= RATE * 0.75, f"last second: xdns {xl} whole answers, knot {kl}"

        # the slips are the kernel's: header and question, TC=1, nothing else
        after = lab.xdns_stats(srv)["xdp"]
        moved = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        print(f"xdns kernel verdicts during the flood: {moved}")
        xw = results["xdns"][0]
        assert moved["drop_rrl"] >= (FLOOD - xw) * 0.3 and moved["answered_slip"] >= (FLOOD - xw) * 0.3, moved
        w = results["xdns"][4][0]
        m = dns.message.from_wire(w)
        assert not m.answer and not m.authority and not m.additional and m.edns < 0, m
        assert len(w) == 12 + len(dns.name.from_text("www.example.com.").to_wire()) + 4, w

        # a cookie client in the flooded /24 (its account spent): learn the server cookie
        # from a first answer (the kernel passes the cookie query; userspace adds the cookie)
        fl = flood(lab, srv.addr4, flooder, n=100, seconds=0.3)
        assert fl[0] < 100
        client_cookie = bytes(range(1, 9))
        r = None
        for _ in range(20):
            r = ask(lab, srv.addr4, cookie_client, options=[dns.edns.GenericOption(10, client_cookie)])
            if r is not None and any(o.otype == 10 for o in r.options):
                break
            time.sleep(0.2)
        cookie = next(o for o in r.options if o.otype == 10).to_wire()
        assert cookie[:8] == client_cookie and len(cookie) == 24, cookie
        proven = [dns.edns.GenericOption(10, cookie)]
        echoed0 = lab.xdns_stats(srv).get("xdp_guard", {}).get("cookie_echoed", 0)
        answered = sum(1 for _ in range(60)
                       if (x := ask(lab, srv.addr4, cookie_client, options=proven)) is not None
                       and not x.flags & dns.flags.TC and x.answer
                       and [o.to_wire() for o in x.options if o.otype == 10] == [cookie])
        assert answered == 60, answered
        # kdig +cookie learns and presents it too (its second query carries the server cookie)
        kd = subprocess.run(["ip", "netns", "exec", lab.client_ns, "kdig", f"@{srv.addr4}", "-b", cookie_client,
                             "+cookie", "+retry=0", "www.example.com", "A"], capture_output=True, text=True, timeout=10)
        assert "COOKIE" in kd.stdout and "198.18.0.10" in kd.stdout, kd.stdout + kd.stderr
        # another client (another prefix) is answered whole during a flood
        other = lab.client_addr6
        fl = flood(lab, srv.addr4, flooder, n=200, seconds=0.5)
        r = ask(lab, srv.addr6, other)
        assert r is not None and r.answer and not r.flags & dns.flags.TC, r
        # an allowlisted client of the flooded /24: the kernel answers it whole, never limited
        before = lab.xdns_stats(srv)["xdp"]
        whole, slipped, lost, elapsed, _, late = flood(lab, srv.addr4, trusted, n=200, seconds=1.0)
        after = lab.xdns_stats(srv)["xdp"]
        moved = {k: after.get(k, 0) - before.get(k, 0) for k in after}
        print(f"allowlisted {trusted}: 200 queries in {elapsed:.2f} s: {whole} whole, {slipped} slipped, "
              f"{lost} lost; kernel verdicts {moved}")
        assert slipped == 0 and whole >= 196, (whole, slipped, lost)
        assert moved.get("drop_rrl", 0) == 0 and moved.get("answered_slip", 0) == 0, moved
        assert moved["answered"] >= 196, moved
        st = lab.xdns_stats(srv)
        print(f"xdns after the cookie client: xdp {st['xdp']}, guard {st['guard']}, xdp_guard {st.get('xdp_guard')}")
        # the proven client's 60 answers came from the kernel, its cookie echoed
        assert st["xdp_guard"]["cookie_echoed"] - echoed0 >= 60, st["xdp_guard"]
        assert lab.stop(srv) == 0


def test_cookie_secret_rotation_keeps_the_previous_secret_for_one_rotation():
    """`[guard] cookie_secret_lifetime`: the daemon rotates the secret on time and writes it to
    the kernel; a server cookie made before a rotation is verified by the kernel
    (`xdp.pass_cookie`) and userspace (`guard.cookie_valid`) after one rotation, and is an
    invalid cookie after two (`xdp.pass_cookie_new`, answered with a new cookie)."""
    with Lab(prefix="xdl") as lab:
        srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-rot", xdp="generic",
                             extra='\n[guard]\nrrl = { rate = 100 }\ncookies = true\ncookie_secret_lifetime = "4s"\n')
        client_cookie = bytes(range(11, 19))
        r = ask(lab, srv.addr4, lab.client_addr4, options=[dns.edns.GenericOption(10, client_cookie)])
        first = next(o for o in r.options if o.otype == 10).to_wire()
        assert first[:8] == client_cookie and len(first) == 24, first
        proven = [dns.edns.GenericOption(10, first)]

        def stats():
            st = lab.xdns_stats(srv)
            return st["xdp"]["pass_cookie"], st["xdp"]["pass_cookie_new"], st["guard"]["cookie_valid"], st["guard"]["cookie_rotations"]

        def after_rotation(n):
            deadline = time.monotonic() + 8
            while stats()[3] < n:
                assert time.monotonic() < deadline, f"no rotation {n}: {stats()}"
                time.sleep(0.1)

        rot0 = stats()[3]
        seen = []
        for n in (rot0 + 1, rot0 + 2):
            after_rotation(n)
            before = stats()
            r = ask(lab, srv.addr4, lab.client_addr4, options=proven)
            assert r is not None and r.answer, r
            after = stats()
            seen.append((n, [a - b for a, b in zip(after, before)], next(o for o in r.options if o.otype == 10).to_wire()))
        print(f"rotations from {rot0}: {[(n, d) for n, d, _ in seen]}")
        (_, d1, c1), (_, d2, c2) = seen
        assert d1[:3] == [1, 0, 1], f"after one rotation the cookie still verifies: {d1}"
        assert c1[:8] == client_cookie and c1 != first, "answered with a cookie of the new secret"
        assert d2[:3] == [0, 1, 0], f"after two it no longer does: {d2}"
        assert c2[:8] == client_cookie and c2 != first
        assert lab.stop(srv) == 0


def test_resolver_with_rrl_and_cookies_and_no_detection():
    """The configuration a resolver's operator writes: `[resolver]` with `[guard] rrl` and
    `cookies`, no `detect`. Its program did not load at all before 2026-11-29 (the entry's
    stack: bpf/README.md, "The cookie echo"); now the daemon starts, resolves over the lab
    tree, the kernel limits a flood of one cached answer from one address, and answers that
    address, once it presents a server cookie, from its cache with the cookie echoed."""
    case = next(c for c in corpus.CASES if c.qname.endswith("good.lab.") and c.rcode == "NOERROR" and c.answer)
    with Lab(prefix="xdl") as lab:
        tree = Tree(lab).start()
        srv = start_xdns_resolver(lab, tree, name="xdns-rg", xdp="generic",
                                  extra=f"\n[guard]\nrrl = {{ rate = {RATE}, slip = {SLIP} }}\ncookies = true\n")
        try:
            w = lab.udp(srv.addr4, dns.message.make_query(case.qname, case.qtype).to_wire(), timeout=8.0)
            assert w is not None, "no answer to the first (cold) query"
            first = dns.message.from_wire(w)
            assert first.rcode() == 0 and first.answer, first
            time.sleep(0.3)  # the answer reaches the kernel cache
            before = lab.xdns_stats(srv)["xdp"]
            whole, slipped, lost, elapsed, _, late = flood(lab, srv.addr4, lab.client_addr4,
                                                           qname=case.qname, qtype=case.qtype)
            after = lab.xdns_stats(srv)["xdp"]
            moved = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
            print(f"{case.qname} {case.qtype}: {FLOOD} queries in {elapsed:.2f} s: {whole} whole "
                  f"({late} in the last second), {slipped} slipped, {lost} dropped; {moved}")
            assert moved.get("cache_answered", 0) > 0, moved
            assert moved.get("drop_rrl", 0) > 0 and moved.get("answered_slip", 0) > 0, moved
            assert slipped > 0 and late <= 2 * RATE, (whole, slipped, lost, late)
            # the flooding client (its account spent) learns a server cookie from userspace,
            # then the kernel answers it from the cache with the cookie echoed, never limited
            client_cookie = bytes(range(21, 29))

            def ask_cached(options):
                q = dns.message.make_query(case.qname, case.qtype, use_edns=0, options=options)
                w = lab.udp(srv.addr4, q.to_wire(), timeout=2.0)
                return dns.message.from_wire(w) if w is not None else None

            r = None
            for _ in range(20):     # limited while the account refills: ask again
                r = ask_cached([dns.edns.GenericOption(10, client_cookie)])
                if r is not None and any(o.otype == 10 for o in r.options):
                    break
                time.sleep(0.2)
            assert r is not None, "no answer to the client cookie"
            cookie = next(o for o in r.options if o.otype == 10).to_wire()
            assert cookie[:8] == client_cookie and len(cookie) == 24, cookie
            before = lab.xdns_stats(srv)
            answered = sum(1 for _ in range(40)
                           if (x := ask_cached([dns.edns.GenericOption(10, cookie)])) is not None
                           and not x.flags & dns.flags.TC and x.answer
                           and [o.to_wire() for o in x.options if o.otype == 10] == [cookie])
            after = lab.xdns_stats(srv)
            echoed = after["xdp_guard"]["cookie_echoed"] - before.get("xdp_guard", {}).get("cookie_echoed", 0)
            cached = after["xdp"].get("cache_answered", 0) - before["xdp"].get("cache_answered", 0)
            print(f"a proven client: {answered} of 40 answered with its cookie, {echoed} echoed by the kernel, "
                  f"{cached} cache answers")
            assert answered == 40, answered
            assert echoed >= 40 and cached >= 40, (echoed, cached)
        finally:
            assert srv.alive(), srv.stderr()[-3000:]
            assert stop(lab, srv) == 0, srv.stderr()[-3000:]
