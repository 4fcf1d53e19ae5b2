//! What an interface does with the frames our program sends back with `XDP_TX`, asked of the
//! kernel: for a veth, whether its peer can receive them ([`veth_peer`], rtnetlink), and for
//! any driver, its own count of `XDP_TX` frames it failed to send ([`TxErrors`], ethtool).
//!
//! Why it matters: `XDP_TX` in native mode hands the frame to the driver, which may drop it
//! and count nothing the program can see. A veth is the common case: it delivers a native
//! `XDP_TX` frame only into a peer that has an XDP receive ring, i.e. a native XDP program of
//! its own (on Linux 6.18, GRO on the peer does not do it). A container's or a lab
//! namespace's veth has none, so native mode there loses every kernel answer; generic mode
//! sends them through the ordinary transmit path, which delivers them.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// What a veth's peer can do with our `XDP_TX` frames.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerXdp {
    /// Not a veth: the driver sends `XDP_TX` frames out on the wire itself.
    NotVeth,
    /// The peer (named, in this or another namespace) runs a native XDP program: it has an
    /// XDP receive ring and gets our frames.
    Ready { peer: String },
    /// The peer runs no native XDP program: native `XDP_TX` frames are dropped (the veth's
    /// `xdp_tx_errors` counts them).
    NoProgram { peer: String, elsewhere: bool },
    /// The peer could not be asked about (another namespace we may not see into, say).
    Unknown { reason: String },
}

impl PeerXdp {
    /// A native attachment on this interface loses `XDP_TX` frames, or may.
    pub fn loses_native_tx(&self) -> bool {
        matches!(self, Self::NoProgram { .. } | Self::Unknown { .. })
    }

    /// Why a native attachment would lose answers, for logs and `xdns stats`; `None` when it
    /// would not.
    pub fn why_not_native(&self) -> Option<String> {
        match self {
            Self::NotVeth | Self::Ready { .. } => None,
            Self::NoProgram { peer, elsewhere: false } => Some(format!("veth peer {peer} has no XDP program")),
            Self::NoProgram { peer, elsewhere: true } => {
                Some(format!("veth peer {peer} (another network namespace) has no XDP program"))
            }
            Self::Unknown { reason } => Some(format!("veth peer not visible ({reason})")),
        }
    }
}

/// Whether the veth `ifname`'s peer can receive native `XDP_TX` frames (see the module doc).
/// The peer is found through the link's `IFLA_LINK` and, when it lives in another namespace,
/// `IFLA_LINK_NETNSID`, and asked with one more `RTM_GETLINK` (`IFLA_TARGET_NETNSID`).
pub fn veth_peer(ifname: &str) -> io::Result<PeerXdp> {
    let ifindex = ifindex(ifname)?;
    let me = get_link(ifindex, None)?;
    if me.kind.as_deref() != Some("veth") {
        return Ok(PeerXdp::NotVeth);
    }
    let Some(peer_index) = me.link.filter(|&i| i != 0) else {
        return Ok(PeerXdp::Unknown { reason: "the kernel names no peer".into() });
    };
    let elsewhere = me.link_netnsid.is_some();
    let peer = match get_link(peer_index, me.link_netnsid) {
        Ok(p) => p,
        Err(e) => return Ok(PeerXdp::Unknown { reason: format!("asking for peer ifindex {peer_index}: {e}") }),
    };
    Ok(if peer.xdp_drv_prog != 0 {
        PeerXdp::Ready { peer: peer.name }
    } else {
        PeerXdp::NoProgram { peer: peer.name, elsewhere }
    })
}

/// The MAC of interface `ifindex` (`RTM_GETLINK`'s `IFLA_ADDRESS`); `None` for a link
/// without a six-byte address.
pub fn link_mac(ifindex: u32) -> io::Result<Option<[u8; 6]>> {
    Ok(get_link(ifindex, None)?.address)
}

/// The index of interface `ifname`.
pub fn ifindex(ifname: &str) -> io::Result<u32> {
    let cname = std::ffi::CString::new(ifname).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `cname` is a valid NUL-terminated string for the duration of the call.
    let i = unsafe { libc::if_nametoindex(cname.as_ptr()) };
    if i == 0 {
        return Err(io::Error::new(io::ErrorKind::NotFound, format!("no interface {ifname}")));
    }
    Ok(i)
}

