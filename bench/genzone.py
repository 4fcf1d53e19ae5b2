"""Generate a large synthetic zone for load-time and memory benchmarks.

    /usr/bin/python3 bench/genzone.py --records 1000000 --origin bench.test. > big.zone

Deterministic (fixed seed). Record mix per host: A (every host), AAAA (60%), TXT (20%),
MX (10%), plus CNAMEs (10% of hosts) and delegations (1%), so loaders exercise several
RDATA parsers, CNAME checks and zone cuts, not just A records.
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--origin", default="bench.test.")
    ap.add_argument("-o", "--output", help="file (default stdout)")
    a = ap.parse_args()
    if a.output:
        with open(a.output, "w") as f:
            n = generate(a.records, a.origin, f)
    else:
        n = generate(a.records, a.origin, sys.stdout)
    print(f"genzone: {n} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
