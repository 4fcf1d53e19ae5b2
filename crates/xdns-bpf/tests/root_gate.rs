//! The root tests must never pass by not running: run without root, a test that needs it
//! fails, naming why (CI runs as root; a skipped test there would hide a broken kernel path).

mod common;

use std::os::unix::process::CommandExt;
use std::process::Command;

use common::{require_root, load};

/// A root test like the others: loads the program (the verifier runs) and checks it.
#[test]
fn root_probe_loads_the_program() {
    require_root("root_probe_loads_the_program");
    let prog = load();
    let (insns, verified) = prog.insn_count().unwrap();
    assert!(insns > 0 && verified >= insns, "{insns} instructions, {verified} verified");
}

/// This test binary, asked to run `root_probe_loads_the_program` as an unprivileged user
/// (nobody, 65534), must fail and say that it needs root.
#[test]
fn root_test_fails_without_root() {
    require_root("root_test_fails_without_root");
    // nobody may not reach the build tree (a clone in a private directory, say): run a copy
    // of this binary from a directory anyone can enter
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("xdns-root-gate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("root_gate");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut cmd = Command::new(&exe);
    cmd.current_dir("/").args(["--exact", "root_probe_loads_the_program", "--test-threads=1"]);
    // SAFETY: between fork and exec only async-signal-safe calls (setgroups, setgid, setuid).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) != 0 || libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output();
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("running the test binary as nobody");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(!out.status.success(), "a root test passed without root:\n{text}");
    assert!(text.contains("needs root"), "the failure does not say why:\n{text}");
    assert!(text.contains("1 failed"), "the root test did not fail as a test:\n{text}");
}
