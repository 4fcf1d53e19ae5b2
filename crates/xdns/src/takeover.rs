//! Restart without losing a query: `xdns serve --takeover` takes the running server's
//! listening sockets and XDP links over its control socket, so no socket is ever closed and
//! the XDP program is swapped inside its link, never detached.
//!
//! ```text
//! new process                                   running (old) process
//! load config, zones, XDP program + maps
//!   (any error: exit 1, the old one is untouched)
//! "takeover\n"                              ->
//!                                           <-  fds over SCM_RIGHTS, in messages of one byte
//!                                               ('+' more follow, '.' last), then one JSON line:
//!                                               {"pid":…,"fds":[{"kind":"udp","addr":…},…]}
//! serve on the inherited sockets (both processes read them for a moment: each datagram
//!   goes to exactly one), BPF_LINK_UPDATE each inherited link to the new program
//! "done\n"                                  ->  queues its own stop
//!                                           <-  "ok\n"
//! rename its control socket over the path       stops reading, finishes in-flight queries and
//!                                               TCP connections, exits without detaching
//! ```
//!
//! If the connection ends before `done` (the new process failed or died), the old process
//! points its links back at its own program and keeps serving. Until `ok`, the new process can
//! still give up: it exits and the old one carries on.

use std::io::{self, BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use crate::server::{Request, Shared};
use crate::xdp::{InheritedLink, XdpMode};

/// The control command that starts a hand-over, and the one that completes it.
pub const COMMAND: &str = "takeover";
const DONE: &str = "done";
/// Fds per SCM_RIGHTS message (the kernel's limit is 253).
const FDS_PER_MESSAGE: usize = 64;
/// How long the old process waits for `done` before it takes its links back.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(60);
/// Client I/O timeout.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// What one handed-over fd is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Role {
    /// A UDP worker socket (one of several `SO_REUSEPORT` sockets per address).
    Udp { addr: SocketAddr },
    /// A listening TCP socket.
    Tcp { addr: SocketAddr },
    /// The listening socket of `/metrics`.
    Metrics { addr: SocketAddr },
    /// An XDP BPF link.
    Xdp { interface: String, mode: XdpMode },
    /// A socket reserving a source port of kernel iteration (`crate::kit::reserve`).
    Kit { port: u16 },
}

/// The JSON line after the fds: their roles, in order, and the sender's pid.
#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    pid: u32,
    fds: Vec<Role>,
}

/// The running server's side: its listening sockets (duplicates, ready to hand over) and
/// whether a hand-over is under way.
#[derive(Default)]
pub struct State {
    listeners: Mutex<Vec<(Role, OwnedFd)>>,
    busy: AtomicBool,
}

impl State {
    /// Keep a duplicate of listening socket `fd` to hand over.
    pub fn offer(&self, role: Role, fd: BorrowedFd<'_>) -> io::Result<()> {
        let dup = fd.try_clone_to_owned()?;
        lock(&self.listeners).push((role, dup));
        Ok(())
    }

