//! The `[guard]` list files: `blocklist` and `allowlist` (addresses and prefixes) and
//! `block_names` (query names, exact or `*.suffix`).
//!
//! Why a module of its own: `xdns check` must report every bad line as `FILE:LINE: reason`
//! before anything reaches the kernel, and the kernel loader needs the result in the shape
//! its maps take — `(address bytes, prefix length)` for the LPM tries and lowercase wire-format
//! names with an exact/suffix flag for the name filter — without reparsing.
//!
//! Format of an address list, one entry a line:
//! - `192.0.2.1`, `2001:db8::1` — a bare address is a host prefix (`/32`, `/128`);
//! - `198.18.0.0/15`, `2001:db8::/48` — a prefix;
//! - `#` starts a comment (whole line or after the entry); blank lines are ignored.
//!
//! Choices, and why:
//! - **Host bits set** (`10.1.2.3/16`) is an **error**, as `ip route` and nftables' interval
//!   sets refuse it, rather than normalised silently as `ipset` does: a block list that widens a
//!   typo into 65,536 blocked addresses is worse than a list that fails `xdns check`.
//! - **Overlapping prefixes** (`10.0.0.0/8` and `10.1.0.0/16`) are all kept: the kernel's
//!   longest-prefix-match trie keeps them too, and [`PrefixList::longest_match`] answers what
//!   the kernel will answer. Keeping them lets an allowlist carve a host out of a blocked range.
//! - **Duplicates** (the same prefix twice) are warnings, not errors: the entry is kept once.
//! - Errors are collected (up to [`MAX_ERRORS`]) rather than stopping at the first, so one
//!   `xdns check` run shows them all.
//!
//! Name lists: `example.com` blocks that name only; `*.example.com` blocks every name *below*
//! `example.com` (not `example.com` itself, as a DNS wildcard). Names are lowercased and
//! converted to uncompressed wire format. Labels are 1–63 bytes of letters, digits, `-` or `_`;
//! the whole name at most 255 bytes; `*` only as the whole leftmost label.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// How many errors a parse collects before it stops recording more (it still counts them).
pub const MAX_ERRORS: usize = 100;

/// One problem on one line of a list file; `Display` is `FILE:LINE: reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    /// The file name as the configuration spells it.
    pub file: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, in words.
    pub reason: String,
}

impl fmt::Display for LineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.file, self.line, self.reason)
    }
}

/// Every error of a failed parse (at most [`MAX_ERRORS`] kept) and how many there were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListErrors {
    /// The recorded errors, in line order.
    pub errors: Vec<LineError>,
    /// The total number of bad lines, including those not recorded.
    pub total: usize,
}

impl fmt::Display for ListErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.errors {
            writeln!(f, "{e}")?;
        }
        if self.total > self.errors.len() {
            writeln!(f, "... and {} more errors", self.total - self.errors.len())?;
        }
        Ok(())
    }
}

impl std::error::Error for ListErrors {}

struct Collector<'a> {
    file: &'a str,
    errors: Vec<LineError>,
    total: usize,
    warnings: Vec<LineError>,
}

impl<'a> Collector<'a> {
    fn new(file: &'a str) -> Self {
        Collector {
            file,
            errors: Vec::new(),
            total: 0,
            warnings: Vec::new(),
        }
    }
    fn error(&mut self, line: usize, reason: String) {
        self.total += 1;
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(LineError {
                file: self.file.to_string(),
                line,
                reason,
            });
        }
    }
    fn warn(&mut self, line: usize, reason: String) {
        if self.warnings.len() < MAX_ERRORS {
            self.warnings.push(LineError {
                file: self.file.to_string(),
                line,
                reason,
            });
        }
    }
}

/// The entry of a line with its comment and surrounding blanks removed, or `None` for a blank
/// or comment-only line.
fn entry_of(line: &str) -> Option<&str> {
    let body = match line.find('#') {
        Some(i) => &line[..i],
        None => line,
    };
    let body = body.trim();
    (!body.is_empty()).then_some(body)
}

