//! DNS Cookies (RFC 7873) with the interoperable server cookie of RFC 9018.
//!
//! Why: a client that echoes a server cookie we built has proved it receives our answers at
//! its source address, so it is not a spoofed reflection victim; such clients bypass RRL.
//! RFC 9018's construction is used (rather than one of our own) so that xdns can sit in an
//! anycast set with Knot, BIND, PowerDNS or Unbound sharing one secret, and so that the XDP
//! program can verify a cookie with nothing but SipHash-2-4 and the secret.
//!
//! Server cookie, version 1 (16 bytes):
//! `version (1) | reserved (3, zero when we build) | timestamp (4, seconds, big endian) | hash (8)`,
//! `hash = SipHash-2-4(secret, client cookie | version | reserved | timestamp | client IP)`,
//! the client IP being 4 or 16 bytes.
//!
//! Timestamps (RFC 9018 §4.3), compared in serial number arithmetic (RFC 1982) so the 2106
//! wrap is harmless: a cookie is valid if it is not more than [`MAX_AGE`] (1 hour) in the past
//! nor more than [`MAX_FUTURE`] (5 minutes) in the future; a valid cookie older than
//! [`REFRESH_AGE`] (30 minutes) is answered with a fresh one.
//!
//! Secret rotation: [`CookieSecrets`] holds the current secret and optionally the previous
//! one; both verify, only the current one builds. A cookie that verified with the previous
//! secret asks for a fresh cookie, so clients move over within one exchange. The daemon
//! rotates every `[guard] cookie_secret_lifetime` (26 h by default) and keeps the previous
//! secret until the next rotation, which is at least [`MAX_AGE`] with any lifetime of an hour
//! or more.
//!
//! The COOKIE option (code 10) in OPT RDATA: a client cookie of 8 bytes, optionally followed by
//! a server cookie of 8 to 32 bytes. Any other length is malformed and the server answers
//! FORMERR (RFC 7873 §5.2.2): [`parse_opt_cookie`] returns [`CookieError`] for it.

use std::fmt;
use std::hash::Hasher;
use std::net::IpAddr;

use siphasher::sip::SipHasher24;

/// EDNS option code of COOKIE (RFC 7873).
pub const OPTION_CODE: u16 = 10;
/// A cookie older than this (seconds) is invalid (RFC 9018 §4.3).
pub const MAX_AGE: u32 = 3600;
/// A cookie further in the future than this (seconds) is invalid (RFC 9018 §4.3).
pub const MAX_FUTURE: u32 = 300;
/// A valid cookie older than this (seconds) is answered with a new one (RFC 9018 §4.3).
pub const REFRESH_AGE: u32 = 1800;
/// The server cookie version this module builds and verifies.
pub const VERSION: u8 = 1;

/// A 16-byte server secret.
pub type Secret = [u8; 16];

/// The COOKIE option as a client sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CookieOption {
    /// The client cookie.
    pub client: [u8; 8],
    server: [u8; 32],
    server_len: u8,
}

impl CookieOption {
    /// A client-only cookie option.
    pub fn client_only(client: [u8; 8]) -> Self {
        CookieOption {
            client,
            server: [0; 32],
            server_len: 0,
        }
    }

    /// The server cookie the client echoed (8 to 32 bytes), if any.
    pub fn server(&self) -> Option<&[u8]> {
        (self.server_len > 0).then(|| &self.server[..usize::from(self.server_len)])
    }
}

/// Why a COOKIE option, or the OPT RDATA around it, is malformed. Each is answered with
/// FORMERR (RFC 7873 §5.2.2 for the lengths, RFC 6891 for a truncated option list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CookieError {
    /// The COOKIE option's length is not 8 and not 16..=40.
    BadLength(usize),
    /// An option header or body runs past the end of the OPT RDATA.
    TruncatedOpt,
}

impl fmt::Display for CookieError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CookieError::BadLength(n) => write!(f, "COOKIE option of {n} bytes (8, or 16 to 40)"),
            CookieError::TruncatedOpt => write!(f, "OPT RDATA ends inside an option"),
        }
    }
}

impl std::error::Error for CookieError {}

impl CookieError {
    /// The response code to answer with: FORMERR (1).
    pub fn rcode(&self) -> u8 {
        1
    }
}

