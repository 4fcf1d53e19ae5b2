"""One-record IXFR on a large zone (issue 28): from `knotc zone-commit` on a Knot DNS primary
(NOTIFY, then IXFR) until xdns's kernel maps hold the change, with XDP on.

    /usr/bin/python3 bench/ixfr.py [--records 1000000] [--shape plain|hosts|tld] [--changes 5]
        [--signed [--denial nsec|nsec3-optout]]

Needs root, knotd, knotc. The zone (bench/genzone.py's shapes, or `plain`: N `hN A` records,
the zone the first measurements used) is generated once into bench/out/ and given to both
Knot (primary) and xdns (the secondary's stored copy, so its kernel maps are sized for it at
start). Each change adds, with `knotc zone-begin/set/commit`, one A record under a new name
(`--change a`), or a registry's change (`--change delegation`): a new delegation with two NS
inside it, their glue (A) and a DS, answered by a referral to a query below it (`--change
insecure-delegation`: the same without the DS, the most common registration, which an NSEC3
opt-out chain leaves without an NSEC3 of its own); or a wildcard
A record under a new name (`--change wildcard`), answered for a name below it.
`--signed`: Knot signs the zone (ECDSA P-256; `--denial`: NSEC, or NSEC3 with opt-out, as
bench/genzone.py signs) and re-signs what each change touches (the new RRSIGs, the NSEC or
NSEC3 neighbours, the SOA); xdns has no stored copy (it transfers the signed zone at start),
and the kernel's answer is asked for with DO=1.

Per change: **served** (the new record answered, by userspace first), **done** (xdns stats
counts the transfer: the kernel update is part of it), the transfer's own phases from the
daemon's log line (`fetched_ms`, `applied_ms`, `built_ms`, total `ms`, and `since_wake_ms`:
from the NOTIFY's arrival to the kernel holding the change), how userspace applied it
(`userspace_apply`: `in place: …` or `full: REASON`) and how the kernel took it
(`kernel_update`: `in place: …` or `full: REASON`). `XDNS_BIN` picks the binary (a build of
another commit, for before/after). Then a query the kernel must answer
(the `answered` verdict grows). Results: bench/out/ixfr-SHAPE-RECORDS[-LABEL].json, and the
daemon's log beside it (.log).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
import bench as B  # noqa: E402
from genzone import SIGNED  # noqa: E402
from lab import Lab  # noqa: E402

import dns.message  # noqa: E402
import dns.rcode  # noqa: E402
import dns.rdatatype  # noqa: E402

ORIGIN = "ixfr.test."


def zone_file(records: int, shape: str) -> Path:
    B.OUT.mkdir(exist_ok=True)
    path = B.OUT / f"ixfr-{shape}-{records}.zone"
    if path.exists():
        return path
    if shape == "plain":
        with path.open("w") as f:
            f.write(f"$ORIGIN {ORIGIN}\n$TTL 300\n@ SOA ns1 h 1 3600 600 86400 60\n@ NS ns1\nns1 A 198.18.0.1\n")
            for i in range(records - 3):
                f.write(f"h{i} A 198.{18 + (i >> 16) % 2}.{(i >> 8) & 255}.{i & 255}\n")
    else:
        subprocess.run([sys.executable, str(HERE / "genzone.py"), "--shape", shape, "--records", str(records),
                        "--origin", ORIGIN, "-o", str(path)], check=True)
    return path


def ask(lab: Lab, addr: str, name: str, timeout: float = 0.2, do: bool = False):
    """A query of type A from the lab's client (RD=0, as the tests ask); `do`: with EDNS and DO=1."""
    q = dns.message.make_query(name, "A", want_dnssec=do, payload=1232) if do else dns.message.make_query(name, "A")
    q.flags = 0
    wire = lab.udp(addr, q.to_wire(), timeout=timeout)
    return None if wire is None else dns.message.from_wire(wire)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--shape", choices=["plain", "hosts", "tld"], default="plain")
    ap.add_argument("--changes", type=int, default=5)
    ap.add_argument("--change", choices=["a", "delegation", "insecure-delegation", "wildcard"], default="a",
                    help="one A record at a new name, a new delegation with NS, glue and DS (or without the DS), or a wildcard A under a new name")
    ap.add_argument("--settle", type=float, default=2.0, help="seconds between the kernel holding the zone and the first change")
    ap.add_argument("--label", default="", help="added to the result file's name (before/after)")
    ap.add_argument("--signed", action="store_true", help="Knot signs the zone and re-signs each change")
    ap.add_argument("--denial", choices=list(SIGNED), default="nsec", help="with --signed: how Knot proves names absent")
    args = ap.parse_args()
    signed = ("-signed" + ("" if args.denial == "nsec" else f"-{args.denial}")) if args.signed else ""
    zone = zone_file(args.records, args.shape)
    results = []
    with Lab(prefix="ixb") as lab:
        sec = lab.new_address()
        knot = lab.start_knot_primary([(ORIGIN, zone)], name="knot-ixfr", notify=[f"{sec[0]}@53"], signing=args.signed,
                                       policy=SIGNED[args.denial], timeout=600 if args.signed else 20.0)
        extra = f'\n[[zone]]\nname = "{ORIGIN}"\nprimaries = ["{knot.addr4}@53"]\n'
        if not args.signed:
            copy = lab.dir / "copy.zone"
            copy.write_bytes(zone.read_bytes())
            extra += f'file = "{copy}"\n'
        t0 = time.monotonic()
        srv = lab.start_xdns([], name="xdns-ixfr", extra=extra, xdp="default", addrs=sec, wait=False, timeout=600)
        lab.wait_answering(srv.addr4, ORIGIN, srv.proc, timeout=600)
        lab.wait_xdp_data(srv, timeout=600)
        print(f"{args.records} records ({args.shape}): xdns serving with the kernel after {time.monotonic() - t0:.1f} s")
        # the full path, for comparison: compiling every answer and filling a generation
        log = srv.stderr()
        full = {}
        for ln in log.splitlines():
            m = re.search(r"seconds=([0-9.]+)", ln)
            if m and "answers compiled" in ln:
                full["compile_s"] = float(m.group(1))
            if m and "kernel maps filled" in ln:
                full["fill_s"] = float(m.group(1))
        print("full generation at start:", json.dumps(full))
        time.sleep(args.settle)

        def rss_mb():
            try:
                for ln in Path(f"/proc/{srv.proc.pid}/status").read_text().splitlines():
                    if ln.startswith("VmRSS:"):
                        return int(ln.split()[1]) // 1024
            except OSError:
                return None
        rss_start = rss_mb()
        print("RSS before the changes (MB):", rss_start)
        try:
            for i in range(args.changes):
                def transfer():
                    return next(z for z in lab.xdns_stats(srv)["zones"] if z["name"] == ORIGIN)["transfer"]
                n = transfer()["transfers"]
                name = f"ixfr-{i}-{int(time.time())}.{ORIGIN}"
                lab.knotc(knot, "zone-begin", ORIGIN)
                if args.change == "a":
                    lab.knotc(knot, "zone-set", ORIGIN, name, "300", "A", "198.18.9.9")
                elif args.change == "wildcard":
                    lab.knotc(knot, "zone-set", ORIGIN, f"*.{name}", "300", "A", "198.18.9.9")
                    name = f"x.{name}"  # synthesised from the new wildcard
                else:
                    for ns, addr in (("ns1", "198.18.9.1"), ("ns2", "198.18.9.2")):
                        lab.knotc(knot, "zone-set", ORIGIN, name, "86400", "NS", f"{ns}.{name}")
                        lab.knotc(knot, "zone-set", ORIGIN, f"{ns}.{name}", "86400", "A", addr)
                    if args.change == "delegation":
                        lab.knotc(knot, "zone-set", ORIGIN, name, "86400", "DS", "12345", "13", "2", f"{i + 1:064x}")
                    name = f"www.{name}"  # below the cut: the new referral
                c = time.monotonic()
                lab.knotc(knot, "zone-commit", ORIGIN)

                def is_new(m) -> bool:
                    if m is None or m.rcode() != dns.rcode.NOERROR:
                        return False
                    return bool(m.answer) if not args.change.endswith("delegation") else any(r.rdtype == dns.rdatatype.NS for r in m.authority)
                served = done = None
                while time.monotonic() - c < 120:
                    if served is None:
                        m = ask(lab, srv.addr4, name, do=args.signed)
                        if is_new(m):
                            served = time.monotonic() - c
                    if transfer()["transfers"] > n:
                        done = time.monotonic() - c
                        break
                    time.sleep(0.005)
                t = transfer()
                line = [ln for ln in srv.stderr().splitlines() if "transferred and serving" in ln][-1]
                phases = {k: int(v) for k, v in re.findall(r"\b(fetched_ms|applied_ms|built_ms|since_wake_ms|ms)=(-?\d+)", line)}
                before = lab.xdns_stats(srv)["xdp"]["answered"]
                for _ in range(5):
                    ask(lab, srv.addr4, name, do=args.signed)
                kernel = lab.xdns_stats(srv)["xdp"]["answered"] - before
                r = {"served_s": served, "done_s": done, "phases_ms": phases,
                     "kernel_update": t.get("last_kernel_update"), "userspace_apply": t.get("last_apply"),
                     "kernel_answered_of_5": kernel}
                print(json.dumps(r))
                results.append(r)
            print("RSS after the changes (MB):", rss_mb())
        finally:
            # the log first: a 1M-name daemon may outlast the lab's stop timeout
            (B.OUT / f"ixfr-{args.shape}-{args.records}{'-' + args.change if args.change != 'a' else ''}{signed}{'-' + args.label if args.label else ''}.log").write_text(srv.stderr())
            lab.stop(srv)
            lab.stop(knot)
    out = B.OUT / f"ixfr-{args.shape}-{args.records}{'-' + args.change if args.change != 'a' else ''}{signed}{'-' + args.label if args.label else ''}.json"
    out.write_text(json.dumps({"records": args.records, "shape": args.shape, "change": args.change, "signed": args.signed, "denial": args.denial if args.signed else None, "full_at_start": full, "rss_mb_before_changes": rss_start,
                               "changes": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
