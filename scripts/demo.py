"""The xdns demo: a throw-away lab, xdns serving tests/zones/example.com.zone with its XDP
program attached to the server's veth, a few kdig queries shown in full (UDP ones answered in
the kernel, TCP ones by the userspace server), then `xdns stats`. Exits 0 only if every answer
was right and the kernel answered the UDP queries. The configuration is what a user writes
(`[xdp] interfaces`, mode left at auto) and the client's veth runs no XDP program, as a
container's: xdns picks generic mode there and `xdns stats` says why.

    /usr/bin/python3 scripts/demo.py              # xdns with XDP
    /usr/bin/python3 scripts/demo.py --no-xdp     # xdns, userspace only
    /usr/bin/python3 scripts/demo.py --peer knot  # the same checks against Knot DNS (harness proof)
"""

import argparse
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lab"))
from lab import DEFAULT_ZONES, XDNS_BIN, Lab  # noqa: E402

# (title, kdig arguments, expected status, expected flags, regexes that must match the output)
QUERIES = [
    ("A record over UDP", ["www.example.com", "A"], "NOERROR", {"aa"},
     [r"^www\.example\.com\.\s+300\s+IN\s+A\s+198\.18\.0\.10$"]),
    ("AAAA record over TCP", ["+tcp", "www.example.com", "AAAA"], "NOERROR", {"aa"},
     [r"^www\.example\.com\.\s+300\s+IN\s+AAAA\s+2001:db8::10$"]),
    ("MX records", ["example.com", "MX"], "NOERROR", {"aa"},
     [r"(?i)IN\s+MX\s+10 Mail\.Example\.COM\.$", r"IN\s+MX\s+20 mx2\.example\.net\.$"]),
    ("NXDOMAIN with the SOA for negative caching", ["nosuch.example.com", "A"], "NXDOMAIN", {"aa"},
     [r"^example\.com\.\s+300\s+IN\s+SOA\s+ns1\.example\.com\."]),
    ("wildcard, DNSSEC OK bit set", ["+dnssec", "anything.wild.example.com", "A"], "NOERROR", {"aa"},
     [r"^anything\.wild\.example\.com\.\s+3600\s+IN\s+A\s+198\.18\.0\.40$", r"flags: do"]),
    ("CNAME chain over TCP", ["+tcp", "a.example.com", "A"], "NOERROR", {"aa"},
     [r"^a\.example\.com\.\s+3600\s+IN\s+CNAME\s+b\.example\.com\.$",
      r"^www\.example\.com\.\s+300\s+IN\s+A\s+198\.18\.0\.10$"]),
    ("referral to sub.example.com with glue", ["www.sub.example.com", "A"], "NOERROR", set(),
     [r"^sub\.example\.com\.\s+3600\s+IN\s+NS\s+ns\.sub\.example\.com\.$",
      r"^ns\.sub\.example\.com\.\s+3600\s+IN\s+A\s+198\.18\.0\.53$"]),
    ("name outside every zone", ["www.example.org", "A"], "REFUSED", set(), []),
]


def check(out: str, status: str, flags: set, patterns: list) -> list:
    problems = []
    m = re.search(r"status: (\w+)", out)
    if not m or m.group(1) != status:
        problems.append(f"status {m.group(1) if m else '?'} != {status}")
    fm = re.search(r";; Flags: ([a-z ]*);", out)
    got = set(fm.group(1).split()) if fm else set()
    if "aa" in flags and "aa" not in got:
        problems.append("AA flag missing")
    if "aa" not in flags and "aa" in got:
        problems.append("AA flag set on a non-authoritative answer")
    for p in patterns:
        if not re.search(p, out, re.M):
            problems.append(f"no line matching {p}")
    return problems


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--peer", choices=["xdns", "knot", "nsd"], default="xdns")
    ap.add_argument("--no-xdp", action="store_true", help="xdns without its XDP program")
    args = ap.parse_args()
    xdp = args.peer == "xdns" and not args.no_xdp
    failures = 0
    with Lab(prefix="xdl") as lab:
        print(f"lab: server netns {lab.server_ns}, client netns {lab.client_ns}")
        if args.peer == "xdns":
            # the configuration a user writes: `[xdp] interfaces` and no mode (auto), and a
            # client veth with no XDP program of its own, as a container's
            srv = lab.start_xdns(DEFAULT_ZONES, xdp="default" if xdp else None)
        else:
            srv = {"knot": lab.start_knot, "nsd": lab.start_nsd}[args.peer](DEFAULT_ZONES)
        how = f" (XDP program attached to {lab.server_if})" if xdp else ""
        print(f"{args.peer} serving example.com and example.net on {srv.addr4} and {srv.addr6}{how}\n")
        xdp_before = lab.xdns_stats(srv).get("xdp", {}) if xdp else {}
        for i, (title, q, status, flags, patterns) in enumerate(QUERIES):
            addr = srv.addr6 if i % 2 else srv.addr4
            cmd = ["kdig", f"@{addr}", "+retry=0", "+timeout=2", *q]
            print(f"=== {title}: {' '.join(cmd)}")
            p = lab.client_run(cmd, check=False)
            print(p.stdout.rstrip() or p.stderr.rstrip())
            problems = check(p.stdout, status, flags, patterns)
            for pr in problems:
                print(f"!!! WRONG: {pr}")
            print("--- ok" if not problems else "--- FAILED")
            print()
            failures += bool(problems)
        if args.peer == "xdns":
            print("=== xdns stats")
            p = subprocess.run([XDNS_BIN, "stats", "--control", srv.extra["control"]],
                               capture_output=True, text=True)
            print(p.stdout.rstrip() or p.stderr.rstrip())
            if p.returncode != 0:
                print("!!! WRONG: xdns stats failed")
                failures += 1
            # Names outside every zone pass to userspace (REFUSED there, or the resolver's).
            udp = sum(1 for _, q, status, *_ in QUERIES if "+tcp" not in q and status != "REFUSED")
            if xdp:
                after = lab.xdns_stats(srv).get("xdp", {})
                delta = {k: v - xdp_before.get(k, 0) for k, v in after.items() if v > xdp_before.get(k, 0)}
                answered = delta.pop("answered", 0)
                print(f"\n{answered} of the {udp} UDP queries for served names were answered in the "
                      f"kernel (XDP_TX); passed to userspace: {delta or 'none'}")
                if answered < udp:
                    print("!!! WRONG: the kernel did not answer every UDP query for a served name")
                    failures += 1
            if not srv.alive() or "panicked" in srv.stderr():
                print("!!! WRONG: xdns died or panicked")
                failures += 1
    print(f"\ndemo: {len(QUERIES) - failures if failures <= len(QUERIES) else 0}/{len(QUERIES)} "
          f"answers right{'' if not failures else ', FAILED'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
