//! Least privilege: once its sockets are bound, its XDP program loaded and attached and its
//! maps open, `xdns serve` with `user = "..."` gives up root.
//!
//! - **User and group** (`user`, `group`; the group defaults to the user's primary group):
//!   `setgroups`, `setresgid`, `setresuid` for the whole process (glibc applies them to every
//!   thread). The uid change clears the capabilities of every thread but the XDP thread's.
//! - **Capabilities**: only the XDP thread keeps any, `CAP_NET_ADMIN`, `CAP_BPF` and
//!   `CAP_PERFMON`. When it starts it sets `SECBIT_NO_SETUID_FIXUP` on itself, so the switch
//!   of user, whenever it comes, leaves its capabilities as they are (a fill of the maps or a
//!   program load under way never loses them half-way); at its next turn after the switch it
//!   keeps just those three. Threads it creates inherit the bit and drop every capability
//!   when they start (the prefetch reader, the fill's compiling thread:
//!   `xdns_bpf::threads`). The three are needed to attach an interface
//!   again in generic mode (the delivery guard), to point an abandoned takeover's links back
//!   at its program, and to load the program again with larger maps when zone data outgrows
//!   them (the verifier refuses the program without `CAP_PERFMON`, as it would at start).
//!   `perf_event_open` stays refused by the seccomp filter. Threads that read packets (UDP workers, TCP and resolver
//!   tasks) hold none. Map updates (reloads, the resolver's kernel cache, flush) go through
//!   descriptors opened before the switch and need no capability.
//! - **no_new_privs** on every thread, and a **seccomp** filter (all threads, `TSYNC`) that
//!   refuses (`EPERM`) the system calls a DNS server never makes and an attacker would want:
//!   `execve`, `ptrace`, `mount`, module loading, `kexec`, `unshare`/`setns`, keyrings,
//!   `userfaultfd`, `perf_event_open`, ... A deny list rather than an allow list: a missed
//!   system call in a rare path (an allocator, a resolver error) must not kill the server.
//!   systemd's `SystemCallFilter=` (packaging/xdns.service) adds an allow list on top.
//!
//! What cannot work after the switch is refused with a clear message: binding new listen
//! addresses or attaching to new interfaces (both need a restart anyway), reading files the
//! user may not read (a reload then fails like any unreadable zone: the old one keeps serving).

use std::ffi::{CStr, CString};

use anyhow::{bail, Context};

/// A user to run as, resolved at configuration time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunAs {
    pub user: String,
    pub uid: u32,
    pub gid: u32,
}

/// Resolve `user` (and `group`, else the user's primary group) in the system's databases.
pub fn resolve(user: &str, group: Option<&str>) -> Result<RunAs, String> {
    let (uid, primary) = lookup_user(user).ok_or_else(|| format!("no user {user:?} on this system"))?;
    let gid = match group {
        Some(g) => lookup_group(g).ok_or_else(|| format!("no group {g:?} on this system"))?,
        None => primary,
    };
    Ok(RunAs { user: user.to_string(), uid, gid })
}

