//! Helpers on domain names in wire form.
//!
//! Two forms are used throughout xdns:
//! - an *uncompressed wire name*: length-prefixed labels ending in the root label
//!   (`\x03www\x07example\x03com\x00`), at most 255 bytes, labels at most 63 bytes;
//! - a *key*: the same bytes with ASCII letters lowercased (RFC 4343: DNS names compare
//!   case-insensitively for ASCII only). Zone trees and BPF maps are keyed by this form.
//!
//! Nothing here panics on any input: every function that reads untrusted bytes checks lengths
//! first and reports a [`NameError`].

use std::fmt;

/// Longest wire name, root label included (RFC 1035 §2.3.4).
pub const MAX_NAME_LEN: usize = 255;
/// Longest label (RFC 1035 §2.3.4).
pub const MAX_LABEL_LEN: usize = 63;
/// The root name in wire form.
pub const ROOT: &[u8] = &[0];

/// Why bytes are not a valid wire name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NameError {
    /// The bytes end before the root label.
    Truncated,
    /// A label length byte has the top bits `01` or `10` (RFC 6891 extended / reserved label
    /// types), or `11` where no compression is allowed.
    BadLabelType,
    /// More than 255 bytes.
    TooLong,
    /// A compression pointer that does not point strictly backwards.
    BadPointer,
}

impl fmt::Display for NameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameError::Truncated => "name truncated",
            NameError::BadLabelType => "bad label type",
            NameError::TooLong => "name longer than 255 bytes",
            NameError::BadPointer => "bad compression pointer",
        })
    }
}

impl std::error::Error for NameError {}

/// Validates the uncompressed wire name at the start of `buf` and returns its length
/// (root label included). Bytes after the name are ignored.
pub fn name_len(buf: &[u8]) -> Result<usize, NameError> {
    let mut pos = 0usize;
    loop {
        let len = *buf.get(pos).ok_or(NameError::Truncated)? as usize;
        if len & 0xC0 != 0 {
            return Err(NameError::BadLabelType);
        }
        pos += 1 + len;
        if pos > MAX_NAME_LEN {
            return Err(NameError::TooLong);
        }
        if len == 0 {
            return Ok(pos);
        }
        if pos > buf.len() {
            return Err(NameError::Truncated);
        }
    }
}

/// True if `name` is exactly one valid uncompressed wire name.
pub fn is_valid(name: &[u8]) -> bool {
    name_len(name) == Ok(name.len())
}

/// Reads a possibly compressed name at `pos` of the message `msg` (RFC 1035 §4.1.4).
///
/// The decompressed name is appended to `out` with its letter case kept. Returns the position
/// just after the name *as stored at `pos`* (after the first pointer, if any). Pointers must
/// point strictly before the label that holds them, which rules out loops.
pub fn read_name(msg: &[u8], pos: usize, out: &mut Vec<u8>) -> Result<usize, NameError> {
    let start_len = out.len();
    let mut cur = pos;
    let mut end: Option<usize> = None;
    loop {
        let len = *msg.get(cur).ok_or(NameError::Truncated)? as usize;
        match len & 0xC0 {
            0x00 => {
                let next = cur + 1 + len;
                if next > msg.len() {
                    return Err(NameError::Truncated);
                }
                if out.len() - start_len + 1 + len > MAX_NAME_LEN {
                    return Err(NameError::TooLong);
                }
                out.extend_from_slice(&msg[cur..next]);
                if len == 0 {
                    return Ok(end.unwrap_or(next));
                }
                cur = next;
            }
            0xC0 => {
                let lo = *msg.get(cur + 1).ok_or(NameError::Truncated)? as usize;
                let target = ((len & 0x3F) << 8) | lo;
                if target >= cur {
                    return Err(NameError::BadPointer);
                }
                if end.is_none() {
                    end = Some(cur + 2);
                }
                cur = target;
            }
            _ => return Err(NameError::BadLabelType),
        }
    }
}

