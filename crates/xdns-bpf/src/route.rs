//! Routes and neighbours, asked of the kernel over rtnetlink (the project's small helper, as
//! in [`crate::iface`]): where the host would send a packet to an address (`RTM_GETROUTE`:
//! the out interface and the gateway, or none when on-link) and the MACs it knows for its
//! neighbours (`RTM_GETNEIGH`, one dump). Kernel iteration's next-hop table is filled from
//! these (crates/xdns/src/kit_hops.rs; bpf/README.md, "Kernel iteration").

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::iface::{attrs, push_attr, u32_of, NLMSG_HDRLEN};

/// Where the host sends a packet to an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Route {
    /// The out interface.
    pub oif: u32,
    /// The gateway; `None`: the address is on-link (its own MAC is the next hop's).
    pub gateway: Option<IpAddr>,
}

/// A neighbour entry the kernel has resolved: REACHABLE, STALE, DELAY or PERMANENT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Neigh {
    pub ifindex: u32,
    pub addr: IpAddr,
    pub mac: [u8; 6],
}

// rtnetlink numbers (include/uapi/linux/rtnetlink.h, neighbour.h): stable kernel ABI.
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;
const RTN_UNICAST: u8 = 1;
const RTMSG_LEN: usize = 12;
const NDMSG_LEN: usize = 12;
const NDA_DST: u16 = 1;
const NDA_LLADDR: u16 = 2;
const NUD_REACHABLE: u16 = 0x02;
const NUD_STALE: u16 = 0x04;
const NUD_DELAY: u16 = 0x08;
const NUD_PERMANENT: u16 = 0x80;
/// The states whose MAC is usable now (a STALE or DELAY entry is being confirmed, and still
/// the kernel's own choice for sending).
const NUD_USABLE: u16 = NUD_REACHABLE | NUD_STALE | NUD_DELAY | NUD_PERMANENT;

/// The route the host would take to `addr` (one `RTM_GETROUTE`); `None` when there is none
/// it could send on: unreachable, a local address, a blackhole or prohibit route, or a
/// next hop of another family (`RTA_VIA`).
pub fn route_to(addr: IpAddr) -> io::Result<Option<Route>> {
    let (family, bits, dst): (u8, u8, Vec<u8>) = match addr {
        IpAddr::V4(a) => (libc::AF_INET as u8, 32, a.octets().to_vec()),
        IpAddr::V6(a) => (libc::AF_INET6 as u8, 128, a.octets().to_vec()),
    };
    let mut req = vec![0u8; NLMSG_HDRLEN];
    // struct rtmsg: family, dst_len, src_len, tos, table, protocol, scope, type, flags
    req.extend_from_slice(&[family, bits, 0, 0, 0, 0, 0, 0]);
    req.extend_from_slice(&[0u8; 4]);
    push_attr(&mut req, RTA_DST, &dst);
    let msgs = match talk(req, libc::RTM_GETROUTE, false) {
        Ok(m) => m,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENETUNREACH | libc::EHOSTUNREACH | libc::EACCES | libc::EINVAL)) => return Ok(None),
        Err(e) => return Err(e),
    };
    Ok(msgs.iter().find(|(t, _)| *t == libc::RTM_NEWROUTE).and_then(|(_, b)| parse_route(family, b)))
}

/// The route in one `RTM_NEWROUTE` body (rtmsg and attributes).
fn parse_route(family: u8, b: &[u8]) -> Option<Route> {
    if b.len() < RTMSG_LEN || b[7] != RTN_UNICAST {
        return None;
    }
    let mut r = Route { oif: 0, gateway: None };
    for (t, v) in attrs(&b[RTMSG_LEN..]) {
        match t {
            RTA_OIF => r.oif = u32_of(v)?,
            RTA_GATEWAY => r.gateway = Some(addr_of(family, v)?),
            // RTA_VIA (an IPv4 route through an IPv6 next hop) and anything else: not followed
            18 => return None,
            _ => {}
        }
    }
    (r.oif != 0).then_some(r)
}

