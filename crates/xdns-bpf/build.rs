//! Compile `bpf/xdns.bpf.c` and generate its skeleton (Rust types come from its BTF), plus the
//! verdict name table read from `enum xdns_verdict` in `bpf/xdns_abi.h`.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

/// Debian's multiarch tuple and libbpf's `__TARGET_ARCH_*` name for the target of this build,
/// from cargo's `CARGO_CFG_TARGET_*` (so a cross build asks for the target's headers, not the
/// host's). `None`: an architecture Debian does not ship.
fn debian_arch() -> Option<(&'static str, &'static str)> {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let endian = env::var("CARGO_CFG_TARGET_ENDIAN").unwrap_or_default();
    let abi = env::var("CARGO_CFG_TARGET_ABI").unwrap_or_default();
    let little = endian != "big";
    Some(match arch.as_str() {
        "x86_64" => ("x86_64-linux-gnu", "x86"),
        "x86" => ("i386-linux-gnu", "x86"),
        "aarch64" => ("aarch64-linux-gnu", "arm64"),
        "arm" if abi == "eabihf" => ("arm-linux-gnueabihf", "arm"),
        "arm" => ("arm-linux-gnueabi", "arm"),
        "powerpc64" if little => ("powerpc64le-linux-gnu", "powerpc"),
        "powerpc64" => ("powerpc64-linux-gnu", "powerpc"),
        "powerpc" => ("powerpc-linux-gnu", "powerpc"),
        "s390x" => ("s390x-linux-gnu", "s390"),
        "riscv64" => ("riscv64-linux-gnu", "riscv"),
        "mips64" if little => ("mips64el-linux-gnuabi64", "mips"),
        "mips" if little => ("mipsel-linux-gnu", "mips"),
        "loongarch64" => ("loongarch64-linux-gnu", "loongarch"),
        "sparc64" => ("sparc64-linux-gnu", "sparc"),
        _ => return None,
    })
}

/// The directory holding `asm/types.h` for the target (linux/*.h includes it): Debian's
/// `/usr/include/<multiarch>`. Without a known tuple, a native build asks the C compiler.
fn multiarch_include() -> PathBuf {
    if let Some((tuple, _)) = debian_arch() {
        let dir = Path::new("/usr/include").join(tuple);
        if dir.is_dir() {
            return dir;
        }
    }
    let native = env::var("TARGET").ok() == env::var("HOST").ok();
    if native {
        if let Ok(out) = Command::new(env::var("CC").unwrap_or_else(|_| "cc".into())).arg("-print-multiarch").output() {
            let tuple = String::from_utf8_lossy(&out.stdout).trim().to_string();
            let dir = Path::new("/usr/include").join(&tuple);
            if out.status.success() && !tuple.is_empty() && dir.is_dir() {
                return dir;
            }
        }
    }
    panic!(
        "no multiarch include directory for target arch {:?} (install linux-libc-dev for it, e.g. linux-libc-dev:<arch>)",
        env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default()
    );
}

/// `(value, NAME)` of every enumerator of `enum <name>` in the ABI header's text.
fn verdicts_of(abi: &str, name: &str) -> Vec<(u32, String)> {
    let head = format!("enum {name} {{");
    let start = abi.find(&head).unwrap_or_else(|| panic!("{head} in bpf/xdns_abi.h"));
    let body = &abi[start..];
    let body = &body[body.find('{').unwrap() + 1..body.find("};").expect("end of the enum")];
    let mut names = Vec::new();
    for line in body.lines() {
        // drop comments: `XDNS_NAME = N, /* ... */`
        let code = line.split("/*").next().unwrap_or("").split("//").next().unwrap_or("").trim();
        if code.is_empty() {
            continue;
        }
        let (name, value) = code.trim_end_matches(',').split_once('=').unwrap_or_else(|| panic!("verdict without an explicit value: {code:?}"));
        let value: u32 = value.trim().parse().unwrap_or_else(|_| panic!("verdict value of {name}: {value:?}"));
        names.push((value, name.trim().to_string()));
    }
    names
}

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let bpf_dir = manifest.join("../../bpf");
    let src = bpf_dir.join("xdns.bpf.c");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR"));
    let skel = out.join("xdns.skel.rs");
    let include = multiarch_include();
    let target_arch = format!("-D__TARGET_ARCH_{}", debian_arch().map_or("x86", |(_, a)| a));

    // -mcpu=v2: the jump forms of BPF v2 (JLT, JLE, ...) spare the negated branches of v1 (156
    // fewer instructions, 10k fewer verifier steps). v3 (32-bit ALU) would spare the
    // zero-extending shift pairs too, but the verifier's states multiply past its 1M limit
    // (clang 14 and 19 alike), and ALU32 without v3's jumps is miscompiled (bpf/README.md,
    // "Compilers").
    SkeletonBuilder::new()
        .source(&src)
        .clang_args([
            format!("-I{}", include.display()).as_str(),
            target_arch.as_str(),
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

    // Counter names, read from the ABI header itself (the only source of names and numbers).
    let abi = fs::read_to_string(bpf_dir.join("xdns_abi.h")).expect("reading bpf/xdns_abi.h");
    let mut names = verdicts_of(&abi, "xdns_verdict");
    assert!(!names.is_empty(), "enum xdns_verdict has no verdicts");
    names.sort();
    let mut table = String::from("/// Verdict names indexed by value (from `enum xdns_verdict`).\npub const VERDICT_NAMES: &[&str] = &[\n");
    for (i, (num, name)) in names.iter().enumerate() {
        assert_eq!(i as u32, *num, "xdns_verdict values must be dense from 0 ({name})");
        if name != "XDNS_VERDICT_MAX" {
            writeln!(table, "    {name:?},").unwrap();
        }
    }
    assert_eq!(names.last().map(|(_, n)| n.as_str()), Some("XDNS_VERDICT_MAX"), "XDNS_VERDICT_MAX ends enum xdns_verdict");
    table.push_str("];\n");
    fs::write(out.join("verdicts.rs"), table).expect("writing verdicts.rs");

    // The in-path cache's program (issue 26): its own object and skeleton. -mcpu=v3: it
    // marks a recorded query answered with an atomic fetch-and-add (BPF_ATOMIC | BPF_FETCH).
    SkeletonBuilder::new()
        .source(bpf_dir.join("inpath.bpf.c"))
        .clang_args([
            format!("-I{}", include.display()).as_str(),
            target_arch.as_str(),
            "-O2",
            "-mcpu=v3",
            "-fno-strict-aliasing",
            "-g",
            "-Wall",
            "-Werror",
        ])
        .build_and_generate(out.join("inpath.skel.rs"))
        .expect("building bpf/inpath.bpf.c");
    let mut names = verdicts_of(&abi, "xdns_inpath_verdict");
    names.sort();
    let mut table = String::from("/// In-path verdict names indexed by value (from `enum xdns_inpath_verdict`).\npub const INPATH_VERDICT_NAMES: &[&str] = &[\n");
    for (i, (num, name)) in names.iter().enumerate() {
        assert_eq!(i as u32, *num, "xdns_inpath_verdict values must be dense from 0 ({name})");
        if name != "XDNS_INPATH_VERDICT_MAX" {
            writeln!(table, "    {name:?},").unwrap();
        }
    }
    assert_eq!(names.last().map(|(_, n)| n.as_str()), Some("XDNS_INPATH_VERDICT_MAX"), "XDNS_INPATH_VERDICT_MAX ends enum xdns_inpath_verdict");
    table.push_str("];\n");
    fs::write(out.join("inpath_verdicts.rs"), table).expect("writing inpath_verdicts.rs");

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