    /// Close the duplicates (on shutdown: a stopped listener must really close).
    pub fn withdraw(&self) {
        lock(&self.listeners).clear();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Serve a `takeover` request on a control connection (the command line already read).
pub async fn serve<R>(
    mut reader: R,
    mut wr: tokio::net::unix::OwnedWriteHalf,
    shared: Arc<Shared>,
    requests: tokio::sync::mpsc::Sender<Request>,
) -> io::Result<()>
where
    R: tokio::io::AsyncBufRead + Unpin,
{
    let pid = wr
        .as_ref()
        .peer_cred()
        .ok()
        .and_then(|c| c.pid())
        .map_or(0, |p| p as u32);
    if shared.takeover.busy.swap(true, Ordering::AcqRel) {
        return refuse(wr, "a takeover is already under way").await;
    }
    let mut roles = Vec::new();
    let mut fds = Vec::new();
    for (role, fd) in lock(&shared.takeover.listeners).iter() {
        roles.push(role.clone());
        fds.push(fd.try_clone()?);
    }
    let sh = shared.clone();
    let links = tokio::task::spawn_blocking(move || {
        let fp = lock(&sh.fastpath);
        fp.as_ref().map(|fp| fp.links()).transpose()
    })
    .await
    .map_err(io::Error::other)?;
    let links = match links {
        Ok(l) => l.unwrap_or_default(),
        Err(e) => {
            shared.takeover.busy.store(false, Ordering::Release);
            tracing::error!(error = %e, "takeover refused: cannot duplicate the XDP links");
            return refuse(wr, &format!("XDP links: {e:#}")).await;
        }
    };
    let nlinks = links.len();
    for l in links {
        roles.push(Role::Xdp {
            interface: l.interface,
            mode: l.mode,
        });
        fds.push(l.fd);
    }
    let manifest = Manifest {
        pid: std::process::id(),
        fds: roles,
    };
    let line = serde_json::to_string(&manifest).map_err(io::Error::other)? + "\n";
    let sent = async {
        send_fds(wr.as_ref(), &fds).await?;
        wr.write_all(line.as_bytes()).await
    }
    .await;
    drop(fds);
    if let Err(e) = sent {
        shared.takeover.busy.store(false, Ordering::Release);
        return Err(e);
    }
    tracing::info!(
        pid,
        sockets = manifest.fds.len() - nlinks,
        xdp_links = nlinks,
        "takeover: sockets and XDP links handed to a new process"
    );
    let mut answer = String::new();
    let got = tokio::time::timeout(COMMIT_TIMEOUT, reader.read_line(&mut answer)).await;
    if matches!(got, Ok(Ok(_))) && answer.trim() == DONE {
        // Queued before `ok`: once the new process reads `ok`, this one is bound to stop.
        if requests.send(Request::HandedOver { pid }).await.is_ok() {
            wr.write_all(b"ok\n").await?;
            return wr.shutdown().await;
        }
    }
    // Gone, timed out or confused: take the links back and carry on serving.
    let sh = shared.clone();
    let reclaimed = tokio::task::spawn_blocking(move || {
        lock(&sh.fastpath)
            .as_ref()
            .map(|fp| fp.reclaim_links())
            .transpose()
    })
    .await;
    match reclaimed {
        Ok(Ok(_)) => tracing::warn!(
            pid,
            "takeover abandoned by the new process: still serving (XDP links back on this program)"
        ),
        Ok(Err(e)) => {
            tracing::error!(pid, error = %e, "takeover abandoned; XDP links not reclaimed")
        }
        Err(e) => tracing::error!(pid, error = %e, "takeover abandoned; XDP links not reclaimed"),
    }
    shared.takeover.busy.store(false, Ordering::Release);
    let _ = wr.write_all(b"error: takeover abandoned\n").await;
    wr.shutdown().await
}

/// Answer a takeover that cannot start: an empty fd message (what the client reads first),
/// then one `error: …` line.
async fn refuse(mut wr: tokio::net::unix::OwnedWriteHalf, why: &str) -> io::Result<()> {
    send_fds(wr.as_ref(), &[]).await?;
    wr.write_all(format!("error: {why}\n").as_bytes()).await?;
    wr.shutdown().await
}

/// Send `fds` in messages of at most [`FDS_PER_MESSAGE`], each with a one-byte payload: `+`
/// when more follow, `.` for the last (one `.` message with no fds when there are none).
async fn send_fds(stream: &tokio::net::UnixStream, fds: &[OwnedFd]) -> io::Result<()> {
    let raw: Vec<RawFd> = fds.iter().map(|f| f.as_raw_fd()).collect();
    let mut chunks: Vec<&[RawFd]> = raw.chunks(FDS_PER_MESSAGE).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    let n = chunks.len();
    for (i, chunk) in chunks.into_iter().enumerate() {
        let mark = if i + 1 == n { b'.' } else { b'+' };
        stream
            .async_io(tokio::io::Interest::WRITABLE, || {
                send_chunk(stream.as_raw_fd(), chunk, mark)
            })
            .await?;
    }
    Ok(())
}

/// Space for the control message carrying `n` fds, in u64 words (aligned for `cmsghdr`).
fn cmsg_words(n: usize) -> usize {
    // SAFETY: CMSG_SPACE is a pure size computation.
    let bytes = unsafe { libc::CMSG_SPACE((n * std::mem::size_of::<RawFd>()) as u32) } as usize;
    bytes.div_ceil(8)
}

/// One `sendmsg` of the byte `mark` with `fds` attached.
fn send_chunk(sock: RawFd, fds: &[RawFd], mark: u8) -> io::Result<()> {
    let mut byte = [mark];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut ctrl = vec![0u64; cmsg_words(fds.len())];
    // SAFETY: msghdr is plain data; every pointer set below points to locals that outlive the
    // sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        let len = std::mem::size_of_val(fds);
        msg.msg_control = ctrl.as_mut_ptr().cast();
        msg.msg_controllen = ctrl.len() * 8;
        // SAFETY: the control buffer is CMSG_SPACE(len) bytes (rounded up), so the first
        // header and its data fit; CMSG_DATA points inside it and `len` bytes are copied.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(len as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), len);
        }
    }
    // SAFETY: `sock` is a valid socket; `msg` is fully initialised above.
    let r = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    if r != 1 {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// One `recvmsg` of one byte with the fds attached to it (close-on-exec).
fn recv_chunk(sock: RawFd) -> io::Result<(u8, Vec<OwnedFd>)> {
    let mut byte = [0u8];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut ctrl = vec![0u64; cmsg_words(FDS_PER_MESSAGE)];
    // SAFETY: msghdr is plain data; every pointer set below points to locals that outlive the
    // recvmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl.as_mut_ptr().cast();
    msg.msg_controllen = ctrl.len() * 8;
    // SAFETY: `sock` is a valid socket; `msg` points to live buffers of the sizes given.
    let r = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: the kernel filled `msg_controllen` bytes of `ctrl` with well-formed headers;
    // CMSG_FIRSTHDR/NXTHDR stay inside it. Each SCM_RIGHTS fd is new and owned by nobody else.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if r == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the running server closed the connection",
        ));
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other("file descriptors were truncated"));
    }
    Ok((byte[0], fds))
}