/// `(uid, primary gid)` of a user name, or of a numeric uid.
fn lookup_user(name: &str) -> Option<(u32, u32)> {
    let c = CString::new(name).ok()?;
    let mut pw: libc::passwd = unsafe_zeroed();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; `buf` outlives the use of `pw`'s strings,
    // which are not read.
    let rc = unsafe { libc::getpwnam_r(c.as_ptr(), &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc == 0 && !out.is_null() {
        return Some((pw.pw_uid, pw.pw_gid));
    }
    by_uid(name.parse().ok()?).map(|(_, uid, gid)| (uid, gid))
}

/// `(name, uid, primary gid)` of the user with `uid`.
fn by_uid(uid: u32) -> Option<(String, u32, u32)> {
    let mut pw: libc::passwd = unsafe_zeroed();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call; the name is read while `buf` lives.
    let rc = unsafe { libc::getpwuid_r(uid, &mut pw, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc != 0 || out.is_null() || pw.pw_name.is_null() {
        return None;
    }
    // SAFETY: getpwuid_r succeeded: pw_name points to a NUL-terminated string in `buf`.
    let name = unsafe { CStr::from_ptr(pw.pw_name) }.to_string_lossy().into_owned();
    Some((name, pw.pw_uid, pw.pw_gid))
}

/// The gid of a group name, or a numeric gid.
fn lookup_group(name: &str) -> Option<u32> {
    let c = CString::new(name).ok()?;
    let mut gr: libc::group = unsafe_zeroed();
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut out: *mut libc::group = std::ptr::null_mut();
    // SAFETY: every pointer is valid for the call.
    let rc = unsafe { libc::getgrnam_r(c.as_ptr(), &mut gr, buf.as_mut_ptr(), buf.len(), &mut out) };
    if rc == 0 && !out.is_null() {
        return Some(gr.gr_gid);
    }
    name.parse().ok()
}

fn unsafe_zeroed<T>() -> T {
    // SAFETY: only used for the libc `passwd` and `group` structs: plain data whose all-zero
    // value (null pointers, zero ids) is valid.
    unsafe { std::mem::zeroed() }
}

/// The capabilities the XDP thread keeps (see the module documentation).
pub const XDP_THREAD_CAPS: [caps::Capability; 3] =
    [caps::Capability::CAP_NET_ADMIN, caps::Capability::CAP_BPF, caps::Capability::CAP_PERFMON];

/// `SECBIT_NO_SETUID_FIXUP` (linux/securebits.h): a uid change leaves the thread's
/// capability sets alone.
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;

/// On the calling thread, while it is still root: the coming switch of user changes its uid
/// but not its capabilities (`SECBIT_NO_SETUID_FIXUP`; needs `CAP_SETPCAP`). The thread then
/// restricts them itself ([`restrict_thread_caps`]) at a moment of its choosing.
/// Where the bit cannot be set (no `CAP_SETPCAP`, as in some containers) `PR_SET_KEEPCAPS`
/// still keeps the permitted set: the effective set is then empty from the switch until the
/// thread restricts, and a fill of the maps in that moment fails (logged; a reload fills).
pub fn keep_caps_across_switch() -> anyhow::Result<()> {
    // SAFETY: prctl with integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_KEEPCAPS, 1, 0, 0, 0) } != 0 {
        bail!("PR_SET_KEEPCAPS: {}", std::io::Error::last_os_error());
    }
    // SAFETY: prctl with integer arguments only; securebits are per thread.
    let bits = unsafe { libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0) };
    if bits < 0 {
        bail!("PR_GET_SECUREBITS: {}", std::io::Error::last_os_error());
    }
    // SAFETY: as above.
    if unsafe { libc::prctl(libc::PR_SET_SECUREBITS, bits as libc::c_ulong | SECBIT_NO_SETUID_FIXUP, 0, 0, 0) } != 0 {
        bail!("PR_SET_SECUREBITS: {}", std::io::Error::last_os_error());
    }
    Ok(())
}

/// On the calling thread: exactly `keep` in the effective and permitted sets, nothing
/// inheritable or ambient.
pub fn restrict_thread_caps(keep: &[caps::Capability]) -> anyhow::Result<()> {
    use caps::{CapSet, CapsHashSet};
    let set: CapsHashSet = keep.iter().copied().collect();
    caps::set(None, CapSet::Inheritable, &CapsHashSet::new()).context("clearing inheritable capabilities")?;
    let _ = caps::clear(None, CapSet::Ambient);
    // effective first: it must stay within the permitted set at every step
    caps::set(None, CapSet::Effective, &set).context("setting effective capabilities")?;
    caps::set(None, CapSet::Permitted, &set).context("setting permitted capabilities")?;
    Ok(())
}

/// Become `who` for the whole process (every thread).
pub fn switch_user(who: &RunAs) -> anyhow::Result<()> {
    let gid = who.gid as libc::gid_t;
    // SAFETY: plain system calls with valid arguments; glibc applies the set*id family to
    // every thread of the process.
    unsafe {
        if libc::setgroups(1, &gid) != 0 {
            bail!("setgroups: {}", std::io::Error::last_os_error());
        }
        if libc::setresgid(gid, gid, gid) != 0 {
            bail!("setresgid({gid}): {}", std::io::Error::last_os_error());
        }
        if libc::setresuid(who.uid, who.uid, who.uid) != 0 {
            bail!("setresuid({}): {}", who.uid, std::io::Error::last_os_error());
        }
        if libc::getuid() != who.uid || libc::geteuid() != who.uid || libc::getegid() != gid {
            bail!("still running as uid {} gid {} after the switch", libc::geteuid(), libc::getegid());
        }
    }
    Ok(())
}

/// The system calls refused to every thread once serving (see the module documentation).
const DENIED: &[i64] = &[
    libc::SYS_execve,
    libc::SYS_execveat,
    libc::SYS_ptrace,
    libc::SYS_process_vm_readv,
    libc::SYS_process_vm_writev,
    libc::SYS_mount,
    libc::SYS_umount2,
    libc::SYS_pivot_root,
    libc::SYS_chroot,
    libc::SYS_unshare,
    libc::SYS_setns,
    libc::SYS_init_module,
    libc::SYS_finit_module,
    libc::SYS_delete_module,
    libc::SYS_kexec_load,
    libc::SYS_kexec_file_load,
    libc::SYS_reboot,
    libc::SYS_swapon,
    libc::SYS_swapoff,
    libc::SYS_add_key,
    libc::SYS_request_key,
    libc::SYS_keyctl,
    libc::SYS_userfaultfd,
    libc::SYS_perf_event_open,
    libc::SYS_personality,
    libc::SYS_acct,
    libc::SYS_settimeofday,
    libc::SYS_clock_settime,
];

/// The seccomp program: [`DENIED`] get `EPERM`, everything else is allowed.
fn deny_list() -> anyhow::Result<seccompiler::BpfProgram> {
    use seccompiler::{SeccompAction, SeccompFilter};
    let rules = DENIED.iter().map(|&n| (n, vec![])).collect();
    let arch = std::env::consts::ARCH.try_into().map_err(|e| anyhow::anyhow!("seccomp: {e:?}"))?;
    let filter = SeccompFilter::new(rules, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), arch)
        .map_err(|e| anyhow::anyhow!("seccomp filter: {e}"))?;
    filter.try_into().map_err(|e| anyhow::anyhow!("seccomp filter: {e:?}"))
}

/// no_new_privs and the seccomp deny list, on every thread of the process.
pub fn deny_syscalls() -> anyhow::Result<()> {
    install(&deny_list()?)
}

fn install(prog: &seccompiler::BpfProgram) -> anyhow::Result<()> {
    // SAFETY: prctl with integer arguments only; required before an unprivileged filter.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        bail!("PR_SET_NO_NEW_PRIVS: {}", std::io::Error::last_os_error());
    }
    // TSYNC: every thread gets the filter, and no_new_privs with it
    seccompiler::apply_filter_all_threads(prog).map_err(|e| anyhow::anyhow!("installing the seccomp filter: {e}"))
}