/// Parses the data of one COOKIE option (without its code and length).
pub fn parse_cookie(data: &[u8]) -> Result<CookieOption, CookieError> {
    let n = data.len();
    if n != 8 && !(16..=40).contains(&n) {
        return Err(CookieError::BadLength(n));
    }
    let mut c = CookieOption::client_only([0; 8]);
    c.client.copy_from_slice(&data[..8]);
    c.server[..n - 8].copy_from_slice(&data[8..]);
    c.server_len = (n - 8) as u8;
    Ok(c)
}

/// Finds and parses the first COOKIE option in OPT RDATA (a sequence of
/// `code (2) | length (2) | data`). `Ok(None)` when there is none.
pub fn parse_opt_cookie(rdata: &[u8]) -> Result<Option<CookieOption>, CookieError> {
    let mut rest = rdata;
    while !rest.is_empty() {
        if rest.len() < 4 {
            return Err(CookieError::TruncatedOpt);
        }
        let code = u16::from_be_bytes([rest[0], rest[1]]);
        let len = usize::from(u16::from_be_bytes([rest[2], rest[3]]));
        let Some(data) = rest.get(4..4 + len) else {
            return Err(CookieError::TruncatedOpt);
        };
        if code == OPTION_CODE {
            return parse_cookie(data).map(Some);
        }
        rest = &rest[4 + len..];
    }
    Ok(None)
}

/// Builds the 16-byte version 1 server cookie for `client` at `ip` and time `now` (seconds
/// since the Unix epoch, truncated to 32 bits).
pub fn server_cookie(secret: &Secret, client: &[u8; 8], ip: IpAddr, now: u32) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[0] = VERSION;
    out[4..8].copy_from_slice(&now.to_be_bytes());
    let hash = mac(secret, client, &out[..8], ip);
    out[8..].copy_from_slice(&hash);
    out
}

fn mac(secret: &Secret, client: &[u8; 8], head: &[u8], ip: IpAddr) -> [u8; 8] {
    let mut h = SipHasher24::new_with_key(secret);
    h.write(client);
    h.write(head);
    match ip {
        IpAddr::V4(a) => h.write(&a.octets()),
        IpAddr::V6(a) => h.write(&a.octets()),
    }
    h.finish().to_le_bytes()
}

/// Why a server cookie did not verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// Not 16 bytes or not version 1: not one of ours (maybe another server's format).
    Unknown,
    /// The hash matches neither secret.
    BadHash,
    /// Older than [`MAX_AGE`].
    Expired,
    /// More than [`MAX_FUTURE`] ahead.
    Future,
}

/// The outcome of [`CookieSecrets::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// The client proved its address. `refresh`: answer with a new cookie (older than
    /// [`REFRESH_AGE`], or made with the previous secret); otherwise echo it.
    Valid {
        /// Whether the response should carry a newly built cookie.
        refresh: bool,
    },
    /// Not valid; the client is treated as one that sent only a client cookie (it gets a new
    /// server cookie, and RRL applies). BADCOOKIE policy is the caller's.
    Invalid(Invalid),
}

/// The current and previous server secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct CookieSecrets {
    current: Secret,
    previous: Option<Secret>,
}

impl fmt::Debug for CookieSecrets {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Secrets never reach logs.
        f.debug_struct("CookieSecrets")
            .field("previous", &self.previous.is_some())
            .finish_non_exhaustive()
    }
}

impl CookieSecrets {
    /// Starts with one secret (the daemon draws it at random or reads the shared one).
    pub fn new(current: Secret) -> Self {
        CookieSecrets {
            current,
            previous: None,
        }
    }

    /// Makes `next` current; the old current secret keeps verifying as the previous one.
    pub fn rotate(&mut self, next: Secret) {
        self.previous = Some(std::mem::replace(&mut self.current, next));
    }

    /// Forgets the previous secret (at least [`MAX_AGE`] after [`Self::rotate`]).
    pub fn drop_previous(&mut self) {
        self.previous = None;
    }

    /// The secret new cookies are built with (what the daemon writes to the kernel map).
    pub fn current(&self) -> &Secret {
        &self.current
    }

    /// The previous secret, if it still verifies.
    pub fn previous(&self) -> Option<&Secret> {
        self.previous.as_ref()
    }