/// What the new process received: the old process's sockets and links, by role.
#[derive(Debug, Default)]
pub struct Inherited {
    /// UDP worker sockets with their address (several per address).
    pub udp: Vec<(SocketAddr, OwnedFd)>,
    /// Listening TCP sockets.
    pub tcp: Vec<(SocketAddr, OwnedFd)>,
    /// The metrics listener.
    pub metrics: Option<(SocketAddr, OwnedFd)>,
    /// XDP links.
    pub xdp: Vec<InheritedLink>,
    /// Kernel iteration's reserved ports, by port.
    pub kit: Vec<(u16, OwnedFd)>,
}

impl Inherited {
    /// The UDP sockets bound to `addr` (removed from `self`).
    pub fn take_udp(&mut self, addr: SocketAddr) -> Vec<OwnedFd> {
        take_by_addr(&mut self.udp, addr)
    }

    /// The TCP listener bound to `addr`, if any (removed from `self`).
    pub fn take_tcp(&mut self, addr: SocketAddr) -> Option<OwnedFd> {
        take_by_addr(&mut self.tcp, addr).pop()
    }

    /// The metrics listener if it is bound to `addr` (removed from `self`).
    pub fn take_metrics(&mut self, addr: SocketAddr) -> Option<OwnedFd> {
        match self.metrics.take() {
            Some((a, fd)) if a == addr => Some(fd),
            other => {
                self.metrics = other;
                None
            }
        }
    }

