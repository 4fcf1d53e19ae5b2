//! `xdns-lab-delay`: the lab's delaying Ethernet relay (see the library docs for what it
//! does and why). One thread: `ppoll` on two raw packet sockets with the time until the next
//! frame is due, `recvmmsg` batches in, `sendmmsg` batches out.
//!
//! Sockets: `AF_PACKET`/`SOCK_RAW`, bound to one interface each, with
//! - `PACKET_VNET_HDR`: each frame comes with a virtio-net header that is written back
//!   unchanged (NEEDS_CSUM kept), so frames whose checksum a sender left to offload (a
//!   socket's UDP on a veth) leave with the same promise instead of a wrong checksum;
//! - `PACKET_IGNORE_OUTGOING`: the relay does not read back what it sends.
//!
//! Frames go through the interface's qdisc (no `PACKET_QDISC_BYPASS`): a veth whose peer
//! has an XDP program hands frames to a 256-slot ring, and when that is full it pushes back
//! on a real qdisc (the lab gives the relay's veths a long `pfifo`) where a bypass or
//! `noqueue` would drop them; frames released together after a delay come in bursts.

use std::ffi::CString;
use std::io;
use std::mem;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Instant;

use xdns_lab_delay::{Config, DelayTable, Queues};

const VNET_HDR: usize = 10;
/// Receive buffer: a virtio-net header and a frame of up to 64 KiB (a GRO or GSO frame).
const BUF: usize = VNET_HDR + 65_550;
const BATCH: usize = 64;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;

static STOP: AtomicBool = AtomicBool::new(false);
static REPORT: AtomicU32 = AtomicU32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGUSR1 {
        REPORT.fetch_add(1, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

fn check(r: libc::c_int, what: &str) -> io::Result<libc::c_int> {
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}

fn setsockopt(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    val: libc::c_int,
    what: &str,
) -> io::Result<()> {
    // SAFETY: `val` is a live c_int and its size is passed.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &val as *const _ as *const libc::c_void,
            mem::size_of::<libc::c_int>() as u32,
        )
    };
    check(r, what).map(|_| ())
}

/// A raw packet socket bound to interface `name`, receiving every frame of it.
fn packet_socket(name: &str) -> io::Result<RawFd> {
    let cname = CString::new(name)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface name"))?;
    // SAFETY: a NUL-terminated string.
    let ifindex = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if ifindex == 0 {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface {name}"),
        ));
    }
    // Protocol 0 at creation: nothing is received until bind, which names the interface (a
    // socket made with ETH_P_ALL would read every interface's frames until then).
    // SAFETY: plain socket(2).
    let fd = check(
        unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        },
        "socket(AF_PACKET)",
    )?;
    setsockopt(
        fd,
        libc::SOL_PACKET,
        libc::PACKET_VNET_HDR,
        1,
        "PACKET_VNET_HDR",
    )?;
    setsockopt(
        fd,
        libc::SOL_PACKET,
        PACKET_IGNORE_OUTGOING,
        1,
        "PACKET_IGNORE_OUTGOING",
    )?;
    // Room for bursts: tens of thousands of frames held by the kernel while we send.
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_RCVBUFFORCE,
        64 << 20,
        "SO_RCVBUFFORCE",
    )?;
    setsockopt(
        fd,
        libc::SOL_SOCKET,
        libc::SO_SNDBUFFORCE,
        64 << 20,
        "SO_SNDBUFFORCE",
    )?;
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
    let mut sll: libc::sockaddr_ll = unsafe { mem::zeroed() };
    sll.sll_family = libc::AF_PACKET as u16;
    sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
    sll.sll_ifindex = ifindex as i32;
    // SAFETY: sll is a valid sockaddr_ll and its size is passed.
    check(
        unsafe {
            libc::bind(
                fd,
                &sll as *const _ as *const libc::sockaddr,
                mem::size_of::<libc::sockaddr_ll>() as u32,
            )
        },
        &format!("bind({name})"),
    )?;
    Ok(fd)
}