/// The attributes of one link that [`veth_peer`] needs.
#[derive(Debug, Default)]
struct Link {
    name: String,
    /// `IFLA_INFO_KIND` ("veth", "bridge", ...); `None` for a plain device.
    kind: Option<String>,
    /// `IFLA_LINK`: a veth's peer's ifindex (in the namespace `link_netnsid` names).
    link: Option<u32>,
    /// `IFLA_LINK_NETNSID`: the peer's namespace, as an id of ours; `None`: this namespace.
    link_netnsid: Option<i32>,
    /// The id of the native (driver mode) XDP program, 0 for none.
    xdp_drv_prog: u32,
    /// `IFLA_ADDRESS`: its MAC (an Ethernet-like link's six bytes).
    address: Option<[u8; 6]>,
}

// rtnetlink numbers (include/uapi/linux/if_link.h, netlink.h): stable kernel ABI.
const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINK: u16 = 5;
const IFLA_LINKINFO: u16 = 18;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_EXT_MASK: u16 = 29;
const IFLA_LINK_NETNSID: u16 = 37;
const IFLA_XDP: u16 = 43;
const IFLA_TARGET_NETNSID: u16 = 46;
const IFLA_XDP_ATTACHED: u16 = 2;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const XDP_ATTACHED_DRV: u8 = 1;
const RTEXT_FILTER_SKIP_STATS: u32 = 1 << 3;
const NLA_TYPE_MASK: u16 = 0x3fff;
pub(crate) const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;

/// One `RTM_GETLINK` for `ifindex`, in this namespace or (`target`) the one our namespace
/// knows by that id.
fn get_link(ifindex: u32, target: Option<i32>) -> io::Result<Link> {
    let mut req = Vec::with_capacity(64);
    req.extend_from_slice(&[0u8; NLMSG_HDRLEN]);
    // struct ifinfomsg: family, pad, type, index, flags, change
    req.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    req.extend_from_slice(&(ifindex as i32).to_ne_bytes());
    req.extend_from_slice(&[0u8; 8]);
    push_attr(&mut req, IFLA_EXT_MASK, &RTEXT_FILTER_SKIP_STATS.to_ne_bytes());
    if let Some(id) = target {
        push_attr(&mut req, IFLA_TARGET_NETNSID, &id.to_ne_bytes());
    }
    parse_link_reply(&crate::route::talk(req, libc::RTM_GETLINK, false)?)
}

/// Append one netlink attribute (type, value, padding to 4 bytes).
pub(crate) fn push_attr(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    out.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(out.len().next_multiple_of(4), 0);
}

/// The attributes in `buf` as `(type, value)` pairs; a truncated one ends the list.
pub(crate) fn attrs(mut buf: &[u8]) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    while buf.len() >= 4 {
        let len = u16::from_ne_bytes([buf[0], buf[1]]) as usize;
        let kind = u16::from_ne_bytes([buf[2], buf[3]]) & NLA_TYPE_MASK;
        if len < 4 || len > buf.len() {
            break;
        }
        out.push((kind, &buf[4..len]));
        buf = &buf[len.next_multiple_of(4).min(buf.len())..];
    }
    out
}

pub(crate) fn u32_of(v: &[u8]) -> Option<u32> {
    Some(u32::from_ne_bytes(v.get(..4)?.try_into().ok()?))
}

fn str_of(v: &[u8]) -> String {
    CStr::from_bytes_until_nul(v)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_else(|_| String::from_utf8_lossy(v).into_owned())
}