    /// Addresses still held here (listen addresses no longer configured).
    pub fn leftover(&self) -> Vec<SocketAddr> {
        let mut v: Vec<SocketAddr> = self
            .udp
            .iter()
            .chain(&self.tcp)
            .chain(&self.metrics)
            .map(|(a, _)| *a)
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

fn take_by_addr(v: &mut Vec<(SocketAddr, OwnedFd)>, addr: SocketAddr) -> Vec<OwnedFd> {
    let (mine, rest): (Vec<_>, Vec<_>) =
        std::mem::take(v).into_iter().partition(|(a, _)| *a == addr);
    *v = rest;
    mine.into_iter().map(|(_, fd)| fd).collect()
}

/// Sort `fds` by `roles`, checking each socket is what its role says (type and address);
/// XDP links are checked when they are adopted.
fn sort_fds(roles: Vec<Role>, fds: Vec<OwnedFd>) -> anyhow::Result<Inherited> {
    if roles.len() != fds.len() {
        bail!(
            "the running server described {} fds but sent {}",
            roles.len(),
            fds.len()
        );
    }
    let mut inh = Inherited::default();
    for (role, fd) in roles.into_iter().zip(fds) {
        match role {
            Role::Udp { addr } => {
                check_socket(&fd, socket2::Type::DGRAM, addr)?;
                inh.udp.push((addr, fd));
            }
            Role::Tcp { addr } => {
                check_socket(&fd, socket2::Type::STREAM, addr)?;
                inh.tcp.push((addr, fd));
            }
            Role::Metrics { addr } => {
                check_socket(&fd, socket2::Type::STREAM, addr)?;
                inh.metrics = Some((addr, fd));
            }
            Role::Xdp { interface, mode } => inh.xdp.push(InheritedLink {
                interface,
                mode,
                fd,
            }),
            Role::Kit { port } => {
                let any = SocketAddr::new(std::net::IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), port);
                check_socket(&fd, socket2::Type::DGRAM, any)?;
                inh.kit.push((port, fd));
            }
        }
    }
    Ok(inh)
}

fn check_socket(fd: &OwnedFd, ty: socket2::Type, addr: SocketAddr) -> anyhow::Result<()> {
    let s = socket2::SockRef::from(fd);
    let got_ty = s.r#type().context("a handed-over fd is not a socket")?;
    let got = s.local_addr().ok().and_then(|a| a.as_socket());
    if got_ty != ty || got != Some(addr) {
        bail!("a handed-over socket is not {ty:?} on {addr} (it is {got_ty:?} on {got:?})");
    }
    Ok(())
}

/// A hand-over in progress, seen from the new process.
pub struct Session {
    stream: StdUnixStream,
    reader: BufReader<StdUnixStream>,
    /// The running server's pid.
    pub pid: u32,
    /// Its sockets and links.
    pub inherited: Inherited,
}

/// Ask the server on control socket `path` for its sockets and links. `Ok(None)` when no
/// server answers there (nothing to take over).
pub fn request(path: &Path) -> anyhow::Result<Option<Session>> {
    let stream = match StdUnixStream::connect(path) {
        Ok(s) => s,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::ConnectionRefused
            ) =>
        {
            return Ok(None)
        }
        Err(e) => return Err(e).with_context(|| format!("connecting to {}", path.display())),
    };
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    (&stream).write_all(format!("{COMMAND}\n").as_bytes())?;
    let mut fds = Vec::new();
    loop {
        let (mark, got) =
            recv_chunk(stream.as_fd().as_raw_fd()).context("receiving the sockets")?;
        fds.extend(got);
        match mark {
            b'+' => continue,
            b'.' => break,
            // A server that does not know `takeover` answers one error line.
            other => {
                let mut rest = String::new();
                let _ = BufReader::new(&stream).read_line(&mut rest);
                bail!(
                    "the running server refused: {}{}",
                    char::from(other),
                    rest.trim_end()
                );
            }
        }
    }
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    if let Some(e) = line.trim_end().strip_prefix("error: ") {
        bail!("the running server refused: {e}");
    }
    let manifest: Manifest = serde_json::from_str(line.trim_end())
        .with_context(|| format!("the running server's answer is not valid: {line:?}"))?;
    let inherited = sort_fds(manifest.fds, fds)?;
    Ok(Some(Session {
        stream,
        reader,
        pid: manifest.pid,
        inherited,
    }))
}