/// Kernel drop counters of a packet socket (PACKET_STATISTICS; reading resets them).
fn drops(fd: RawFd) -> u64 {
    // SAFETY: tpacket_stats is plain data; getsockopt writes at most `len` bytes.
    unsafe {
        let mut st: libc::tpacket_stats = mem::zeroed();
        let mut len = mem::size_of::<libc::tpacket_stats>() as u32;
        if libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            &mut st as *mut _ as *mut libc::c_void,
            &mut len,
        ) == 0
        {
            st.tp_drops as u64
        } else {
            0
        }
    }
}

#[derive(Default)]
struct Counters {
    frames: [u64; 2], // relayed to output 0 (a) and 1 (b)
    bytes: [u64; 2],
    send_errors: u64,
    rx_drops: [u64; 2], // the kernel's drops on each socket (full receive buffer)
}

/// Receive up to BATCH frames from `fd` into `bufs`; their lengths (virtio header included).
fn recv_batch(fd: RawFd, bufs: &mut [Vec<u8>], lens: &mut [usize]) -> io::Result<usize> {
    // SAFETY: zeroed iovec/mmsghdr are valid; each iovec points into a live buffer of BUF bytes
    // that outlives the call.
    unsafe {
        let mut iov: [libc::iovec; BATCH] = mem::zeroed();
        let mut msgs: [libc::mmsghdr; BATCH] = mem::zeroed();
        for i in 0..BATCH {
            iov[i].iov_base = bufs[i].as_mut_ptr() as *mut libc::c_void;
            iov[i].iov_len = BUF;
            msgs[i].msg_hdr.msg_iov = &mut iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        let n = libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            BATCH as u32,
            libc::MSG_DONTWAIT,
            std::ptr::null_mut(),
        );
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        for i in 0..n as usize {
            lens[i] = msgs[i].msg_len as usize;
        }
        Ok(n as usize)
    }
}

/// Send `frames` (virtio header + frame each) on `fd`; returns how many could not be sent.
fn send_all(fd: RawFd, frames: &[Vec<u8>]) -> u64 {
    let mut errors = 0;
    for chunk in frames.chunks(BATCH) {
        // SAFETY: as in recv_batch; the buffers are only read.
        unsafe {
            let mut iov: [libc::iovec; BATCH] = mem::zeroed();
            let mut msgs: [libc::mmsghdr; BATCH] = mem::zeroed();
            for (i, f) in chunk.iter().enumerate() {
                iov[i].iov_base = f.as_ptr() as *mut libc::c_void;
                iov[i].iov_len = f.len();
                msgs[i].msg_hdr.msg_iov = &mut iov[i];
                msgs[i].msg_hdr.msg_iovlen = 1;
            }
            let mut done = 0usize;
            let mut tries = 0;
            while done < chunk.len() {
                let n = libc::sendmmsg(
                    fd,
                    msgs.as_mut_ptr().add(done),
                    (chunk.len() - done) as u32,
                    0,
                );
                if n > 0 {
                    done += n as usize;
                    continue;
                }
                let e = io::Error::last_os_error();
                tries += 1;
                if e.raw_os_error() == Some(libc::EINTR)
                    || (e.raw_os_error() == Some(libc::ENOBUFS) && tries < 100)
                    || (e.kind() == io::ErrorKind::WouldBlock && tries < 100)
                {
                    continue;
                }
                // A frame the interface refuses (too big, say): count it and go on.
                errors += 1;
                done += 1;
            }
        }
    }
    errors
}

fn report(c: &Counters, q: &Queues, fds: [RawFd; 2]) -> String {
    let mut c_drops = c.rx_drops;
    for (i, fd) in fds.iter().enumerate() {
        c_drops[i] += drops(*fd);
    }
    format!(
        "{{\"a_to_b_frames\": {}, \"b_to_a_frames\": {}, \"a_to_b_bytes\": {}, \"b_to_a_bytes\": {}, \
         \"held\": {}, \"max_held\": {}, \"send_errors\": {}, \"rx_drops_a\": {}, \"rx_drops_b\": {}}}",
        c.frames[1], c.frames[0], c.bytes[1], c.bytes[0], q.held(), q.max_held, c.send_errors, c_drops[0], c_drops[1]
    )
}