/// Every neighbour entry of both families whose MAC is usable (one `RTM_GETNEIGH` dump).
pub fn neighbours() -> io::Result<Vec<Neigh>> {
    let mut req = vec![0u8; NLMSG_HDRLEN];
    // struct ndmsg: family, pad, pad, ifindex, state, flags, type
    req.extend_from_slice(&[libc::AF_UNSPEC as u8, 0, 0, 0]);
    req.extend_from_slice(&[0u8; 8]);
    let msgs = talk(req, libc::RTM_GETNEIGH, true)?;
    Ok(msgs.iter().filter(|(t, _)| *t == libc::RTM_NEWNEIGH).filter_map(|(_, b)| parse_neigh(b)).collect())
}

/// The neighbour in one `RTM_NEWNEIGH` body, if its state makes its MAC usable.
fn parse_neigh(b: &[u8]) -> Option<Neigh> {
    if b.len() < NDMSG_LEN {
        return None;
    }
    let family = b[0];
    let ifindex = u32_of(&b[4..8])?;
    let state = u16::from_ne_bytes([b[8], b[9]]);
    if state & NUD_USABLE == 0 {
        return None;
    }
    let (mut addr, mut mac) = (None, None);
    for (t, v) in attrs(&b[NDMSG_LEN..]) {
        match t {
            NDA_DST => addr = addr_of(family, v),
            NDA_LLADDR => mac = <[u8; 6]>::try_from(v).ok(),
            _ => {}
        }
    }
    let mac = mac.filter(|m| m != &[0; 6])?;
    Some(Neigh { ifindex, addr: addr?, mac })
}

fn addr_of(family: u8, v: &[u8]) -> Option<IpAddr> {
    match family as i32 {
        libc::AF_INET => Some(IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(v).ok()?))),
        libc::AF_INET6 => Some(IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(v).ok()?))),
        _ => None,
    }
}

