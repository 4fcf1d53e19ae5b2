"""Where the XDP program spends its time under real traffic: a perf profile of the server CPU
while kxdpgun sends the benchmark's query mix, attributed to source lines of bpf/.

    /usr/bin/python3 bench/profile.py                 # authoritative mix (bench.py's)
    /usr/bin/python3 bench/profile.py --resolver      # cache hits (resolver.py's hot set)
    /usr/bin/python3 bench/profile.py --top 60 --seconds 8
    /usr/bin/python3 bench/profile.py --resolver --query "nosuch.good.lab. A E"   # one shape

Needs root, perf, kxdpgun, bpftool (and the lab tree's servers for --resolver).

How: `perf record -e cpu-clock -g` on SERVER_CPU (no hardware PMU in this guest: timer
samples) while kxdpgun runs; each sample's first frame inside the program (or the program's
frame that called the helper the sample is in) is mapped to an instruction through the jited
line info the kernel keeps (BPF_OBJ_GET_INFO_BY_FD: jited_line_info, line_info), and from the
instruction to its source line with `bpftool prog dump xlated linum`. The percentages are of
the samples in the program and the helpers it called. Numbers are noisy (±2 points); compare
two builds by running both, interleaved, as bench.py does.
"""
from __future__ import annotations

import argparse
import bisect
import collections
import ctypes
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "lab"))
sys.path.insert(0, str(HERE))
import bench as B  # noqa: E402
from lab import DEFAULT_ZONES, Lab  # noqa: E402

BPF_PROG_GET_FD_BY_ID = 13
BPF_OBJ_GET_INFO_BY_FD = 15
# struct bpf_prog_info offsets (include/uapi/linux/bpf.h)
INFO_NR_LINE_INFO = 148
INFO_LINE_INFO = 152
INFO_JITED_LINE_INFO = 160
INFO_NR_JITED_LINE_INFO = 168
INFO_LINE_INFO_REC_SIZE = 172
INFO_JITED_LINE_INFO_REC_SIZE = 176
INFO_SIZE = 256

_libc = ctypes.CDLL(None, use_errno=True)
_SYS_BPF = 321  # x86-64


def _bpf(cmd: int, attr: bytes) -> int:
    buf = ctypes.create_string_buffer(attr, 128)
    fd = _libc.syscall(_SYS_BPF, cmd, buf, 128)
    if fd < 0:
        raise OSError(ctypes.get_errno(), f"bpf({cmd})")
    return fd


def _prog_info(fd: int, request: bytearray) -> bytes:
    info = ctypes.create_string_buffer(bytes(request), INFO_SIZE)
    _bpf(BPF_OBJ_GET_INFO_BY_FD, struct.pack("IIQ", fd, INFO_SIZE, ctypes.addressof(info)))
    return info.raw


def jited_lines(prog_id: int) -> list[tuple[int, int]]:
    """(kernel address, xlated instruction index) of every line-info record, by address."""
    fd = _bpf(BPF_PROG_GET_FD_BY_ID, struct.pack("I", prog_id))
    try:
        raw = _prog_info(fd, bytearray(INFO_SIZE))
        (n,) = struct.unpack_from("I", raw, INFO_NR_LINE_INFO)
        (nj,) = struct.unpack_from("I", raw, INFO_NR_JITED_LINE_INFO)
        (rec,) = struct.unpack_from("I", raw, INFO_LINE_INFO_REC_SIZE)
        (jrec,) = struct.unpack_from("I", raw, INFO_JITED_LINE_INFO_REC_SIZE)
        li = ctypes.create_string_buffer(rec * n)
        jli = ctypes.create_string_buffer(jrec * nj)
        req = bytearray(INFO_SIZE)
        struct.pack_into("I", req, INFO_NR_LINE_INFO, n)
        struct.pack_into("QQ", req, INFO_LINE_INFO, ctypes.addressof(li), ctypes.addressof(jli))
        struct.pack_into("III", req, INFO_NR_JITED_LINE_INFO, nj, rec, jrec)
        _prog_info(fd, req)
    finally:
        os.close(fd)
    insns = [struct.unpack_from("I", li.raw, i * rec)[0] for i in range(n)]
    addrs = [struct.unpack_from("Q", jli.raw, i * jrec)[0] for i in range(nj)]
    return sorted(zip(addrs, insns))