fn run(cfg: Config) -> io::Result<()> {
    let table = DelayTable::new(&cfg.delays, cfg.default);
    let fds = [packet_socket(&cfg.a)?, packet_socket(&cfg.b)?];
    // Wake on time: the default 50 us timer slack would add to every delay.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1, 0, 0, 0) };
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGUSR1] {
        // SAFETY: the handler only touches atomics (async-signal-safe). No SA_RESTART, so
        // ppoll returns EINTR.
        unsafe {
            let mut sa: libc::sigaction = mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    let mut rbufs: Vec<Vec<u8>> = (0..BATCH).map(|_| vec![0u8; BUF]).collect();
    let mut lens = [0usize; BATCH];
    let mut pool: Vec<Vec<u8>> = Vec::new();
    let mut queues = Queues::new();
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut c = Counters::default();
    let mut reported = 0;
    eprintln!(
        "xdns-lab-delay: relaying {} <-> {} ({} delays, default {:?})",
        cfg.a,
        cfg.b,
        cfg.delays.len(),
        cfg.default
    );
    while !STOP.load(Ordering::Relaxed) {
        // Send what is due.
        let now = Instant::now();
        for (o, &fd) in fds.iter().enumerate() {
            queues.take_due(o, now, &mut out);
            if !out.is_empty() {
                c.send_errors += send_all(fd, &out);
                c.frames[o] += out.len() as u64;
                c.bytes[o] += out.iter().map(|f| (f.len() - VNET_HDR) as u64).sum::<u64>();
                pool.append(&mut out);
            }
        }
        let r = REPORT.load(Ordering::Relaxed);
        if r != reported {
            reported = r;
            for (i, fd) in fds.iter().enumerate() {
                c.rx_drops[i] += drops(*fd);
            }
            println!("{}", report(&c, &queues, fds));
        }
        // Wait for frames or for the next due time.
        let timeout = queues
            .next_due()
            .map(|d| d.saturating_duration_since(Instant::now()));
        let ts = timeout.map(|t| libc::timespec {
            tv_sec: t.as_secs() as _,
            tv_nsec: t.subsec_nanos() as _,
        });
        let mut pfd = [
            libc::pollfd {
                fd: fds[0],
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: fds[1],
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // SAFETY: pfd and ts live across the call.
        let n = unsafe {
            libc::ppoll(
                pfd.as_mut_ptr(),
                2,
                ts.as_ref().map_or(std::ptr::null(), |t| t as *const _),
                std::ptr::null(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            return Err(e);
        }
        for (i, p) in pfd.iter().enumerate() {
            if p.revents & libc::POLLIN == 0 {
                continue;
            }
            let other = 1 - i;
            // A few batches per wake-up, then back to sending: frames due soon are not starved.
            for _ in 0..8 {
                let got = match recv_batch(fds[i], &mut rbufs, &mut lens) {
                    Ok(n) => n,
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.raw_os_error() == Some(libc::EINTR) =>
                    {
                        0
                    }
                    Err(e) => return Err(e),
                };
                let now = Instant::now();
                for k in 0..got {
                    let len = lens[k].min(BUF);
                    if len <= VNET_HDR {
                        continue;
                    }
                    let frame = &mut rbufs[k][..len];
                    // Only NEEDS_CSUM means something on output; DATA_VALID (a receive-side
                    // promise) is dropped.
                    frame[0] &= VIRTIO_NET_HDR_F_NEEDS_CSUM;
                    let delay = table.of_frame(&frame[VNET_HDR..]);
                    let mut b = pool.pop().unwrap_or_default();
                    b.clear();
                    b.extend_from_slice(frame);
                    queues.push(other, delay, now, b);
                }
                if got < BATCH {
                    break;
                }
            }
        }
    }
    println!("{}", report(&c, &queues, fds));
    Ok(())
}

fn main() {
    let cfg = match Config::parse(std::env::args().skip(1)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("xdns-lab-delay: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(cfg) {
        eprintln!("xdns-lab-delay: {e}");
        std::process::exit(1);
    }
}
