"""Generate a large synthetic zone for load-time and memory benchmarks.

    /usr/bin/python3 bench/genzone.py --records 1000000 --origin bench.test. > big.zone
    /usr/bin/python3 bench/genzone.py --shape tld --records 1000000 --origin tld. -o tld.zone

Deterministic (fixed seed).

    /usr/bin/python3 bench/genzone.py --shape tld --records 1000000 --origin tld. \
        --sign nsec3-optout -o tld-signed.zone

`--sign` makes the signed variant with Knot DNS as the signer (`knotd` with automatic DNSSEC,
ECDSA P-256, a KSK and a ZSK, signatures valid 90 days; then `knotc zone-flush +outdir`
writes the signed zone): `nsec3-optout` is what a TLD publishes (RFC 5155 opt-out: delegations
without DS get no NSEC3 record; RFC 9276: 0 extra iterations, no salt), `nsec` the NSEC
variant (every name in the chain). The unsigned zone is generated beside the output first
(`<output>.unsigned`, removed afterwards). knotd runs in the caller's network namespace but
listens on no address: only its control socket. The keys are new each time (the file is not
deterministic byte for byte, its names and RRsets are).

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
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "lab"))
from lab import KNOT_NSEC3_OPTOUT, knot_signing_conf  # noqa: E402


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

# dnssec-policy lines of Knot DNS for each signed variant
SIGNED = {
    "nsec3-optout": KNOT_NSEC3_OPTOUT,
    "nsec": [],
}


def sign(unsigned: Path, origin: str, variant: str, out: Path, timeout: float = 7200.0) -> float:
    """Sign `unsigned` with knotd (policy `variant` of SIGNED) into `out`; returns the seconds
    from knotd's start until the signed zone is written."""
    if variant not in SIGNED:
        raise ValueError(f"unknown signed variant {variant!r}; known: {sorted(SIGNED)}")
    zone = origin.rstrip(".")
    wd = Path(tempfile.mkdtemp(prefix=f"sign-{zone}-", dir=out.parent))
    try:
        (wd / "db").mkdir()
        (wd / "keys").mkdir()
        (wd / "dump").mkdir()
        shutil.copy(unsigned, wd / f"{zone}.zone")
        conf = wd / "knot.conf"
        threads = max(1, os.cpu_count() or 1)
        signing = knot_signing_conf(wd / "keys", {"p": ["rrsig-lifetime: 90d", "rrsig-refresh: 30d",
                                                        f"signing-threads: {threads}", *SIGNED[variant]]})
        # No `listen`: knotd serves nothing, it only signs; the control socket drives it.
        # journal-content none: the signing's changes (millions of RRs) are not journaled.
        conf.write_text(f"""# generated by bench/genzone.py --sign {variant}
server:
    rundir: "{wd}"
    background-workers: {threads}
control:
    listen: "{wd}/knot.sock"
database:
    storage: "{wd}/db"
{signing}log:
  - target: stderr
    any: notice
template:
  - id: default
    storage: "{wd}"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
    semantic-checks: off
    dnssec-signing: on
    dnssec-policy: p
zone:
  - domain: "{origin}"
""")
        t0 = time.monotonic()
        log = open(wd / "knotd.log", "w")
        proc = subprocess.Popen(["knotd", "-c", str(conf)], stdout=log, stderr=subprocess.STDOUT)
        knotc = ["knotc", "-c", str(conf), "-t", str(int(timeout))]
        try:
            deadline = t0 + timeout
            # zone-read of the apex's RRSIGs finds some once the zone is loaded, which
            # (automatic signing) is once it is signed
            while subprocess.run(knotc + ["zone-read", origin, "@", "RRSIG"],
                                 capture_output=True, text=True).stdout.count(" RRSIG ") == 0:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"knotd did not sign {origin}:\n"
                                       + (wd / "knotd.log").read_text()[-3000:])
                time.sleep(1.0)
            r = subprocess.run(knotc + ["-b", "zone-flush", origin, "+outdir", str(wd / "dump")],
                               capture_output=True, text=True)
            dumped = wd / "dump" / f"{zone}.zone"
            if r.returncode != 0 or not dumped.exists():
                raise RuntimeError(f"knotc zone-flush failed: {r.stdout}{r.stderr}")
            secs = time.monotonic() - t0
        finally:
            proc.terminate()
            proc.wait(timeout=600)
            log.close()
        os.chmod(dumped, 0o644)  # NSD reads it as its own user
        shutil.move(dumped, out)
        return secs
    finally:
        shutil.rmtree(wd, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--origin", default="bench.test.")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="hosts")
    ap.add_argument("-o", "--output", help="file (default stdout)")
    ap.add_argument("--sign", choices=sorted(SIGNED),
                    help="write the zone signed by Knot DNS (needs -o and knotd, knotc)")
    a = ap.parse_args()
    if a.sign:
        if not a.output:
            ap.error("--sign needs -o FILE")
        out = Path(a.output).resolve()
        unsigned = out.with_name(out.name + ".unsigned")
        with open(unsigned, "w") as f:
            n = SHAPES[a.shape](a.records, a.origin, f)
        try:
            secs = sign(unsigned, a.origin, a.sign, out)
        finally:
            unsigned.unlink(missing_ok=True)
        print(f"genzone: {n} records before signing, signed ({a.sign}) in {secs:.1f} s", file=sys.stderr)
        return 0
    if a.output:
        with open(a.output, "w") as f:
            n = SHAPES[a.shape](a.records, a.origin, f)
    else:
        n = SHAPES[a.shape](a.records, a.origin, sys.stdout)
    print(f"genzone: {n} records", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