/// Iterator over the labels of a wire name (without length bytes, root label excluded).
///
/// Stops early (without panicking) if the bytes are not a valid name.
#[derive(Clone, Debug)]
pub struct Labels<'a> {
    name: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for Labels<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let len = *self.name.get(self.pos)? as usize;
        if len == 0 || len > MAX_LABEL_LEN {
            return None;
        }
        let label = self.name.get(self.pos + 1..self.pos + 1 + len)?;
        self.pos += 1 + len;
        Some(label)
    }
}

/// The labels of `name`, leftmost first.
pub fn labels(name: &[u8]) -> Labels<'_> {
    Labels { name, pos: 0 }
}

/// Number of labels, root excluded (`www.example.com.` has 3).
pub fn label_count(name: &[u8]) -> usize {
    labels(name).count()
}

/// Offsets at which each suffix of `name` starts, longest first, the root (`name.len() - 1`)
/// last. For `\x03www\x07example\x03com\x00` these are 0, 4, 12, 16.
pub fn suffix_offsets(name: &[u8]) -> impl Iterator<Item = usize> + '_ {
    let mut pos = Some(0usize);
    std::iter::from_fn(move || {
        let p = pos?;
        let len = *name.get(p)? as usize;
        pos = if len == 0 || len > MAX_LABEL_LEN { None } else { Some(p + 1 + len) };
        Some(p)
    })
}

/// The parent of `name` (one label removed), or `None` for the root or invalid bytes.
pub fn parent(name: &[u8]) -> Option<&[u8]> {
    let len = *name.first()? as usize;
    if len == 0 || len > MAX_LABEL_LEN {
        return None;
    }
    name.get(1 + len..).filter(|rest| !rest.is_empty())
}

/// True if `name` equals `ancestor` or lies below it (byte comparison on keys: pass
/// lowercased names, or use [`eq_ignore_case`] first).
pub fn is_subdomain(name: &[u8], ancestor: &[u8]) -> bool {
    suffix_offsets(name).any(|p| &name[p..] == ancestor)
}

/// Appends the lowercased form (the key) of `name` to `out`.
pub fn lowercase_into(name: &[u8], out: &mut Vec<u8>) {
    out.extend(name.iter().map(u8::to_ascii_lowercase));
}

/// The key (lowercased copy) of `name`.
///
/// Length bytes are below 64 in a valid name, so lowercasing the whole slice never changes
/// them (`A`..`Z` are 65..90).
pub fn to_key(name: &[u8]) -> Box<[u8]> {
    name.to_ascii_lowercase().into_boxed_slice()
}

/// Case-insensitive equality of two wire names.
pub fn eq_ignore_case(a: &[u8], b: &[u8]) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// Presentation form (`www.example.com.`) for logs: `.` and `\` inside labels are escaped as
/// `\.` and `\\`, bytes outside printable ASCII as `\DDD` (RFC 1035 §5.1). Invalid input is
/// shown up to the first problem, followed by `<invalid>`.
pub fn to_presentation(name: &[u8]) -> String {
    let mut s = String::new();
    let mut pos = 0usize;
    loop {
        let Some(&len) = name.get(pos) else {
            s.push_str("<invalid>");
            return s;
        };
        let len = len as usize;
        if len == 0 {
            if s.is_empty() {
                s.push('.');
            }
            return s;
        }
        let Some(label) = name.get(pos + 1..pos + 1 + len).filter(|_| len <= MAX_LABEL_LEN)
        else {
            s.push_str("<invalid>");
            return s;
        };
        for &b in label {
            match b {
                b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'$' | b'@' => {
                    s.push('\\');
                    s.push(b as char);
                }
                0x21..=0x7E => s.push(b as char),
                _ => s.push_str(&format!("\\{b:03}")),
            }
        }
        s.push('.');
        pos += 1 + len;
    }
}

