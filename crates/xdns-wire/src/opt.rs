//! EDNS options (RFC 6891 §6.1.2) in whole messages: find one in a message's OPT record, and
//! add one to a response's OPT record. Used for options that depend on the transport or the
//! moment rather than on the answer, such as edns-tcp-keepalive (RFC 7828), which only a TCP
//! response may carry. No input makes these panic.

/// edns-tcp-keepalive (RFC 7828).
pub const TCP_KEEPALIVE: u16 = 11;

/// Offset just past the (possibly compressed) name at `at`.
fn skip_name(msg: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *msg.get(at)?;
        match len {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return (at + 2 <= msg.len()).then_some(at + 2),
            l if l & 0xc0 == 0 => at += 1 + l as usize,
            _ => return None,
        }
    }
}

fn u16_at(msg: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.get(at)?, *msg.get(at + 1)?]))
}

/// Where the OPT record's RDATA is: `(offset of RDLENGTH, start, end)` of the first OPT in the
/// additional section, and whether it is the message's last record.
fn find_opt(msg: &[u8]) -> Option<(usize, usize, usize, bool)> {
    let count = |i: usize| u16_at(msg, 4 + 2 * i).map(usize::from);
    let (qd, an, ns, ar) = (count(0)?, count(1)?, count(2)?, count(3)?);
    let mut at = 12;
    for _ in 0..qd {
        at = skip_name(msg, at)? + 4;
    }
    for i in 0..an + ns + ar {
        let fixed = skip_name(msg, at)?;
        let rtype = u16_at(msg, fixed)?;
        let rdlen = usize::from(u16_at(msg, fixed + 8)?);
        let start = fixed + 10;
        let end = start + rdlen;
        if end > msg.len() {
            return None;
        }
        if i >= an + ns && rtype == 41 {
            return Some((fixed + 8, start, end, i + 1 == an + ns + ar && end == msg.len()));
        }
        at = end;
    }
    None
}

/// The data of option `code` in the message's OPT record, if present and well formed.
pub fn option(msg: &[u8], code: u16) -> Option<&[u8]> {
    let (_, mut at, end, _) = find_opt(msg)?;
    while at + 4 <= end {
        let c = u16_at(msg, at)?;
        let len = usize::from(u16_at(msg, at + 2)?);
        let data = msg.get(at + 4..at + 4 + len).filter(|_| at + 4 + len <= end)?;
        if c == code {
            return Some(data);
        }
        at += 4 + len;
    }
    None
}

/// Add option `code` with `data` to the OPT record of `msg`, which must be the message's last
/// record (so that no compression pointer points past it) and stay within 65,535 bytes.
/// Returns whether it was added.
pub fn push_option(msg: &mut Vec<u8>, code: u16, data: &[u8]) -> bool {
    let Some((rdlen_at, start, end, last)) = find_opt(msg) else {
        return false;
    };
    let rdlen = end - start + 4 + data.len();
    if !last || rdlen > usize::from(u16::MAX) || msg.len() + 4 + data.len() > usize::from(u16::MAX) {
        return false;
    }
    msg[rdlen_at..rdlen_at + 2].copy_from_slice(&(rdlen as u16).to_be_bytes());
    msg.extend_from_slice(&code.to_be_bytes());
    msg.extend_from_slice(&(data.len() as u16).to_be_bytes());
    msg.extend_from_slice(data);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response to `a.` A with one answer (compressed owner) and an OPT with `opts` RDATA.
    fn response(opts: &[u8]) -> Vec<u8> {
        let mut m = vec![0, 1, 0x84, 0, 0, 1, 0, 1, 0, 0, 0, 1];
        m.extend_from_slice(&[1, b'a', 0, 0, 1, 0, 1]);
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 18, 0, 1]);
        m.extend_from_slice(&[0, 0, 41, 4, 0xd0, 0, 0, 0, 0]);
        m.extend_from_slice(&(opts.len() as u16).to_be_bytes());
        m.extend_from_slice(opts);
        m
    }

    #[test]
    fn finds_and_adds_options() {
        let mut m = response(&[0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(option(&m, 10), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]));
        assert_eq!(option(&m, TCP_KEEPALIVE), None);
        assert!(push_option(&mut m, TCP_KEEPALIVE, &100u16.to_be_bytes()));
        assert_eq!(option(&m, TCP_KEEPALIVE), Some(&[0, 100][..]));
        assert_eq!(option(&m, 10), Some(&[1, 2, 3, 4, 5, 6, 7, 8][..]), "the first option stays");
        // RDLENGTH covers both
        assert_eq!(u16::from_be_bytes([m[m.len() - 20], m[m.len() - 19]]), 18);
        // an empty option, as a query sends edns-tcp-keepalive
        let q = response(&[0, 11, 0, 0]);
        assert_eq!(option(&q, TCP_KEEPALIVE), Some(&[][..]));
    }

    #[test]
    fn refuses_what_it_cannot_do_safely() {
        // no OPT
        let mut m = response(&[]);
        m[11] = 0;
        m.truncate(m.len() - 11);
        assert!(!push_option(&mut m, TCP_KEEPALIVE, &[0, 1]));
        // OPT not last (a record after it)
        let mut m = response(&[]);
        m[11] = 2;
        m.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 198, 18, 0, 2]);
        assert!(!push_option(&mut m, TCP_KEEPALIVE, &[0, 1]));
        // truncated or lying counts: nothing found, no panic
        let m = response(&[0, 10, 0, 8, 1, 2]);
        assert_eq!(option(&m, 10), None);
        for cut in 0..m.len() {
            let mut t = m[..cut].to_vec();
            let _ = option(&t, 10);
            let _ = push_option(&mut t, 11, &[0, 1]);
        }
        let mut big = response(&[]);
        big[7] = 0xff;
        assert!(!push_option(&mut big, 11, &[0, 1]));
    }
}