/// An IPv4 prefix as the kernel's LPM trie takes it: network-order bytes and a length ≤ 32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct V4Prefix {
    /// The network address, host bits zero.
    pub addr: [u8; 4],
    /// Prefix length, 0..=32.
    pub len: u8,
}

/// An IPv6 prefix as the kernel's LPM trie takes it: network-order bytes and a length ≤ 128.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct V6Prefix {
    /// The network address, host bits zero.
    pub addr: [u8; 16],
    /// Prefix length, 0..=128.
    pub len: u8,
}

/// Either family's prefix, as [`PrefixList::longest_match`] returns it and [`parse_prefix`]
/// parses it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Prefix {
    /// An IPv4 prefix.
    V4(V4Prefix),
    /// An IPv6 prefix.
    V6(V6Prefix),
}

impl Prefix {
    /// The host prefix (`/32` or `/128`) of one address.
    pub fn host(ip: IpAddr) -> Prefix {
        match ip {
            IpAddr::V4(a) => Prefix::V4(V4Prefix {
                addr: a.octets(),
                len: 32,
            }),
            IpAddr::V6(a) => Prefix::V6(V6Prefix {
                addr: a.octets(),
                len: 128,
            }),
        }
    }

    /// The prefix of length `len` that contains `ip` (host bits cleared); `len` is clamped to
    /// the family's width.
    pub fn covering(ip: IpAddr, len: u8) -> Prefix {
        match ip {
            IpAddr::V4(a) => {
                let len = len.min(32);
                let bits = u32::from(a) & mask32(len);
                Prefix::V4(V4Prefix {
                    addr: bits.to_be_bytes(),
                    len,
                })
            }
            IpAddr::V6(a) => {
                let len = len.min(128);
                let bits = u128::from(a) & mask128(len);
                Prefix::V6(V6Prefix {
                    addr: bits.to_be_bytes(),
                    len,
                })
            }
        }
    }

    /// Whether `ip` lies inside this prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self, ip) {
            (Prefix::V4(p), IpAddr::V4(a)) => {
                u32::from(a) & mask32(p.len) == u32::from_be_bytes(p.addr)
            }
            (Prefix::V6(p), IpAddr::V6(a)) => {
                u128::from(a) & mask128(p.len) == u128::from_be_bytes(p.addr)
            }
            _ => false,
        }
    }

    /// Prefix length in bits.
    pub fn len(&self) -> u8 {
        match self {
            Prefix::V4(p) => p.len,
            Prefix::V6(p) => p.len,
        }
    }

    /// Whether the prefix is `/0` (matches a whole family).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Prefix::V4(p) => write!(f, "{}/{}", Ipv4Addr::from(p.addr), p.len),
            Prefix::V6(p) => write!(f, "{}/{}", Ipv6Addr::from(p.addr), p.len),
        }
    }
}

fn mask32(len: u8) -> u32 {
    if len == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(len.min(32)))
    }
}

fn mask128(len: u8) -> u128 {
    if len == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(len.min(128)))
    }
}