def source_lines(prog_id: int) -> dict[int, str]:
    """xlated instruction index -> the source line bpftool prints above it."""
    text = subprocess.run(["bpftool", "prog", "dump", "xlated", "id", str(prog_id), "linum"],
                          capture_output=True, text=True, check=True).stdout
    out, cur = {}, "?"
    for line in text.splitlines():
        if line.startswith(";"):
            cur = re.sub(r"\[file:.*?/bpf/", "[", line[1:].strip())[:110]
        m = re.match(r"\s*(\d+): \(", line)
        if m:
            out[int(m.group(1))] = cur
    return out


def attribute(perf_data: Path, lines: list[tuple[int, int]], src: dict[int, str], by_insn: bool = False):
    """(samples in all, samples in the program, Counter of source line -> samples); with
    by_insn, keyed by the line-info record's first xlated instruction too (an inlined helper
    such as word.h's loads is then told apart by where it was inlined)."""
    script = subprocess.run(["perf", "script", "-i", str(perf_data), "-F", "ip,sym"],
                            capture_output=True, text=True).stdout
    addrs = [a for a, _ in lines]
    total, inprog, by_line = 0, 0, collections.Counter()
    for block in script.split("\n\n"):
        frames = []
        for ln in block.strip().splitlines():
            m = re.match(r"\s*([0-9a-f]+) (\S+)", ln)
            if m:
                frames.append((int(m.group(1), 16), m.group(2)))
        if not frames:
            continue
        total += 1
        if not any(s.startswith("bpf_prog_") and s.endswith("_xdns_xdp") for _, s in frames):
            continue
        inprog += 1
        leaf = frames[0][1]
        for ip, sym in frames:
            if sym.startswith("bpf_prog_"):
                # a caller's return address is one past its call instruction
                i = bisect.bisect_right(addrs, ip - (0 if sym == leaf else 1)) - 1
                where = src.get(lines[i][1], "?") if i >= 0 else "?"
                if by_insn and i >= 0:
                    where = f"@{lines[i][1]:<5d} {where}"
                by_line[where if sym == leaf else f"[{leaf}] <- {where}"] += 1
                break
    return total, inprog, by_line


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--resolver", action="store_true", help="profile cache hits on the lab tree")
    ap.add_argument("--seconds", type=float, default=8.0, help="seconds of samples")
    ap.add_argument("--top", type=int, default=40, help="source lines to print")
    B.add_query_option(ap)
    ap.add_argument("--by-insn", action="store_true",
                    help="one row per line-info record (@ its first xlated instruction), not per source line")
    args = ap.parse_args()
    with Lab(prefix="xpr") as lab, B.BpfStats(), tempfile.TemporaryDirectory() as tmp:
        perf_data = Path(tmp) / "perf.data"
        if args.resolver:
            import resolver as R
            import tree as T
            tree = T.Tree(lab).start()
            qfile = lab.dir / "hot.txt"
            R.query_file(qfile)
            tgt = R.start_peer(lab, tree, "xdns-xdp", "prof")
            R.warm(lab, tgt.addr4, "xdns-xdp")  # every hot answer cached, kernel included
        else:
            qfile = lab.dir / "queries.txt"
            B.query_mix(qfile)
            srv = lab.start_xdns(DEFAULT_ZONES, name="xdns-prof", xdp="native")
            tgt = B.Target("xdns-xdp", srv.addr4, srv, xdns=True)
        if args.query:
            B.write_queries(qfile, args.query)
        try:
            prog_id = B.xdp_prog_id(lab)
            lines, src = jited_lines(prog_id), source_lines(prog_id)
            lead = 5.0
            perf = subprocess.Popen(["bash", "-c", f"sleep {lead}; exec perf record -q -o {perf_data} "
                                     f"-C {B.SERVER_CPU} -e cpu-clock -F 20000 -g -- sleep {args.seconds}"])
            res = B.measure(lab, tgt, qfile, lead + args.seconds + 5, 2_000_000)
            perf.wait()
        finally:
            if tgt.server is not None and tgt.server.alive():
                lab.stop(tgt.server)
            B.detach_xdp(lab)
        total, inprog, by_line = attribute(perf_data, lines, src, args.by_insn)
    ns = res.get("prog_ns", 0) / max(1, res.get("prog_cnt", 1))
    print(f"{res['replies_per_s']} replies/s, {ns:.0f} ns per packet in the program (bpf_stats); "
          f"{inprog} of {total} samples ({100 * inprog / max(1, total):.1f}%) in the program and its helpers")
    for where, n in by_line.most_common(args.top):
        print(f"{100 * n / max(1, inprog):5.2f}%  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