/// The link in an `RTM_GETLINK` reply's messages (an error reply is already the error:
/// `route::talk`).
fn parse_link_reply(msgs: &[(u16, Vec<u8>)]) -> io::Result<Link> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed rtnetlink reply");
    let (kind, body) = msgs.first().ok_or_else(bad)?;
    if *kind != libc::RTM_NEWLINK {
        return Err(bad());
    }
    let mut link = Link::default();
    for (t, v) in attrs(body.get(IFINFOMSG_LEN..).ok_or_else(bad)?) {
        match t {
            IFLA_IFNAME => link.name = str_of(v),
            IFLA_ADDRESS => link.address = v.try_into().ok(),
            IFLA_LINK => link.link = u32_of(v),
            IFLA_LINK_NETNSID => link.link_netnsid = u32_of(v).map(|x| x as i32),
            IFLA_LINKINFO => {
                link.kind = attrs(v).into_iter().find(|&(t, _)| t == IFLA_INFO_KIND).map(|(_, k)| str_of(k));
            }
            IFLA_XDP => {
                let x = attrs(v);
                let attached = x.iter().find(|&&(t, _)| t == IFLA_XDP_ATTACHED).and_then(|(_, v)| v.first().copied());
                let id = |want| x.iter().find(|&&(t, _)| t == want).and_then(|&(_, v)| u32_of(v)).unwrap_or(0);
                link.xdp_drv_prog = match id(IFLA_XDP_DRV_PROG_ID) {
                    0 if attached == Some(XDP_ATTACHED_DRV) => id(IFLA_XDP_PROG_ID),
                    d => d,
                };
            }
            _ => {}
        }
    }
    Ok(link)
}

/// A driver's count of frames it failed to send for `XDP_TX` (ethtool statistics, as
/// `ethtool -S` shows them), summed over its queues.
#[derive(Debug)]
pub struct TxErrors {
    ifname: String,
    /// The driver's name (`ethtool -i`).
    pub driver: String,
    /// The statistics counted, by name; empty: the driver shows none xdns knows.
    pub counters: Vec<String>,
    /// Their indexes in the driver's statistics, and how many statistics there were.
    indexes: Vec<usize>,
    n_stats: usize,
}

/// Which ethtool statistics of a driver count `XDP_TX` frames it could not send, by driver
/// (`ethtool -i`'s name). A driver not listed is searched with [`generic_tx_error`].
const DRIVER_TX_ERRORS: &[(&str, fn(&str) -> bool)] = &[
    // per receive queue: rx_queue_<n>_xdp_tx_errors (no peer ring, peer ring full)
    ("veth", |s| s.starts_with("rx_queue_") && s.ends_with("_xdp_tx_errors")),
    // totals over channels (the per-channel rx<n>_ ones would count twice)
    ("mlx5_core", |s| s == "rx_xdp_tx_err" || s == "rx_xdp_tx_full"),
    // per send queue: tx_queue_<n>_xdp_tx_drops (older kernels) or tx<n>_xdp_tx_drops
    ("virtio_net", |s| s.starts_with("tx") && s.ends_with("_xdp_tx_drops")),
];

/// A statistic that looks like an `XDP_TX` failure count in a driver not in
/// [`DRIVER_TX_ERRORS`] (names vary; per-queue and total forms are both seen, so a driver
/// showing both would count twice: list it instead).
fn generic_tx_error(s: &str) -> bool {
    s.contains("xdp_tx") && (s.contains("err") || s.contains("drop") || s.contains("full"))
}

impl TxErrors {
    /// Find `ifname`'s driver and the statistics that count its `XDP_TX` failures.
    pub fn probe(ifname: &str) -> io::Result<Self> {
        let sock = ethtool_socket()?;
        let (driver, n_stats) = drvinfo(&sock, ifname)?;
        let names = stat_names(&sock, ifname, n_stats)?;
        let pick = DRIVER_TX_ERRORS
            .iter()
            .find(|(d, _)| *d == driver)
            .map_or(generic_tx_error as fn(&str) -> bool, |&(_, f)| f);
        let (indexes, counters) = names.iter().enumerate().filter(|(_, n)| pick(n)).map(|(i, n)| (i, n.clone())).unzip();
        Ok(Self { ifname: ifname.to_string(), driver, counters, indexes, n_stats: names.len() })
    }

    /// The driver is one xdns knows the counters of (not found by name pattern).
    pub fn known_driver(&self) -> bool {
        DRIVER_TX_ERRORS.iter().any(|(d, _)| *d == self.driver)
    }