/// Parses one entry (`ADDR` or `ADDR/LEN`), the same syntax as a list line without comments;
/// also what `xdns guard block ADDR[/LEN]` takes. Host bits set are an error.
pub fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => {
            if l.is_empty() || l.len() > 3 || !l.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("bad prefix length {l:?}"));
            }
            // At most three digits, so this fits.
            (a, Some(l.parse::<u16>().unwrap_or(u16::MAX)))
        }
        None => (s, None),
    };
    if addr.contains(':') {
        let a: Ipv6Addr = addr
            .parse()
            .map_err(|_| format!("bad IPv6 address {addr:?}"))?;
        let len = len.unwrap_or(128);
        if len > 128 {
            return Err(format!("prefix length {len} > 128"));
        }
        let len = len as u8;
        let bits = u128::from(a);
        if bits & !mask128(len) != 0 {
            return Err(format!(
                "host bits set in {addr}/{len} (the network is {})",
                Ipv6Addr::from(bits & mask128(len))
            ));
        }
        Ok(Prefix::V6(V6Prefix {
            addr: a.octets(),
            len,
        }))
    } else {
        let a: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("bad IPv4 address {addr:?}"))?;
        let len = len.unwrap_or(32);
        if len > 32 {
            return Err(format!("prefix length {len} > 32"));
        }
        let len = len as u8;
        let bits = u32::from(a);
        if bits & !mask32(len) != 0 {
            return Err(format!(
                "host bits set in {addr}/{len} (the network is {})",
                Ipv4Addr::from(bits & mask32(len))
            ));
        }
        Ok(Prefix::V4(V4Prefix {
            addr: a.octets(),
            len,
        }))
    }
}

/// A parsed address list: the entries for the kernel, a longest-prefix-match index for
/// userspace (the allowlist check in detection, `xdns guard list`), and the warnings.
#[derive(Debug, Clone, Default)]
pub struct PrefixList {
    /// IPv4 entries, in file order, each once.
    pub v4: Vec<V4Prefix>,
    /// IPv6 entries, in file order, each once.
    pub v6: Vec<V6Prefix>,
    /// Non-fatal findings (duplicates), as `FILE:LINE: reason`.
    pub warnings: Vec<LineError>,
    // One hash set per prefix length present; lengths longest first.
    // network → line of the file it came from (0 when added by `insert`).
    v4_by_len: HashMap<u8, HashMap<u32, u32, FastHash>>,
    v6_by_len: HashMap<u8, HashMap<u128, u32, FastHash>>,
    v4_lens: Vec<u8>,
    v6_lens: Vec<u8>,
}

impl PrefixList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one prefix; returns `false` (and adds nothing) when it is already present.
    pub fn insert(&mut self, p: Prefix) -> bool {
        self.insert_from_line(p, 0).is_none()
    }

    /// Adds one prefix read from `line`; when already present, returns the line it came from.
    fn insert_from_line(&mut self, p: Prefix, line: u32) -> Option<u32> {
        use std::collections::hash_map::Entry;
        match p {
            Prefix::V4(p) => {
                match self
                    .v4_by_len
                    .entry(p.len)
                    .or_default()
                    .entry(u32::from_be_bytes(p.addr))
                {
                    Entry::Occupied(first) => return Some(*first.get()),
                    Entry::Vacant(v) => v.insert(line),
                };
                if !self.v4_lens.contains(&p.len) {
                    self.v4_lens.push(p.len);
                    self.v4_lens.sort_unstable_by(|a, b| b.cmp(a));
                }
                self.v4.push(p);
            }
            Prefix::V6(p) => {
                match self
                    .v6_by_len
                    .entry(p.len)
                    .or_default()
                    .entry(u128::from_be_bytes(p.addr))
                {
                    Entry::Occupied(first) => return Some(*first.get()),
                    Entry::Vacant(v) => v.insert(line),
                };
                if !self.v6_lens.contains(&p.len) {
                    self.v6_lens.push(p.len);
                    self.v6_lens.sort_unstable_by(|a, b| b.cmp(a));
                }
                self.v6.push(p);
            }
        }
        None
    }

    /// Number of entries (both families).
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    /// Whether the list has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The most specific entry containing `ip`, as the kernel's LPM trie would find it.
    /// Cost: one hash probe per distinct prefix length in the list.
    pub fn longest_match(&self, ip: IpAddr) -> Option<Prefix> {
        match ip {
            IpAddr::V4(a) => {
                let bits = u32::from(a);
                for &len in &self.v4_lens {
                    let net = bits & mask32(len);
                    if self
                        .v4_by_len
                        .get(&len)
                        .is_some_and(|s| s.contains_key(&net))
                    {
                        return Some(Prefix::V4(V4Prefix {
                            addr: net.to_be_bytes(),
                            len,
                        }));
                    }
                }
                None
            }
            IpAddr::V6(a) => {
                let bits = u128::from(a);
                for &len in &self.v6_lens {
                    let net = bits & mask128(len);
                    if self
                        .v6_by_len
                        .get(&len)
                        .is_some_and(|s| s.contains_key(&net))
                    {
                        return Some(Prefix::V6(V6Prefix {
                            addr: net.to_be_bytes(),
                            len,
                        }));
                    }
                }
                None
            }
        }
    }

    /// Whether any entry contains `ip`.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.longest_match(ip).is_some()
    }
}