/// Parses a presentation name (`www.example.com.` or relative `www.example.com`, always taken
/// as absolute) into wire form. Supports `\.`, `\\` and `\DDD` escapes. Meant for
/// configuration and tests, not for the wire path.
pub fn from_presentation(text: &str) -> Result<Vec<u8>, NameError> {
    let mut out = Vec::with_capacity(text.len() + 2);
    if text == "." {
        out.push(0);
        return Ok(out);
    }
    let bytes = text.as_bytes();
    let mut label: Vec<u8> = Vec::new();
    let mut i = 0usize;
    let push_label = |label: &mut Vec<u8>, out: &mut Vec<u8>| -> Result<(), NameError> {
        if label.is_empty() || label.len() > MAX_LABEL_LEN {
            return Err(NameError::BadLabelType);
        }
        out.push(label.len() as u8);
        out.append(label);
        Ok(())
    };
    while i < bytes.len() {
        match bytes[i] {
            b'.' => {
                push_label(&mut label, &mut out)?;
                i += 1;
            }
            b'\\' => {
                let d = bytes.get(i + 1..i + 4);
                if let Some(d) = d.filter(|d| d.iter().all(u8::is_ascii_digit)) {
                    let v = (d[0] - b'0') as u32 * 100 + (d[1] - b'0') as u32 * 10 + (d[2] - b'0') as u32;
                    label.push(u8::try_from(v).map_err(|_| NameError::BadLabelType)?);
                    i += 4;
                } else {
                    label.push(*bytes.get(i + 1).ok_or(NameError::Truncated)?);
                    i += 2;
                }
            }
            b => {
                label.push(b);
                i += 1;
            }
        }
    }
    if !label.is_empty() {
        push_label(&mut label, &mut out)?;
    }
    out.push(0);
    if out.len() > MAX_NAME_LEN {
        return Err(NameError::TooLong);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WWW: &[u8] = b"\x03www\x07example\x03com\x00";

    #[test]
    fn name_len_table() {
        let long_label = {
            let mut v = vec![64u8];
            v.extend([b'a'; 64]);
            v.push(0);
            v
        };
        let too_long = {
            let mut v = Vec::new();
            for _ in 0..4 {
                v.push(63);
                v.extend([b'a'; 63]);
            }
            v.push(0); // 4*64 + 1 = 257
            v
        };
        let max = {
            let mut v = Vec::new();
            for _ in 0..3 {
                v.push(63);
                v.extend([b'a'; 63]);
            }
            v.push(61);
            v.extend([b'a'; 61]);
            v.push(0); // 3*64 + 62 + 1 = 255
            v
        };
        let cases: &[(&str, &[u8], Result<usize, NameError>)] = &[
            ("root", b"\x00", Ok(1)),
            ("www", WWW, Ok(17)),
            ("trailing bytes ignored", b"\x01a\x00\xff\xff", Ok(3)),
            ("empty", b"", Err(NameError::Truncated)),
            ("no root", b"\x03www", Err(NameError::Truncated)),
            ("label overruns", b"\x05ab", Err(NameError::Truncated)),
            ("pointer", b"\xc0\x0c", Err(NameError::BadLabelType)),
            ("extended label", b"\x41a\x00", Err(NameError::BadLabelType)),
            ("label 64", &long_label, Err(NameError::BadLabelType)),
            ("257 bytes", &too_long, Err(NameError::TooLong)),
            ("255 bytes", &max, Ok(255)),
        ];
        for (what, input, want) in cases {
            assert_eq!(name_len(input), *want, "{what}");
        }
    }

    #[test]
    fn read_name_table() {
        // header(12) + "\x03www\x07example\x03com\x00" at 12, then "\x03ftp\xc0\x10" at 29.
        let mut msg = vec![0u8; 12];
        msg.extend_from_slice(WWW);
        msg.extend_from_slice(b"\x03ftp\xc0\x10");
        msg.extend_from_slice(b"\xc0\x1d"); // at 35: pointer to ftp (29)
        msg.extend_from_slice(b"\xc0\x25"); // at 37: pointer to itself
        msg.extend_from_slice(b"\xc0"); // at 39: truncated pointer
        #[allow(clippy::type_complexity)] // a fixture table: one row a case
        let cases: &[(usize, Result<(usize, &[u8]), NameError>)] = &[
            (12, Ok((29, WWW))),
            (29, Ok((35, b"\x03ftp\x07example\x03com\x00"))),
            (35, Ok((37, b"\x03ftp\x07example\x03com\x00"))),
            (37, Err(NameError::BadPointer)),
            (39, Err(NameError::Truncated)),
            (40, Err(NameError::Truncated)),
        ];
        for (pos, want) in cases {
            let mut out = Vec::new();
            let got = read_name(&msg, *pos, &mut out).map(|end| (end, out.as_slice()));
            assert_eq!(got, want.map(|(e, n)| (e, n)), "at {pos}");
        }
    }

    #[test]
    fn read_name_rejects_long_decompressed_name() {
        // 4 labels of 63 via pointers chain: each pointer adds a label in front.
        let mut msg = vec![0u8; 12];
        msg.push(63);
        msg.extend([b'a'; 63]);
        msg.push(0); // name at 12, 65 bytes
        let mut prev = 12u16;
        for _ in 0..4 {
            let here = msg.len() as u16;
            msg.push(63);
            msg.extend([b'b'; 63]);
            msg.extend_from_slice(&(0xC000 | prev).to_be_bytes());
            prev = here;
        }
        let mut out = Vec::new();
        assert_eq!(read_name(&msg, prev as usize, &mut out), Err(NameError::TooLong));
    }

    #[test]
    fn labels_suffixes_parent() {
        assert_eq!(labels(WWW).collect::<Vec<_>>(), vec![&b"www"[..], b"example", b"com"]);
        assert_eq!(label_count(WWW), 3);
        assert_eq!(label_count(ROOT), 0);
        assert_eq!(suffix_offsets(WWW).collect::<Vec<_>>(), vec![0, 4, 12, 16]);
        assert_eq!(suffix_offsets(b"\x00").collect::<Vec<_>>(), vec![0]);
        assert_eq!(parent(WWW), Some(&b"\x07example\x03com\x00"[..]));
        assert_eq!(parent(b"\x03com\x00"), Some(&b"\x00"[..]));
        assert_eq!(parent(ROOT), None);
        assert_eq!(parent(b"\x05ab"), None);
        assert!(is_subdomain(WWW, b"\x03com\x00"));
        assert!(is_subdomain(WWW, WWW));
        assert!(is_subdomain(WWW, ROOT));
        assert!(!is_subdomain(b"\x03com\x00", WWW));
        assert!(!is_subdomain(b"\x04xcom\x00", b"\x03com\x00"));
    }

    #[test]
    fn keys_and_presentation() {
        assert_eq!(&*to_key(b"\x03WwW\x07ExAmple\x03COM\x00"), WWW);
        assert!(eq_ignore_case(b"\x01A\x00", b"\x01a\x00"));
        let cases: &[(&[u8], &str)] = &[
            (WWW, "www.example.com."),
            (b"\x00", "."),
            (b"\x03a.b\x00", "a\\.b."),
            (b"\x02\x00\xff\x00", "\\000\\255."),
            (b"\x05ab", "<invalid>"),
        ];
        for (wire, text) in cases {
            assert_eq!(to_presentation(wire), *text);
        }
        assert_eq!(from_presentation("www.example.com.").unwrap(), WWW);
        assert_eq!(from_presentation("www.example.com").unwrap(), WWW);
        assert_eq!(from_presentation(".").unwrap(), b"\x00");
        assert_eq!(from_presentation("a\\.b.").unwrap(), b"\x03a.b\x00");
        assert_eq!(from_presentation("\\000\\255.").unwrap(), b"\x02\x00\xff\x00");
        assert!(from_presentation("a..b").is_err());
        assert!(from_presentation(&"a".repeat(64)).is_err());
    }
}
