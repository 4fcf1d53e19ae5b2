//! Root hints: an RFC 1035 master file with the root NS records and their A/AAAA glue
//! (the format of IANA's `named.root`).
//!
//! Each line is scanned with `domain`'s zone-file scanner on its own (root hints have no
//! parentheses or `$INCLUDE`), so every error names its line: `FILE:LINE: reason`. A line that
//! starts with a blank repeats the previous owner. Only NS at the root and A/AAAA of the NS
//! names are used; other records are errors, so a wrong file is noticed.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use bytes::BytesMut;
use domain::base::iana::Class;
use domain::base::name::{Name, ToName};
use domain::base::rdata::ComposeRecordData;
use domain::zonefile::inplace::{Entry, Zonefile};

use crate::msg::rtype;

/// The root servers: their names (lowercased wire) and addresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RootHints {
    /// NS name → addresses, in file order of the NS records.
    pub servers: Vec<(Vec<u8>, Vec<IpAddr>)>,
}

/// A problem in a root hints file, shown as `FILE:LINE: reason`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HintsError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line, when the problem belongs to one.
    pub line: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

impl std::fmt::Display for HintsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file.display(), l, self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for HintsError {}

fn key_of(n: &impl ToName) -> Vec<u8> {
    let mut v = Vec::new();
    for l in n.iter_labels() {
        let s = l.as_slice();
        v.push(s.len() as u8);
        v.extend(s.iter().map(u8::to_ascii_lowercase));
    }
    v
}

/// Strips a `;` comment (root hints have no quoted strings).
fn strip_comment(line: &str) -> &str {
    match line.find(';') {
        Some(i) => &line[..i],
        None => line,
    }
}