/// A multiply-and-fold hasher for the index sets. The keys come from the operator's own
/// files, not from the network, so resistance to chosen collisions (what std's SipHash buys)
/// is not needed here, and hashing was most of the time of a 1M-line parse.
#[derive(Debug, Clone, Copy, Default)]
struct FastHash;

impl std::hash::BuildHasher for FastHash {
    type Hasher = FoldHasher;
    fn build_hasher(&self) -> FoldHasher {
        FoldHasher(0)
    }
}

/// The hasher of [`FastHash`].
#[derive(Debug, Clone, Copy, Default)]
struct FoldHasher(u64);

impl std::hash::Hasher for FoldHasher {
    fn finish(&self) -> u64 {
        // Final avalanche (the murmur3 finaliser) so the low bits hashbrown uses are mixed.
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h
    }
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(b));
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

/// Parses a `blocklist` or `allowlist` file. `file` is used only in messages.
pub fn parse_prefix_list(file: &str, text: &str) -> Result<PrefixList, ListErrors> {
    let mut c = Collector::new(file);
    // Parse everything first, then size the index once: growing hash tables entry by entry
    // was most of the cost of a 1M-line list.
    let mut parsed: Vec<(Prefix, u32)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let Some(entry) = entry_of(line) else {
            continue;
        };
        if entry.contains(char::is_whitespace) {
            c.error(n, format!("one entry per line, found {entry:?}"));
            continue;
        }
        match parse_prefix(entry) {
            Ok(p) => parsed.push((p, u32::try_from(n).unwrap_or(u32::MAX))),
            Err(reason) => c.error(n, reason),
        }
    }
    if c.total > 0 {
        return Err(ListErrors {
            errors: c.errors,
            total: c.total,
        });
    }
    let mut list = PrefixList::new();
    let (mut n4, mut n6) = ([0usize; 33], [0usize; 129]);
    for (p, _) in &parsed {
        match p {
            Prefix::V4(v) => n4[usize::from(v.len)] += 1,
            Prefix::V6(v) => n6[usize::from(v.len)] += 1,
        }
    }
    for (len, &n) in n4.iter().enumerate().filter(|(_, &n)| n > 0) {
        list.v4_by_len.entry(len as u8).or_default().reserve(n);
    }
    for (len, &n) in n6.iter().enumerate().filter(|(_, &n)| n > 0) {
        list.v6_by_len.entry(len as u8).or_default().reserve(n);
    }
    list.v4.reserve(n4.iter().sum());
    list.v6.reserve(n6.iter().sum());
    for (p, line) in parsed {
        if let Some(first) = list.insert_from_line(p, line) {
            c.warn(line as usize, format!("duplicate of line {first}: {p}"));
        }
    }
    list.warnings = c.warnings;
    Ok(list)
}

/// Whether a name entry blocks the name itself or everything below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameMatch {
    /// `example.com`: that name only.
    Exact,
    /// `*.example.com`: every name strictly below `example.com`.
    Suffix,
}

/// One `block_names` entry for the kernel: the lowercase, uncompressed wire name (for a
/// suffix, the part after `*.`) and how it matches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NameEntry {
    /// Lowercase wire format, ending with the root label (0).
    pub wire: Vec<u8>,
    /// Exact name or suffix.
    pub kind: NameMatch,
}

