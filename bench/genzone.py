"""Generate a large synthetic zone for load-time and memory benchmarks.

    /usr/bin/python3 bench/genzone.py --records 1000000 --origin bench.test. > big.zone
    /usr/bin/python3 bench/genzone.py --shape tld --records 1000000 --origin tld. -o tld.zone

Deterministic (fixed seed).

`hosts` (the default): record mix per host: A (every host), AAAA (60%), TXT (20%), MX (10%),
plus CNAMEs (10% of hosts) and delegations (1%), so loaders exercise several RDATA parsers,
CNAME checks and zone cuts, not just A records.

`tld`: what a registry serves. Delegations `dN`, each with two NS records: 30% to name
servers inside the delegation with glue (an A each, and an AAAA for half of those), the rest
to one of 2,000 hosting providers' name server pairs outside the zone (as most registrations
are); a DS for 20% of them. Per 1,000 delegations also one CNAME and one wildcard under a
delegation-less name (`wN`), so lookups meet those paths too.
"""

import argparse
import random
import sys


def generate(records: int, origin: str, out) -> int:
    rng = random.Random(1)
    w = out.write
    w(f"$ORIGIN {origin}\n$TTL 3600\n")
    w("@ IN SOA ns1 hostmaster 1 7200 3600 1209600 300\n")
    w("@ IN NS ns1\n@ IN NS ns2\nns1 IN A 198.18.0.1\nns2 IN A 198.18.0.2\n")
    n = 6
    i = 0
    while n < records:
        h = f"h{i}"
        w(f"{h} IN A 198.{18 + (i >> 16) % 2}.{(i >> 8) & 255}.{i & 255}\n")
        n += 1
        r = rng.random()
        if r < 0.6 and n < records:
            w(f"{h} IN AAAA 2001:db8:{(i >> 16) & 0xffff:x}:{i & 0xffff:x}::1\n")
            n += 1
        if r < 0.2 and n < records:
            w(f'{h} IN TXT "host {i} v=1"\n')
            n += 1
        if 0.2 <= r < 0.3 and n < records:
            w(f"{h} IN MX 10 mail{i % 100}\n")
            n += 1
        if 0.3 <= r < 0.4 and n < records:
            w(f"c{i} IN CNAME {h}\n")
            n += 1
        if 0.4 <= r < 0.41 and n + 1 < records:
            w(f"d{i} IN NS ns.d{i}\nns.d{i} IN A 198.18.{i % 256}.53\n")
            n += 2
        i += 1
    return n


def generate_tld(records: int, origin: str, out) -> int:
    rng = random.Random(1)
    w = out.write
    w(f"$ORIGIN {origin}\n$TTL 86400\n")
    w("@ IN SOA a.nic hostmaster 1 1800 900 604800 3600\n")
    w("@ IN NS a.nic\n@ IN NS b.nic\na.nic IN A 198.18.0.1\nb.nic IN A 198.18.0.2\n")
    n = 6
    i = 0
    while n < records:
        d = f"d{i}"
        r = rng.random()
        if r < 0.3:
            w(f"{d} IN NS ns1.{d}\n{d} IN NS ns2.{d}\n")
            w(f"ns1.{d} IN A 198.{18 + (i >> 16) % 2}.{(i >> 8) & 255}.{i & 255}\n")
            w(f"ns2.{d} IN A 198.{18 + (i >> 16) % 2}.{(i >> 8) & 255}.{(i + 1) & 255}\n")
            n += 4
            if r < 0.15:
                w(f"ns1.{d} IN AAAA 2001:db8:{(i >> 16) & 0xffff:x}:{i & 0xffff:x}::53\n")
                n += 1
        else:
            h = rng.randrange(2000)
            w(f"{d} IN NS ns1.hoster{h}.example.\n{d} IN NS ns2.hoster{h}.example.\n")
            n += 2
        if rng.random() < 0.2:
            w(f"{d} IN DS {10000 + i % 50000} 13 2 {i:064x}\n")
            n += 1
        if i % 1000 == 999:
            w(f"www{i} IN CNAME {d}\n*.w{i} IN A 198.18.1.{i % 250 + 1}\n")
            n += 2
        i += 1
    return n


SHAPES = {"hosts": generate, "tld": generate_tld}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--origin", default="bench.test.")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="hosts")
    ap.add_argument("-o", "--output", help="file (default stdout)")
    a = ap.parse_args()
    if a.output:
        with open(a.output, "w") as f:
            n = SHAPES[a.shape](a.records, a.origin, f)
    else:
        n = SHAPES[a.shape](a.records, a.origin, sys.stdout)
    print(f"genzone: {n} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