    /// Builds a server cookie with the current secret.
    pub fn build(&self, client: &[u8; 8], ip: IpAddr, now: u32) -> [u8; 16] {
        server_cookie(&self.current, client, ip, now)
    }

    /// What a server does with a query's COOKIE option (RFC 7873 §5.2, RFC 9018 §4.3): whether
    /// the client proved its address (it then bypasses RRL), and the 16-byte server cookie to
    /// put in the response — the client's own if valid and fresh, else a new one.
    pub fn answer(&self, opt: &CookieOption, ip: IpAddr, now: u32) -> (bool, [u8; 16]) {
        let fresh = || self.build(&opt.client, ip, now);
        match opt.server() {
            None => (false, fresh()),
            Some(server) => match self.verify(&opt.client, server, ip, now) {
                Check::Valid { refresh: false } => {
                    let mut echo = [0u8; 16];
                    echo.copy_from_slice(server); // verify accepted exactly 16 bytes
                    (true, echo)
                }
                Check::Valid { refresh: true } => (true, fresh()),
                Check::Invalid(_) => (false, fresh()),
            },
        }
    }

    /// Verifies the server cookie a client echoed, at time `now` (Unix seconds, 32 bits).
    pub fn verify(&self, client: &[u8; 8], server: &[u8], ip: IpAddr, now: u32) -> Check {
        if server.len() != 16 || server[0] != VERSION {
            return Check::Invalid(Invalid::Unknown);
        }
        let stamp = u32::from_be_bytes([server[4], server[5], server[6], server[7]]);
        // Serial arithmetic: positive age = in the past.
        let age = now.wrapping_sub(stamp) as i32;
        if age > MAX_AGE as i32 {
            return Check::Invalid(Invalid::Expired);
        }
        if age < -(MAX_FUTURE as i32) {
            return Check::Invalid(Invalid::Future);
        }
        let hash = &server[8..16];
        let old_secret = if mac(&self.current, client, &server[..8], ip) == hash {
            false
        } else if self
            .previous
            .is_some_and(|p| mac(&p, client, &server[..8], ip) == hash)
        {
            true
        } else {
            return Check::Invalid(Invalid::BadHash);
        };
        Check::Valid {
            refresh: old_secret || age > REFRESH_AGE as i32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn arr<const N: usize>(s: &str) -> [u8; N] {
        hex(s).try_into().unwrap()
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const SECRET_A: &str = "e5e973e5a6b2a43f48e7dc849e37bfcf";
    const SECRET_OLD: &str = "dd3bdf9344b678b185a6f5cb60fca715";
    const SECRET_NEW: &str = "445536bcd2513298075a5d379663c962";

    // RFC 9018 Appendix A: (case, secret, client IP, client cookie, time, server cookie built).
    const BUILT: &[(&str, &str, &str, &str, u32, &str)] = &[
        (
            "A.1",
            SECRET_A,
            "198.51.100.100",
            "2464c4abcf10c957",
            1559731985,
            "010000005cf79f111f8130c3eee29480",
        ),
        (
            "A.2",
            SECRET_A,
            "198.51.100.100",
            "2464c4abcf10c957",
            1559734385,
            "010000005cf7a871d4a564a1442aca77",
        ),
        (
            "A.3",
            SECRET_A,
            "203.0.113.203",
            "fc93fc62807ddb86",
            1559734700,
            "010000005cf7a9acf73a7810aca2381e",
        ),
        (
            "A.4",
            SECRET_NEW,
            "2001:db8:220:1:59de:d0f4:8769:82b8",
            "22681ab97d52c298",
            1559741961,
            "010000005cf7c609a6bb79d16625507a",
        ),
    ];

    #[test]
    fn rfc9018_appendix_a_cookies_are_built_exactly() {
        for (case, secret, addr, client, now, want) in BUILT {
            let got = server_cookie(&arr(secret), &arr(client), ip(addr), *now);
            assert_eq!(got.to_vec(), hex(want), "{case}");
            // And each verifies with its own secret at its own time, without refresh.
            let s = CookieSecrets::new(arr(secret));
            assert_eq!(
                s.verify(&arr(client), &got, ip(addr), *now),
                Check::Valid { refresh: false },
                "{case}"
            );
        }
    }

    #[test]
    fn rfc9018_a2_renewal_after_forty_minutes() {
        // The cookie of A.1 comes back 40 minutes later: valid, older than 30 min → refresh,
        // and the refreshed cookie is A.2's.
        let s = CookieSecrets::new(arr(SECRET_A));
        let client = arr("2464c4abcf10c957");
        let got = s.verify(
            &client,
            &hex("010000005cf79f111f8130c3eee29480"),
            ip("198.51.100.100"),
            1559734385,
        );
        assert_eq!(got, Check::Valid { refresh: true });
        assert_eq!(
            s.build(&client, ip("198.51.100.100"), 1559734385).to_vec(),
            hex("010000005cf7a871d4a564a1442aca77")
        );
    }

    #[test]
    fn rfc9018_a3_nonzero_reserved_is_hashed_as_received() {
        // A.3's request carries another implementation's cookie with reserved = abcdef,
        // made at 1559727985; at that time it verifies (the reserved bytes are part of the
        // hash), and at the A.3 reply time, 1 h 52 min later, it has expired.
        let s = CookieSecrets::new(arr(SECRET_A));
        let client = arr("fc93fc62807ddb86");
        let theirs = hex("01abcdef5cf78f71a314227b6679ebf5");
        assert_eq!(
            s.verify(&client, &theirs, ip("203.0.113.203"), 1559727985),
            Check::Valid { refresh: false }
        );
        assert_eq!(
            s.verify(&client, &theirs, ip("203.0.113.203"), 1559734700),
            Check::Invalid(Invalid::Expired)
        );
        let mut tampered = theirs.clone();
        tampered[1] = 0;
        assert_eq!(
            s.verify(&client, &tampered, ip("203.0.113.203"), 1559727985),
            Check::Invalid(Invalid::BadHash)
        );
    }

    #[test]
    fn rfc9018_a4_previous_secret_verifies_and_asks_for_refresh() {
        let mut s = CookieSecrets::new(arr(SECRET_OLD));
        s.rotate(arr(SECRET_NEW));
        let client = arr("22681ab97d52c298");
        let v6 = ip("2001:db8:220:1:59de:d0f4:8769:82b8");
        let old = hex("010000005cf7c57926556bd0934c72f8");
        assert_eq!(
            s.verify(&client, &old, v6, 1559741961),
            Check::Valid { refresh: true }
        );
        assert_eq!(
            s.build(&client, v6, 1559741961).to_vec(),
            hex("010000005cf7c609a6bb79d16625507a")
        );
        // Once the previous secret is dropped, the old cookie no longer verifies.
        s.drop_previous();
        assert_eq!(
            s.verify(&client, &old, v6, 1559741961),
            Check::Invalid(Invalid::BadHash)
        );
        // A cookie for another address does not verify.
        let new = s.build(&client, v6, 1559741961);
        assert_eq!(
            s.verify(&client, &new, ip("2001:db8::1"), 1559741961),
            Check::Invalid(Invalid::BadHash)
        );
    }

    #[test]
    fn answer_follows_the_rfc9018_exchange() {
        let s = CookieSecrets::new(arr(SECRET_A));
        let a = ip("198.51.100.100");
        // A.1: client cookie only → not proven, the A.1 cookie.
        let q1 = parse_cookie(&hex("2464c4abcf10c957")).unwrap();
        let (ok, c1) = s.answer(&q1, a, 1559731985);
        assert!(!ok);
        assert_eq!(c1.to_vec(), hex("010000005cf79f111f8130c3eee29480"));
        // Echoed a minute later → proven, echoed unchanged.
        let q = parse_cookie(&hex("2464c4abcf10c957010000005cf79f111f8130c3eee29480")).unwrap();
        assert_eq!(s.answer(&q, a, 1559732045), (true, c1));
        // A.2: forty minutes later → proven, renewed to the A.2 cookie.
        let (ok, c2) = s.answer(&q, a, 1559734385);
        assert!(ok);
        assert_eq!(c2.to_vec(), hex("010000005cf7a871d4a564a1442aca77"));
        // From another address → not proven, a cookie for that address.
        let other = ip("192.0.2.1");
        let (ok, c3) = s.answer(&q, other, 1559732045);
        assert!(!ok);
        assert_eq!(
            s.verify(&q.client, &c3, other, 1559732045),
            Check::Valid { refresh: false }
        );
    }

    #[test]
    fn timestamp_window() {
        let s = CookieSecrets::new([7; 16]);
        let c = [1; 8];
        let a = ip("192.0.2.1");
        let t = 1_000_000u32;
        let ck = s.build(&c, a, t);
        let rows = [
            (t, Check::Valid { refresh: false }),
            (t + REFRESH_AGE, Check::Valid { refresh: false }),
            (t + REFRESH_AGE + 1, Check::Valid { refresh: true }),
            (t + MAX_AGE, Check::Valid { refresh: true }),
            (t + MAX_AGE + 1, Check::Invalid(Invalid::Expired)),
            (t - MAX_FUTURE, Check::Valid { refresh: false }),
            (t - MAX_FUTURE - 1, Check::Invalid(Invalid::Future)),
        ];
        for (now, want) in rows {
            assert_eq!(
                s.verify(&c, &ck, a, now),
                want,
                "now = t{:+}",
                i64::from(now) - i64::from(t)
            );
        }
        // Serial arithmetic across the 32-bit wrap.
        let near_wrap = u32::MAX - 10;
        let ck = s.build(&c, a, near_wrap);
        assert_eq!(s.verify(&c, &ck, a, 100), Check::Valid { refresh: false });
        // Not ours: wrong length or version.
        assert_eq!(
            s.verify(&c, &ck[..8], a, near_wrap),
            Check::Invalid(Invalid::Unknown)
        );
        let mut v2 = ck;
        v2[0] = 2;
        assert_eq!(
            s.verify(&c, &v2, a, near_wrap),
            Check::Invalid(Invalid::Unknown)
        );
    }

    #[test]
    fn cookie_option_lengths() {
        for n in 0..=44usize {
            let data = vec![0xab; n];
            let got = parse_cookie(&data);
            if n == 8 || (16..=40).contains(&n) {
                let c = got.unwrap();
                assert_eq!(c.client, [0xab; 8]);
                assert_eq!(c.server().map(<[u8]>::len), (n > 8).then_some(n - 8), "{n}");
            } else {
                assert_eq!(got, Err(CookieError::BadLength(n)), "{n}");
                assert_eq!(got.unwrap_err().rcode(), 1);
            }
        }
    }

    #[test]
    fn cookie_in_opt_rdata() {
        // NSID (3, empty), then COOKIE with the A.1 reply.
        let mut rdata = vec![0, 3, 0, 0, 0, 10, 0, 24];
        rdata.extend(hex("2464c4abcf10c957010000005cf79f111f8130c3eee29480"));
        let c = parse_opt_cookie(&rdata).unwrap().unwrap();
        assert_eq!(c.client, arr::<8>("2464c4abcf10c957"));
        assert_eq!(
            c.server(),
            Some(&hex("010000005cf79f111f8130c3eee29480")[..])
        );

        assert_eq!(parse_opt_cookie(&[]), Ok(None));
        assert_eq!(parse_opt_cookie(&[0, 3, 0, 0]), Ok(None));
        assert_eq!(
            parse_opt_cookie(&[0, 10, 0, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            Err(CookieError::BadLength(9))
        );
        assert_eq!(
            parse_opt_cookie(&[0, 10, 0, 8, 1, 2]),
            Err(CookieError::TruncatedOpt)
        );
        assert_eq!(
            parse_opt_cookie(&[0, 10, 0]),
            Err(CookieError::TruncatedOpt)
        );
        assert_eq!(
            parse_opt_cookie(&[0, 10, 0xff, 0xff]),
            Err(CookieError::TruncatedOpt)
        );
    }

    #[test]
    fn any_rdata_never_panics() {
        // Every short byte string over a small alphabet.
        let alphabet = [0u8, 8, 10, 16, 40, 0xff];
        let mut buf = Vec::new();
        for len in 0..6 {
            let mut idx = vec![0usize; len];
            loop {
                buf.clear();
                buf.extend(idx.iter().map(|&i| alphabet[i]));
                let _ = parse_opt_cookie(&buf);
                let mut k = 0;
                while k < len {
                    idx[k] += 1;
                    if idx[k] < alphabet.len() {
                        break;
                    }
                    idx[k] = 0;
                    k += 1;
                }
                if k == len {
                    break;
                }
            }
        }
        assert_eq!(
            parse_opt_cookie(&[0, 10, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0]).map(|c| c.is_some()),
            Ok(true)
        );
    }
}