/// A parsed `block_names` file.
#[derive(Debug, Clone, Default)]
pub struct NameList {
    /// The entries in file order, each once.
    pub entries: Vec<NameEntry>,
    /// Non-fatal findings (duplicates).
    pub warnings: Vec<LineError>,
}

impl NameList {
    /// Whether `wire` (lowercase wire format) is blocked by an entry: an exact entry equal to
    /// it, or a suffix entry that is a proper suffix of it on a label boundary.
    pub fn matches(&self, wire: &[u8]) -> Option<&NameEntry> {
        let suffixes = label_suffixes(wire);
        self.entries.iter().find(|e| match e.kind {
            NameMatch::Exact => e.wire == wire,
            NameMatch::Suffix => suffixes
                .iter()
                .skip(1)
                .any(|&off| wire[off..] == e.wire[..]),
        })
    }
}

/// Offsets at which each suffix of a well-formed wire name starts (the name itself first);
/// stops at a malformed length byte.
fn label_suffixes(wire: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < wire.len() {
        out.push(i);
        let l = wire[i] as usize;
        if l == 0 {
            break;
        }
        i += 1 + l;
    }
    out
}

/// Converts a presentation name (`www.Example.com`, trailing dot optional, no wildcard) to
/// lowercase wire format, checking labels and length.
pub fn name_to_wire(name: &str) -> Result<Vec<u8>, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("empty name (the root cannot be listed)".to_string());
    }
    let mut wire = Vec::with_capacity(name.len() + 2);
    for label in name.split('.') {
        if label.is_empty() {
            return Err(format!("empty label in {name:?}"));
        }
        if label == "*" {
            return Err(format!(
                "'*' is allowed only as the leftmost label, in {name:?}"
            ));
        }
        if label.len() > 63 {
            return Err(format!(
                "label {label:?} is {} bytes long (at most 63)",
                label.len()
            ));
        }
        if let Some(b) = label
            .bytes()
            .find(|&b| !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_'))
        {
            return Err(format!("bad character {:?} in label {label:?}", b as char));
        }
        wire.push(label.len() as u8);
        wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    wire.push(0);
    if wire.len() > 255 {
        return Err(format!(
            "name is {} bytes in wire format (at most 255)",
            wire.len()
        ));
    }
    Ok(wire)
}

/// Parses one `block_names` entry (`name` or `*.suffix`).
pub fn parse_name_entry(s: &str) -> Result<NameEntry, String> {
    if let Some(rest) = s.strip_prefix("*.") {
        let wire = name_to_wire(rest)?;
        Ok(NameEntry {
            wire,
            kind: NameMatch::Suffix,
        })
    } else if s == "*" || s == "*." {
        Err("'*' alone would block every name; list the suffix as '*.zone'".to_string())
    } else {
        Ok(NameEntry {
            wire: name_to_wire(s)?,
            kind: NameMatch::Exact,
        })
    }
}

/// Parses a `block_names` file. `file` is used only in messages.
pub fn parse_name_list(file: &str, text: &str) -> Result<NameList, ListErrors> {
    let mut c = Collector::new(file);
    let mut list = NameList::default();
    let mut seen: HashMap<NameEntry, usize> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let n = i + 1;
        let Some(entry) = entry_of(line) else {
            continue;
        };
        if entry.contains(char::is_whitespace) {
            c.error(n, format!("one name per line, found {entry:?}"));
            continue;
        }
        match parse_name_entry(entry) {
            Ok(e) => {
                if let Some(first) = seen.get(&e) {
                    c.warn(n, format!("duplicate of line {first}: {entry}"));
                } else {
                    seen.insert(e.clone(), n);
                    list.entries.push(e);
                }
            }
            Err(reason) => c.error(n, reason),
        }
    }
    if c.total > 0 {
        return Err(ListErrors {
            errors: c.errors,
            total: c.total,
        });
    }
    list.warnings = c.warnings;
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn prefix_entries_table() {
        // (entry, expected result: Ok(Display) or Err(substring of reason))
        let rows: &[(&str, Result<&str, &str>)] = &[
            ("192.0.2.1", Ok("192.0.2.1/32")),
            ("198.18.0.0/15", Ok("198.18.0.0/15")),
            ("0.0.0.0/0", Ok("0.0.0.0/0")),
            ("2001:db8::/48", Ok("2001:db8::/48")),
            ("2001:db8::1", Ok("2001:db8::1/128")),
            ("::/0", Ok("::/0")),
            ("192.0.2.0/33", Err("prefix length 33 > 32")),
            ("2001:db8::/129", Err("prefix length 129 > 128")),
            (
                "10.1.2.3/16",
                Err("host bits set in 10.1.2.3/16 (the network is 10.1.0.0)"),
            ),
            ("2001:db8::1/64", Err("host bits set")),
            ("192.0.2/24", Err("bad IPv4 address")),
            ("2001:db8:::/48", Err("bad IPv6 address")),
            ("10.0.0.0/", Err("bad prefix length")),
            ("10.0.0.0/x", Err("bad prefix length")),
            ("10.0.0.0/99999", Err("bad prefix length")),
            ("10.0.0.0/-1", Err("bad prefix length")),
            ("", Err("bad IPv4 address")),
        ];
        for (input, want) in rows {
            let got = parse_prefix(input).map(|p| p.to_string());
            match want {
                Ok(s) => assert_eq!(got.as_deref(), Ok(*s), "{input}"),
                Err(sub) => {
                    let e = got.expect_err(input);
                    assert!(e.contains(sub), "{input}: {e:?} lacks {sub:?}");
                }
            }
        }
    }

    #[test]
    fn list_file_with_comments_blanks_errors_and_duplicates() {
        let text = "# blocked sources\n\n192.0.2.1\n198.18.0.0/15   # benchmark range\n\
                    192.0.2.0/33\n2001:db8::/48\n10.0.0.1 10.0.0.2\n192.0.2.1\n";
        let err = parse_prefix_list("blocked.txt", text).unwrap_err();
        let lines: Vec<String> = err.errors.iter().map(|e| e.to_string()).collect();
        assert_eq!(
            lines,
            vec![
                "blocked.txt:5: prefix length 33 > 32".to_string(),
                "blocked.txt:7: one entry per line, found \"10.0.0.1 10.0.0.2\"".to_string(),
            ]
        );
        assert_eq!(err.total, 2);

        let good = "192.0.2.1\n198.18.0.0/15 # x\n\n2001:db8::/48\n192.0.2.1/32\n";
        let list = parse_prefix_list("blocked.txt", good).unwrap();
        assert_eq!(list.v4.len(), 2);
        assert_eq!(list.v6.len(), 1);
        assert_eq!(
            list.v4[1],
            V4Prefix {
                addr: [198, 18, 0, 0],
                len: 15
            }
        );
        assert_eq!(list.warnings.len(), 1);
        assert_eq!(
            list.warnings[0].to_string(),
            "blocked.txt:5: duplicate of line 1: 192.0.2.1/32"
        );
    }

    #[test]
    fn overlapping_prefixes_are_kept_and_longest_match_wins() {
        let list = parse_prefix_list(
            "b",
            "10.0.0.0/8\n10.1.0.0/16\n10.1.2.3\n2001:db8::/32\n2001:db8:1::/48\n",
        )
        .unwrap();
        assert_eq!(list.len(), 5);
        assert!(list.warnings.is_empty());
        let rows = [
            ("10.1.2.3", Some("10.1.2.3/32")),
            ("10.1.2.4", Some("10.1.0.0/16")),
            ("10.2.0.1", Some("10.0.0.0/8")),
            ("11.0.0.1", None),
            ("2001:db8:1::5", Some("2001:db8:1::/48")),
            ("2001:db8:2::5", Some("2001:db8::/32")),
            ("2001:db9::1", None),
        ];
        for (a, want) in rows {
            assert_eq!(
                list.longest_match(ip(a)).map(|p| p.to_string()).as_deref(),
                want,
                "{a}"
            );
        }
    }

    #[test]
    fn covering_and_contains() {
        let p = Prefix::covering(ip("192.0.2.77"), 24);
        assert_eq!(p.to_string(), "192.0.2.0/24");
        assert!(p.contains(ip("192.0.2.1")));
        assert!(!p.contains(ip("192.0.3.1")));
        assert!(!p.contains(ip("2001:db8::1")));
        let q = Prefix::covering(ip("2001:db8:aa:bbcc::1"), 56);
        assert_eq!(q.to_string(), "2001:db8:aa:bb00::/56");
        assert_eq!(Prefix::covering(ip("1.2.3.4"), 0).to_string(), "0.0.0.0/0");
        assert_eq!(
            Prefix::covering(ip("1.2.3.4"), 99).to_string(),
            "1.2.3.4/32"
        );
    }

    /// A name entry and what it must parse to: (wire, kind) or a substring of the error.
    type NameRow<'a> = (&'a str, Result<(&'a [u8], NameMatch), &'a str>);

    #[test]
    fn name_entries_table() {
        let rows: &[NameRow] = &[
            (
                "Example.COM",
                Ok((b"\x07example\x03com\x00", NameMatch::Exact)),
            ),
            (
                "example.com.",
                Ok((b"\x07example\x03com\x00", NameMatch::Exact)),
            ),
            (
                "*.Evil.example",
                Ok((b"\x04evil\x07example\x00", NameMatch::Suffix)),
            ),
            (
                "_dmarc.example",
                Ok((b"\x06_dmarc\x07example\x00", NameMatch::Exact)),
            ),
            ("a..b", Err("empty label")),
            (
                "www.*.example",
                Err("'*' is allowed only as the leftmost label"),
            ),
            ("*", Err("'*' alone")),
            ("**.example", Err("bad character '*'")),
            ("ex ample", Err("bad character ' '")),
            ("caf\u{e9}.example", Err("bad character")),
            (".", Err("empty name")),
        ];
        for (input, want) in rows {
            let got = parse_name_entry(input);
            match want {
                Ok((wire, kind)) => {
                    let e = got.unwrap_or_else(|e| panic!("{input}: {e}"));
                    assert_eq!(&e.wire[..], *wire, "{input}");
                    assert_eq!(e.kind, *kind, "{input}");
                }
                Err(sub) => {
                    let e = got.expect_err(input);
                    assert!(e.contains(sub), "{input}: {e:?} lacks {sub:?}");
                }
            }
        }
        let long_label = "a".repeat(64);
        assert!(parse_name_entry(&long_label)
            .unwrap_err()
            .contains("at most 63"));
        let long_name = vec!["a".repeat(63); 4].join(".");
        assert!(parse_name_entry(&long_name)
            .unwrap_err()
            .contains("at most 255"));
        let max_name = format!("{}.{}", vec!["a".repeat(63); 3].join("."), "b".repeat(61));
        assert_eq!(parse_name_entry(&max_name).unwrap().wire.len(), 255);
    }

    #[test]
    fn name_file_and_matching() {
        let bad = "# names\nok.example\nwww.*.example\n\n*.\n";
        let err = parse_name_list("names.txt", bad).unwrap_err();
        assert_eq!(err.errors.len(), 2);
        assert_eq!(err.errors[0].line, 3);
        assert!(err.errors[0]
            .to_string()
            .starts_with("names.txt:3: '*' is allowed only"));
        assert_eq!(err.errors[1].line, 5);

        let list = parse_name_list(
            "names.txt",
            "exact.example\n*.evil.example\nEXACT.example.\n",
        )
        .unwrap();
        assert_eq!(list.entries.len(), 2);
        assert_eq!(list.warnings.len(), 1);
        assert_eq!(
            list.warnings[0].to_string(),
            "names.txt:3: duplicate of line 1: EXACT.example."
        );
        let w = |s: &str| name_to_wire(s).unwrap();
        assert!(list.matches(&w("exact.example")).is_some());
        assert!(list.matches(&w("www.exact.example")).is_none());
        assert!(
            list.matches(&w("evil.example")).is_none(),
            "a suffix entry does not match itself"
        );
        assert!(list.matches(&w("x.evil.example")).is_some());
        assert!(list.matches(&w("a.b.evil.example")).is_some());
        assert!(list.matches(&w("notevil.example")).is_none());
    }

    #[test]
    fn errors_are_capped_but_counted() {
        let text = "999.0.0.1\n".repeat(MAX_ERRORS + 5);
        let err = parse_prefix_list("f", &text).unwrap_err();
        assert_eq!(err.errors.len(), MAX_ERRORS);
        assert_eq!(err.total, MAX_ERRORS + 5);
        assert!(err.to_string().ends_with("... and 5 more errors\n"));
    }

    #[test]
    fn garbage_never_panics() {
        let inputs = [
            "/",
            "//",
            "1.2.3.4/32/1",
            ":::",
            "[::1]",
            "\u{0}",
            "1.2.3.4/٣",
            "*.",
            "*.*",
            "..",
        ];
        for s in inputs {
            let _ = parse_prefix(s);
            let _ = parse_name_entry(s);
            let _ = parse_prefix_list("f", s);
            let _ = parse_name_list("f", s);
        }
        // Every byte value on a line of its own.
        let bytes: Vec<u8> = (0u8..=255).flat_map(|b| [b, b'\n']).collect();
        let text = String::from_utf8_lossy(&bytes);
        assert!(parse_prefix_list("f", &text).is_err());
        assert!(parse_name_list("f", &text).is_err());
    }

    #[test]
    fn million_line_list() {
        // A generated list mixing /32, /24, /128, /64 and /48, with comments and blanks.
        let mut text = String::with_capacity(32 << 20);
        use std::fmt::Write;
        for i in 0u32..1_000_000 {
            match i % 5 {
                0 => writeln!(text, "{}", Ipv4Addr::from(0x0a00_0000 + i)).unwrap(),
                1 => writeln!(text, "{}/24", Ipv4Addr::from(0x6400_0000 + (i << 8))).unwrap(),
                2 => writeln!(
                    text,
                    "{}",
                    Ipv6Addr::from(0x2001_0db8_u128 << 96 | u128::from(i))
                )
                .unwrap(),
                3 => writeln!(
                    text,
                    "{}/64",
                    Ipv6Addr::from((0x2001_0db9_u128 << 96) | (u128::from(i) << 64))
                )
                .unwrap(),
                _ => writeln!(
                    text,
                    "{}/48 # range {i}",
                    Ipv6Addr::from((0x2001_u128 << 112) | (u128::from(i) << 80))
                )
                .unwrap(),
            }
        }
        // And one duplicate, of the first line, at the very end.
        text.push_str("10.0.0.0\n");
        let t = std::time::Instant::now();
        let list = parse_prefix_list("big.txt", &text).unwrap();
        let took = t.elapsed();
        println!(
            "parsed 1,000,001 lines ({} MB) in {took:?}",
            text.len() >> 20
        );
        assert_eq!(list.v4.len(), 400_000);
        assert_eq!(list.v6.len(), 600_000);
        let warnings: Vec<String> = list.warnings.iter().map(|w| w.to_string()).collect();
        assert_eq!(
            warnings,
            vec!["big.txt:1000001: duplicate of line 1: 10.0.0.0/32".to_string()]
        );
        assert!(list.contains(ip("10.0.0.5")));
        assert!(
            !list.contains(ip("10.0.0.6")),
            "i = 6 is a /24 row, not a host in 10/8"
        );
        assert_eq!(
            list.longest_match(ip("2001:db9:0:3::1")).map(|p| p.len()),
            Some(64)
        );
    }
}