    /// The failures counted now, summed; `None` when the driver shows no such counter. A
    /// driver whose statistics changed (queues added, say) is probed again.
    pub fn read(&mut self) -> io::Result<Option<u64>> {
        if self.indexes.is_empty() {
            return Ok(None);
        }
        let sock = ethtool_socket()?;
        let (_, n) = drvinfo(&sock, &self.ifname)?;
        if n != self.n_stats {
            *self = Self::probe(&self.ifname)?;
        }
        let values = stat_values(&sock, &self.ifname, n)?;
        if values.len() != self.n_stats {
            return Err(io::Error::new(io::ErrorKind::Interrupted, "the driver's statistics changed while read"));
        }
        Ok(Some(self.indexes.iter().filter_map(|&i| values.get(i)).sum()))
    }
}

// ethtool ioctl numbers (include/uapi/linux/ethtool.h): stable kernel ABI.
const SIOCETHTOOL: libc::c_ulong = 0x8946;
const ETHTOOL_GDRVINFO: u32 = 0x3;
const ETHTOOL_GSTRINGS: u32 = 0x1b;
const ETHTOOL_GSTATS: u32 = 0x1d;
const ETH_SS_STATS: u32 = 1;
const ETH_GSTRING_LEN: usize = 32;
/// `struct ethtool_drvinfo`: where `driver` and `n_stats` are, and its size.
const DRVINFO_LEN: usize = 196;
const DRVINFO_DRIVER: usize = 4;
const DRVINFO_N_STATS: usize = 180;
/// More statistics than any driver shows: a larger count is not believed.
const MAX_STATS: usize = 1 << 16;

/// Room for the driver's statistics when it said it has `n`. `ETHTOOL_GSTRINGS` and
/// `ETHTOOL_GSTATS` write as many entries as the driver has *at that moment*, whatever size
/// the caller gave: a driver whose queues were added between our count and our read would
/// write past a buffer of exactly `n` (the `ethtool` tool has the same window). The margin
/// covers any plausible change in that window; a count beyond it is reported, not read.
fn room(n: usize) -> usize {
    (n * 2 + 256).min(MAX_STATS * 2)
}

/// `struct ifreq` with `ifr_data` (the union is 24 bytes on 64-bit, 16 on 32-bit).
#[repr(C)]
struct IfreqData {
    name: [libc::c_char; libc::IFNAMSIZ],
    data: *mut libc::c_void,
    _pad: [u8; 24],
}

fn ethtool_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// One `SIOCETHTOOL` ioctl with `buf` as its command buffer (its first u32 is the command).
fn ethtool(sock: &OwnedFd, ifname: &str, buf: &mut [u8]) -> io::Result<()> {
    if ifname.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interface name too long"));
    }
    let mut req = IfreqData { name: [0; libc::IFNAMSIZ], data: buf.as_mut_ptr().cast(), _pad: [0; 24] };
    for (d, s) in req.name.iter_mut().zip(ifname.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: `req` is a valid ifreq whose data points at `buf`, sized for the command it
    // holds (callers size it from the driver's own count, with the margin of `room`), both
    // live during the call.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), SIOCETHTOOL as _, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The driver's name and how many statistics it shows.
fn drvinfo(sock: &OwnedFd, ifname: &str) -> io::Result<(String, usize)> {
    let mut buf = vec![0u8; DRVINFO_LEN];
    buf[..4].copy_from_slice(&ETHTOOL_GDRVINFO.to_ne_bytes());
    ethtool(sock, ifname, &mut buf)?;
    let driver = str_of(&buf[DRVINFO_DRIVER..DRVINFO_DRIVER + 32]);
    let n = u32_of(&buf[DRVINFO_N_STATS..]).unwrap_or(0) as usize;
    Ok((driver, n.min(MAX_STATS)))
}

/// The names of the driver's `n` statistics.
fn stat_names(sock: &OwnedFd, ifname: &str, n: usize) -> io::Result<Vec<String>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let cap = room(n);
    let mut buf = vec![0u8; 12 + cap * ETH_GSTRING_LEN];
    buf[..4].copy_from_slice(&ETHTOOL_GSTRINGS.to_ne_bytes());
    buf[4..8].copy_from_slice(&ETH_SS_STATS.to_ne_bytes());
    buf[8..12].copy_from_slice(&(n as u32).to_ne_bytes());
    ethtool(sock, ifname, &mut buf)?;
    let got = u32_of(&buf[8..]).unwrap_or(0) as usize;
    if got > cap {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the driver's statistics grew past the buffer"));
    }
    Ok(buf[12..12 + got * ETH_GSTRING_LEN].chunks(ETH_GSTRING_LEN).map(str_of).collect())
}