/// Make `path` (the control socket) and, if xdns may own it, its directory belong to `who`,
/// so that the server can remove it at stop and a new process can move its own over it.
pub fn hand_over_path(path: &std::path::Path, who: &RunAs) -> anyhow::Result<()> {
    let own = |p: &std::path::Path| -> anyhow::Result<()> {
        let c = CString::new(p.as_os_str().as_encoded_bytes()).context("path with a NUL byte")?;
        // SAFETY: `c` is a valid NUL-terminated path for the call.
        if unsafe { libc::chown(c.as_ptr(), who.uid, who.gid) } != 0 {
            bail!("chown {}: {}", p.display(), std::io::Error::last_os_error());
        }
        Ok(())
    };
    own(path)?;
    if let Some(dir) = path.parent().filter(|d| d.file_name().is_some_and(|n| n == "xdns")) {
        own(dir)?;
    }
    Ok(())
}

/// The name of the user the process runs as now, for the log.
pub fn current_user() -> String {
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    by_uid(uid).map_or_else(|| uid.to_string(), |(name, _, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn users_and_groups_resolve_by_name_and_number() {
        let root = resolve("root", None).unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        let nobody = resolve("nobody", Some("0")).unwrap();
        assert_eq!(nobody.uid, 65534);
        assert_eq!(nobody.gid, 0);
        assert_eq!(resolve("0", None).unwrap().uid, 0);
        assert!(resolve("no-such-user-xdns", None).unwrap_err().contains("no user"));
        assert!(resolve("root", Some("no-such-group-xdns")).unwrap_err().contains("no group"));
    }

    /// In a child process (the filter would bind every thread of the test runner): with the
    /// deny list on, `execve` fails with EPERM and the process lives on to say so; ordinary
    /// calls still work.
    #[test]
    fn a_denied_call_fails_with_eperm_and_kills_nothing() {
        let prog = deny_list().unwrap();
        assert!(prog.len() > DENIED.len());
        let path = CString::new("/bin/true").unwrap();
        let argv = [path.as_ptr(), std::ptr::null()];
        // SAFETY: the child only makes system calls (prctl, seccomp, execve, getpid, _exit),
        // no allocation, then exits; the parent waits for it.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            let code = match install(&prog) {
                Err(_) => 10,
                Ok(()) => {
                    // SAFETY: valid NUL-terminated path and argv; on success it does not return.
                    let rc = unsafe { libc::execv(path.as_ptr(), argv.as_ptr()) };
                    let errno = std::io::Error::last_os_error().raw_os_error();
                    // SAFETY: getpid cannot fail.
                    let alive = unsafe { libc::getpid() } > 0;
                    if rc == -1 && errno == Some(libc::EPERM) && alive { 42 } else { 11 }
                }
            };
            // SAFETY: leaves the child at once, without running the parent's destructors.
            unsafe { libc::_exit(code) };
        }
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is valid for writes.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status), "the child was killed: {status:#x}");
        assert_eq!(libc::WEXITSTATUS(status), 42, "execve was not refused with EPERM");
    }
}