impl Session {
    /// Tell the old process that this one serves; returns once it has committed to stop.
    pub fn commit(mut self) -> anyhow::Result<()> {
        (&self.stream).write_all(format!("{DONE}\n").as_bytes())?;
        let mut line = String::new();
        self.reader
            .read_line(&mut line)
            .context("waiting for the running server to stop")?;
        match line.trim_end() {
            "ok" => Ok(()),
            "" => bail!("the running server closed the connection instead of stopping"),
            other => bail!("the running server answered {other:?} instead of stopping"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fds_cross_in_chunks_and_arrive_whole() {
        let (a, b) = StdUnixStream::pair().unwrap();
        // More than one message's worth, each fd distinguishable by its bound port.
        let socks: Vec<std::net::UdpSocket> = (0..FDS_PER_MESSAGE + 5)
            .map(|_| std::net::UdpSocket::bind("127.0.0.1:0").unwrap())
            .collect();
        let raw: Vec<RawFd> = socks.iter().map(|s| s.as_raw_fd()).collect();
        send_chunk(a.as_raw_fd(), &raw[..FDS_PER_MESSAGE], b'+').unwrap();
        send_chunk(a.as_raw_fd(), &raw[FDS_PER_MESSAGE..], b'.').unwrap();
        let (m1, f1) = recv_chunk(b.as_raw_fd()).unwrap();
        let (m2, f2) = recv_chunk(b.as_raw_fd()).unwrap();
        assert_eq!((m1, m2), (b'+', b'.'));
        assert_eq!((f1.len(), f2.len()), (FDS_PER_MESSAGE, 5));
        for (fd, s) in f1.into_iter().chain(f2).zip(&socks) {
            let got = std::net::UdpSocket::from(fd).local_addr().unwrap();
            assert_eq!(got, s.local_addr().unwrap());
        }
        // No fds: one '.' message.
        send_chunk(a.as_raw_fd(), &[], b'.').unwrap();
        let (m, f) = recv_chunk(b.as_raw_fd()).unwrap();
        assert_eq!((m, f.len()), (b'.', 0));
        drop(a);
        let e = recv_chunk(b.as_raw_fd()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn sockets_are_checked_against_their_roles() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let fd = || OwnedFd::from(udp.try_clone().unwrap());
        let inh = sort_fds(vec![Role::Udp { addr }], vec![fd()]).unwrap();
        assert_eq!(inh.udp.len(), 1);
        // A UDP socket described as TCP, or with another address, is refused.
        assert!(sort_fds(vec![Role::Tcp { addr }], vec![fd()]).is_err());
        let other: SocketAddr = "127.0.0.1:9".parse().unwrap();
        assert!(sort_fds(vec![Role::Udp { addr: other }], vec![fd()]).is_err());
        // Counts must match.
        assert!(sort_fds(vec![Role::Udp { addr }], vec![]).is_err());
    }

    #[test]
    fn inherited_sockets_are_taken_by_address() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "[::1]:1".parse().unwrap();
        let fd = || OwnedFd::from(std::net::UdpSocket::bind("127.0.0.1:0").unwrap());
        let mut inh = Inherited {
            udp: vec![(a, fd()), (b, fd()), (a, fd())],
            tcp: vec![(b, fd())],
            metrics: Some((a, fd())),
            xdp: Vec::new(),
            kit: Vec::new(),
        };
        assert_eq!(inh.take_udp(a).len(), 2);
        assert!(inh.take_tcp(a).is_none());
        assert!(
            inh.take_metrics(b).is_none(),
            "metrics on another address stays"
        );
        assert_eq!(inh.leftover(), vec![a, b]);
        assert!(inh.take_metrics(a).is_some());
        assert!(inh.take_tcp(b).is_some());
        assert_eq!(inh.leftover(), vec![b], "one UDP socket of b left");
    }

    #[test]
    fn manifest_round_trips() {
        let m = Manifest {
            pid: 7,
            fds: vec![
                Role::Udp {
                    addr: "198.18.0.5:53".parse().unwrap(),
                },
                Role::Metrics {
                    addr: "[2001:db8::5]:9153".parse().unwrap(),
                },
                Role::Xdp {
                    interface: "eth0".into(),
                    mode: XdpMode::Native,
                },
            ],
        };
        let line = serde_json::to_string(&m).unwrap();
        assert!(!line.contains('\n'));
        assert!(
            line.contains(r#"{"kind":"xdp","interface":"eth0","mode":"native"}"#),
            "{line}"
        );
        let back: Manifest = serde_json::from_str(&line).unwrap();
        assert_eq!(back.fds, m.fds);
    }

    /// The whole dialogue against the control socket of a (userspace-only) server: the
    /// sockets arrive, `done` queues the stop; a client that goes away before `done` leaves
    /// the server able to hand over again.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn hand_over_abandon_and_commit() {
        let dir = std::env::temp_dir().join(format!("xdns-takeover-{}", std::process::id()));
        let path = dir.join("c.sock");
        let listener = crate::control::bind(&path).unwrap();
        let shared = Arc::new(Shared::new(Default::default()));
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        shared
            .takeover
            .offer(Role::Udp { addr }, udp.as_fd())
            .unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(crate::control::serve(listener, shared.clone(), tx, stop_rx));

        let p = path.clone();
        let first = tokio::task::spawn_blocking(move || request(&p).map(|s| s.map(|s| s.pid)))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            first,
            Some(std::process::id()),
            "abandoned by dropping the session"
        );
        // The server notices the abandon and accepts another takeover.
        let p = path.clone();
        let session = tokio::task::spawn_blocking(move || {
            for _ in 0..100 {
                match request(&p) {
                    Ok(s) => return s,
                    Err(e) if e.to_string().contains("under way") => {
                        std::thread::sleep(Duration::from_millis(20))
                    }
                    Err(e) => panic!("{e:#}"),
                }
            }
            panic!("the abandoned takeover was never released");
        })
        .await
        .unwrap()
        .unwrap();
        let mut inh = session.inherited;
        let socks = inh.take_udp(addr);
        assert_eq!(socks.len(), 1);
        // The same socket: a datagram sent to it is readable from the inherited fd.
        let got = std::net::UdpSocket::from(socks.into_iter().next().unwrap());
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"q", addr).unwrap();
        let mut buf = [0u8; 4];
        got.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(got.recv(&mut buf).unwrap(), 1);

        let s = Session {
            inherited: Inherited::default(),
            ..session
        };
        tokio::task::spawn_blocking(move || s.commit())
            .await
            .unwrap()
            .unwrap();
        assert!(matches!(
            rx.recv().await,
            Some(Request::HandedOver { pid }) if pid == std::process::id()
        ));
        stop_tx.send(true).unwrap();
        task.await.unwrap();
        drop(std::fs::remove_dir_all(&dir));
    }
}