/// The values of the driver's statistics, as many as it returns (it said it has `n`).
fn stat_values(sock: &OwnedFd, ifname: &str, n: usize) -> io::Result<Vec<u64>> {
    let cap = room(n);
    let mut buf = vec![0u8; 8 + cap * 8];
    buf[..4].copy_from_slice(&ETHTOOL_GSTATS.to_ne_bytes());
    buf[4..8].copy_from_slice(&(n as u32).to_ne_bytes());
    ethtool(sock, ifname, &mut buf)?;
    let got = u32_of(&buf[4..]).unwrap_or(0) as usize;
    if got > cap {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "the driver's statistics grew past the buffer"));
    }
    Ok(buf[8..8 + got * 8].chunks(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8]))).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attrs_stop_at_a_truncated_attribute() {
        let mut b = Vec::new();
        push_attr(&mut b, IFLA_IFNAME, b"s0\0");
        push_attr(&mut b, IFLA_LINK, &7u32.to_ne_bytes());
        let full = attrs(&b);
        assert_eq!(full.len(), 2);
        assert_eq!(str_of(full[0].1), "s0");
        assert_eq!(u32_of(full[1].1), Some(7));
        // a length past the end, and one below the header, end the list without panicking
        let mut cut = b.clone();
        cut[8] = 200;
        assert_eq!(attrs(&cut).len(), 1);
        cut[8] = 2;
        assert_eq!(attrs(&cut).len(), 1);
        assert!(attrs(&b[..3]).is_empty());
    }

    #[test]
    fn a_reply_error_is_the_errno() {
        let mut msg = vec![0u8; 36];
        msg[0..4].copy_from_slice(&36u32.to_ne_bytes());
        msg[4..6].copy_from_slice(&(libc::NLMSG_ERROR as u16).to_ne_bytes());
        msg[16..20].copy_from_slice(&(-libc::ENODEV).to_ne_bytes());
        let e = crate::route::split(&msg, &mut Vec::new()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
        let mut short = Vec::new();
        assert!(!crate::route::split(&msg[..10], &mut short).unwrap(), "a truncated reply holds nothing");
        assert!(parse_link_reply(&short).is_err(), "no link in it");
        assert!(parse_link_reply(&[(libc::RTM_NEWLINK, vec![0; 4])]).is_err(), "a link message cut short");
    }

    #[test]
    fn driver_tables_pick_only_tx_failures() {
        let veth = DRIVER_TX_ERRORS.iter().find(|d| d.0 == "veth").unwrap().1;
        assert!(veth("rx_queue_0_xdp_tx_errors"));
        assert!(!veth("rx_queue_0_xdp_tx"));
        assert!(!veth("tx_queue_0_xdp_xmit_errors"));
        let mlx5 = DRIVER_TX_ERRORS.iter().find(|d| d.0 == "mlx5_core").unwrap().1;
        assert!(mlx5("rx_xdp_tx_err") && !mlx5("rx0_xdp_tx_err"));
        let virtio = DRIVER_TX_ERRORS.iter().find(|d| d.0 == "virtio_net").unwrap().1;
        assert!(virtio("tx_queue_1_xdp_tx_drops") && virtio("tx1_xdp_tx_drops") && !virtio("rx_queue_1_xdp_tx"));
        assert!(generic_tx_error("queue_3_xdp_tx_err") && !generic_tx_error("rx_xdp_tx_xmit"));
    }

    #[test]
    fn peer_reasons_name_the_peer() {
        let p = PeerXdp::NoProgram { peer: "c0".into(), elsewhere: true };
        assert!(p.loses_native_tx());
        assert!(p.why_not_native().unwrap().contains("c0"));
        assert_eq!(PeerXdp::Ready { peer: "c0".into() }.why_not_native(), None);
        assert!(!PeerXdp::NotVeth.loses_native_tx());
    }
}