impl RootHints {
    /// Reads and checks a root hints file.
    pub fn load(path: &Path) -> Result<RootHints, Vec<HintsError>> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            vec![HintsError {
                file: path.to_path_buf(),
                line: None,
                reason: format!("cannot read root hints: {e}"),
            }]
        })?;
        Self::parse(&text, path)
    }

    /// Parses root hints text; `path` is only used in messages.
    pub fn parse(text: &str, path: &Path) -> Result<RootHints, Vec<HintsError>> {
        let mut errors = Vec::new();
        let err = |line: usize, reason: String| HintsError {
            file: path.to_path_buf(),
            line: Some(line),
            reason,
        };
        let mut ns: Vec<Vec<u8>> = Vec::new();
        let mut addrs: BTreeMap<Vec<u8>, (usize, Vec<IpAddr>)> = BTreeMap::new();
        let mut last_owner: Option<String> = None;
        for (i, raw) in text.lines().enumerate() {
            let lineno = i + 1;
            let line = strip_comment(raw);
            if line.trim().is_empty() {
                continue;
            }
            if line.trim_start().starts_with('$') {
                errors.push(err(
                    lineno,
                    "directives are not supported in root hints".into(),
                ));
                continue;
            }
            let line = if line.starts_with(char::is_whitespace) {
                match &last_owner {
                    Some(o) => format!("{o} {line}"),
                    None => {
                        errors.push(err(lineno, "record without an owner".into()));
                        continue;
                    }
                }
            } else {
                last_owner = line.split_whitespace().next().map(str::to_string);
                line.to_string()
            };
            let mut zf = Zonefile::new();
            zf.extend_from_slice(b"$TTL 3600000\n");
            zf.extend_from_slice(line.as_bytes());
            zf.extend_from_slice(b"\n");
            zf.set_origin(Name::from_str(".").expect("root name"));
            zf.set_default_class(Class::IN);
            let rec =
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| zf.next_entry())) {
                    Ok(Ok(Some(Entry::Record(r)))) => r,
                    Ok(Ok(_)) => {
                        errors.push(err(lineno, "not a record".into()));
                        continue;
                    }
                    Ok(Err(e)) => {
                        let m = e.to_string();
                        // `domain` prefixes `line:col: `; our line is the real one.
                        let reason = m
                            .splitn(3, ':')
                            .nth(2)
                            .map(str::trim)
                            .unwrap_or(&m)
                            .to_string();
                        errors.push(err(lineno, reason));
                        continue;
                    }
                    Err(_) => {
                        errors.push(err(lineno, "scanner failed on this line".into()));
                        continue;
                    }
                };
            if rec.class() != Class::IN {
                errors.push(err(
                    lineno,
                    format!("class {} is not supported (only IN)", rec.class()),
                ));
                continue;
            }
            let owner = key_of(rec.owner());
            let mut rdata = BytesMut::new();
            if rec.data().compose_rdata(&mut rdata).is_err() {
                errors.push(err(lineno, "cannot encode RDATA".into()));
                continue;
            }
            match rec.rtype().to_int() {
                rtype::NS if owner == [0] => {
                    let n = rdata.to_ascii_lowercase();
                    if !ns.contains(&n) {
                        ns.push(n);
                    }
                }
                rtype::NS => errors.push(err(
                    lineno,
                    "NS records in root hints must be at the root".into(),
                )),
                rtype::A if rdata.len() == 4 => {
                    let a = IpAddr::V4(Ipv4Addr::new(rdata[0], rdata[1], rdata[2], rdata[3]));
                    addrs.entry(owner).or_insert((lineno, Vec::new())).1.push(a);
                }
                rtype::AAAA if rdata.len() == 16 => {
                    let mut b = [0u8; 16];
                    b.copy_from_slice(&rdata);
                    addrs
                        .entry(owner)
                        .or_insert((lineno, Vec::new()))
                        .1
                        .push(IpAddr::V6(Ipv6Addr::from(b)));
                }
                other => errors.push(err(
                    lineno,
                    format!("unexpected record type {other} in root hints (only NS, A, AAAA)"),
                )),
            }
        }
        for (owner, (line, _)) in &addrs {
            if !ns.contains(owner) {
                errors.push(err(
                    *line,
                    format!(
                        "address of {} which is not a root NS",
                        xdns_wire::name::to_presentation(owner)
                    ),
                ));
            }
        }
        let servers: Vec<(Vec<u8>, Vec<IpAddr>)> = ns
            .into_iter()
            .map(|n| {
                let a = addrs.get(&n).map(|(_, a)| a.clone()).unwrap_or_default();
                (n, a)
            })
            .collect();
        if errors.is_empty() && !servers.iter().any(|(_, a)| !a.is_empty()) {
            errors.push(HintsError {
                file: path.to_path_buf(),
                line: None,
                reason: "root hints have no root NS with an address".into(),
            });
        }
        if errors.is_empty() {
            Ok(RootHints { servers })
        } else {
            errors.sort_by_key(|e| e.line);
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_named_root_style() {
        let text = "; root hints\n\
                    .                        3600000      NS    A.ROOT-SERVERS.NET.\n\
                    A.ROOT-SERVERS.NET.      3600000      A     198.18.0.1\n\
                    \x20                        3600000      AAAA  2001:db8::1\n\
                    .                        3600000      NS    b.root-servers.net.\n\
                    b.root-servers.net.      3600000      A     198.18.0.2\n";
        let h = RootHints::parse(text, Path::new("root.hints")).unwrap();
        assert_eq!(h.servers.len(), 2);
        assert_eq!(h.servers[0].0, b"\x01a\x0croot-servers\x03net\x00".to_vec());
        assert_eq!(
            h.servers[0].1,
            vec![
                "198.18.0.1".parse::<IpAddr>().unwrap(),
                "2001:db8::1".parse().unwrap()
            ]
        );
    }

    #[test]
    fn errors_name_file_and_line() {
        let table: &[(&str, Option<usize>, &str)] = &[
            (". 1 NS a.\na. 1 A 300.1.1.1\n", Some(2), ""),
            (
                ". 1 NS a.\na. 1 MX 10 b.\n",
                Some(2),
                "unexpected record type",
            ),
            (". 1 NS a.\nb. 1 A 198.18.0.1\n", Some(2), "not a root NS"),
            ("x. 1 NS a.\n", Some(1), "at the root"),
            ("\n\n$ORIGIN x.\n", Some(3), "directives"),
            (". 1 NS a.\n", None, "no root NS with an address"),
            (". 1 CH NS a.\n", Some(1), "class"),
        ];
        for (text, line, needle) in table {
            let e = RootHints::parse(text, Path::new("h.hints")).expect_err(text);
            assert_eq!(e[0].line, *line, "{text}: {}", e[0]);
            assert!(e[0].reason.contains(needle), "{text}: {}", e[0]);
            assert!(e[0].to_string().starts_with("h.hints:"), "{}", e[0]);
        }
    }
}