/// Send one request (`req`: room for the header, then the body) and read the replies: the
/// messages (type, body) of one datagram, or of every datagram up to `NLMSG_DONE` for a dump.
/// An `NLMSG_ERROR` with an errno is that error.
pub(crate) fn talk(mut req: Vec<u8>, kind: u16, dump: bool) -> io::Result<Vec<(u16, Vec<u8>)>> {
    let len = req.len() as u32;
    req[0..4].copy_from_slice(&len.to_ne_bytes());
    req[4..6].copy_from_slice(&kind.to_ne_bytes());
    let flags = libc::NLM_F_REQUEST as u16 | if dump { libc::NLM_F_DUMP as u16 } else { 0 };
    req[6..8].copy_from_slice(&flags.to_ne_bytes());
    req[8..12].copy_from_slice(&1u32.to_ne_bytes());
    // SAFETY: plain socket(2) call; the result is checked before use.
    let fd = unsafe { libc::socket(libc::AF_NETLINK, libc::SOCK_RAW | libc::SOCK_CLOEXEC, libc::NETLINK_ROUTE) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a new socket owned by nobody else.
    let sock = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: an all-zero sockaddr_nl addressed to the kernel (pid 0) is valid.
    let mut to: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
    to.nl_family = libc::AF_NETLINK as u16;
    // SAFETY: `req` and `to` are valid for the lengths given during the call.
    let sent = unsafe {
        libc::sendto(
            sock.as_raw_fd(),
            req.as_ptr().cast(),
            req.len(),
            0,
            (&to as *const libc::sockaddr_nl).cast(),
            std::mem::size_of::<libc::sockaddr_nl>() as u32,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        // SAFETY: `buf` is valid for writes of its length during the call.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let done = split(&buf[..n as usize], &mut out)?;
        if done || !dump {
            return Ok(out);
        }
    }
}

/// The messages of one datagram into `out`; true at `NLMSG_DONE`.
pub(crate) fn split(mut b: &[u8], out: &mut Vec<(u16, Vec<u8>)>) -> io::Result<bool> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed rtnetlink reply");
    while b.len() >= NLMSG_HDRLEN {
        let len = u32_of(b).ok_or_else(bad)? as usize;
        if len < NLMSG_HDRLEN || len > b.len() {
            return Err(bad());
        }
        let kind = u16::from_ne_bytes([b[4], b[5]]);
        let body = &b[NLMSG_HDRLEN..len];
        if kind == libc::NLMSG_DONE as u16 {
            return Ok(true);
        }
        if kind == libc::NLMSG_ERROR as u16 {
            let errno = i32::from_ne_bytes(body.get(..4).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
            if errno != 0 {
                return Err(io::Error::from_raw_os_error(-errno));
            }
        } else {
            out.push((kind, body.to_vec()));
        }
        b = &b[len.next_multiple_of(4).min(b.len())..];
    }
    Ok(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(kind: u16, body: &[u8]) -> Vec<u8> {
        let mut m = ((NLMSG_HDRLEN + body.len()) as u32).to_ne_bytes().to_vec();
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&[0; 10]);
        m.extend_from_slice(body);
        m.resize(m.len().next_multiple_of(4), 0);
        m
    }

    #[test]
    fn a_route_names_its_interface_and_gateway() {
        let mut b = vec![libc::AF_INET as u8, 32, 0, 0, 254, 0, 0, RTN_UNICAST, 0, 0, 0, 0];
        push_attr(&mut b, RTA_DST, &[198, 18, 9, 1]);
        push_attr(&mut b, RTA_OIF, &7u32.to_ne_bytes());
        assert_eq!(parse_route(libc::AF_INET as u8, &b), Some(Route { oif: 7, gateway: None }), "on-link");
        push_attr(&mut b, RTA_GATEWAY, &[198, 18, 0, 254]);
        assert_eq!(parse_route(libc::AF_INET as u8, &b), Some(Route { oif: 7, gateway: Some("198.18.0.254".parse().unwrap()) }));
        let mut local = b.clone();
        local[7] = 2; // RTN_LOCAL
        assert_eq!(parse_route(libc::AF_INET as u8, &local), None, "a local address is no next hop");
        let mut via = b.clone();
        push_attr(&mut via, 18, &[0; 18]);
        assert_eq!(parse_route(libc::AF_INET as u8, &via), None, "RTA_VIA is not followed");
        assert_eq!(parse_route(libc::AF_INET as u8, &b[..5]), None, "truncated");
    }

    #[test]
    fn only_usable_neighbours_are_kept() {
        let entry = |state: u16, mac: &[u8]| {
            let mut b = vec![libc::AF_INET6 as u8, 0, 0, 0];
            b.extend_from_slice(&3u32.to_ne_bytes());
            b.extend_from_slice(&state.to_ne_bytes());
            b.extend_from_slice(&[0, 0]);
            push_attr(&mut b, NDA_DST, &"2001:db8::1".parse::<Ipv6Addr>().unwrap().octets());
            push_attr(&mut b, NDA_LLADDR, mac);
            b
        };
        let mac = [2, 0, 0, 0, 0, 1];
        for s in [NUD_REACHABLE, NUD_STALE, NUD_DELAY, NUD_PERMANENT] {
            assert_eq!(parse_neigh(&entry(s, &mac)), Some(Neigh { ifindex: 3, addr: "2001:db8::1".parse().unwrap(), mac }), "state {s:#x}");
        }
        for s in [0x01u16 /* INCOMPLETE */, 0x10 /* PROBE */, 0x20 /* FAILED */, 0x40 /* NOARP */] {
            assert_eq!(parse_neigh(&entry(s, &mac)), None, "state {s:#x}");
        }
        assert_eq!(parse_neigh(&entry(NUD_REACHABLE, &[0; 6])), None, "no MAC");
        assert_eq!(parse_neigh(&entry(NUD_REACHABLE, &[1, 2, 3])), None, "not Ethernet");
    }

    #[test]
    fn replies_split_until_done_and_errors_are_errno() {
        let mut d = msg(libc::RTM_NEWNEIGH, &[1, 2, 3, 4]);
        d.extend(msg(libc::RTM_NEWNEIGH, &[5; 8]));
        let mut out = Vec::new();
        assert!(!split(&d, &mut out).unwrap(), "no NLMSG_DONE yet");
        assert_eq!(out, vec![(libc::RTM_NEWNEIGH, vec![1, 2, 3, 4]), (libc::RTM_NEWNEIGH, vec![5; 8])]);
        assert!(split(&msg(libc::NLMSG_DONE as u16, &[0; 4]), &mut out).unwrap());
        let e = split(&msg(libc::NLMSG_ERROR as u16, &(-libc::ENETUNREACH).to_ne_bytes()), &mut out).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENETUNREACH));
        assert!(split(&msg(libc::NLMSG_ERROR as u16, &0i32.to_ne_bytes()), &mut out).is_ok(), "an ACK");
        let mut cut = d.clone();
        cut[0] = 200;
        assert!(split(&cut, &mut out).is_err(), "a length past the datagram");
    }
}
