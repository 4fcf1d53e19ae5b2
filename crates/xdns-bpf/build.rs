//! Compile `bpf/xdns.bpf.c` and generate its skeleton (Rust types come from its BTF), plus the
//! verdict name table read from the generated `enum xdns_verdict`.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("../../bpf");
    let src = bpf_dir.join("xdns.bpf.c");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let skel = out.join("xdns.skel.rs");

    // -mcpu=v2: the jump forms of BPF v2 (JLT, JLE, ...) spare the negated branches of v1 (156
    // fewer instructions, 10k fewer verifier steps). v3 (32-bit ALU) would spare the
    // zero-extending shift pairs too, but the verifier's states multiply past its 1M limit
    // (clang 14 and 19 alike), and ALU32 without v3's jumps is miscompiled (bpf/README.md,
    // "Compilers").
    SkeletonBuilder::new()
        .source(&src)
        .clang_args([
            "-I/usr/include/x86_64-linux-gnu",
            "-O2",
            "-mcpu=v2",
            // word.h reads byte arrays as u64 words: type punning, which strict aliasing
            // would let the compiler reorder or drop (the kernel builds with this flag too).
            "-fno-strict-aliasing",
            "-g",
            "-Wall",
            "-Werror",
        ])
        .build_and_generate(&skel)
        .expect("building bpf/xdns.bpf.c");

    // Counter names: the `pub const XDNS_*: Self = Self(n);` lines of the generated
    // `impl xdns_verdict`, so names and numbers come from the ABI header only.
    let text = fs::read_to_string(&skel).expect("reading the skeleton");
    let mut names: Vec<(u32, String)> = Vec::new();
    let mut inside = false;
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("impl xdns_verdict") {
            inside = true;
            continue;
        }
        if inside {
            if l.starts_with('}') {
                break;
            }
            if let Some(rest) = l.strip_prefix("pub const ") {
                let name = rest.split(':').next().unwrap_or("").trim().to_string();
                let num = rest
                    .rsplit("Self(")
                    .next()
                    .and_then(|s| s.split(')').next())
                    .and_then(|s| s.parse::<u32>().ok())
                    .expect("verdict value");
                names.push((num, name));
            }
        }
    }
    assert!(!names.is_empty(), "enum xdns_verdict not found in the skeleton");
    names.sort();
    let mut table = String::from("/// Verdict names indexed by value (from `enum xdns_verdict`).\npub const VERDICT_NAMES: &[&str] = &[\n");
    for (i, (num, name)) in names.iter().enumerate() {
        assert_eq!(i as u32, *num, "xdns_verdict values must be dense from 0");
        if name != "XDNS_VERDICT_MAX" {
            writeln!(table, "    {name:?},").unwrap();
        }
    }
    table.push_str("];\n");
    fs::write(out.join("verdicts.rs"), table).expect("writing verdicts.rs");

    // The program's build id (lib.rs `build_id`): FNV-1a of the skeleton, object included.
    let id = fs::read(&skel)
        .expect("reading the skeleton")
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3));
    fs::write(out.join("build_id.rs"), format!("\"{id:016x}\"\n")).expect("writing build_id.rs");

    println!("cargo:rerun-if-changed={}", bpf_dir.display());
    for entry in fs::read_dir(&bpf_dir).expect("bpf dir").flatten() {
        println!("cargo:rerun-if-changed={}", entry.path().display());
    }
}
