//! A zone as a set of records: built from a loaded zone, changed by IXFR differences (the
//! secondary applies them; the primary's journal, later, computes them between two loaded
//! versions), and written out as a master file that the zone loader reads back, so a
//! transferred zone is validated exactly as a configured one.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

use bytes::Bytes;
use xdns_zone::load::key_to_text;
use xdns_zone::{NameKey, Zone};

use super::client::{Diff, Rec, SOA};

/// Records by identity (owner, type, RDATA); the value is the TTL (RFC 1995: a deletion
/// matches whatever the TTL).
pub type RecordSet = HashMap<(NameKey, u16, Bytes), u32>;

/// Every record of a loaded zone.
pub fn records_of(zone: &Zone) -> RecordSet {
    let mut set = RecordSet::new();
    for (owner, node) in &zone.nodes {
        for rr in &node.rrsets {
            for rd in &rr.rdata {
                set.insert((owner.clone(), rr.rtype, Bytes::copy_from_slice(rd)), node.record_ttl(rr, rd));
            }
        }
    }
    set
}

/// Apply IXFR differences in order. A deletion of a record we do not have means our copy and
/// the primary's history disagree: an error (the caller falls back to AXFR).
pub fn apply(set: &mut RecordSet, diffs: &[Diff]) -> Result<(), String> {
    for d in diffs {
        for r in &d.deleted {
            if set.remove(&(r.owner.clone(), r.rtype, r.rdata.clone())).is_none() {
                return Err(format!(
                    "difference {} → {} deletes a {} record at {} that is not in the zone",
                    d.from,
                    d.to,
                    xdns_zone::validate::type_name(r.rtype),
                    key_to_text(&r.owner)
                ));
            }
        }
        for r in &d.added {
            set.insert((r.owner.clone(), r.rtype, r.rdata.clone()), r.ttl);
        }
    }
    Ok(())
}

/// The differences that take `old` to `new` (one [`Diff`], SOAs included as IXFR carries
/// them): what a primary's journal keeps between two loaded versions.
#[cfg_attr(not(test), allow(dead_code))] // the primary's journal (issue 28, step 2)
pub fn diff(old: &RecordSet, new: &RecordSet, from: u32, to: u32) -> Diff {
    let rec = |(k, ttl): (&(NameKey, u16, Bytes), &u32)| Rec { owner: k.0.clone(), rtype: k.1, ttl: *ttl, rdata: k.2.clone() };
    let soa_first = |v: &mut Vec<Rec>| v.sort_by_key(|r| (r.rtype != SOA, r.owner.clone(), r.rtype));
    let mut deleted: Vec<Rec> = old.iter().filter(|(k, t)| new.get(*k) != Some(t)).map(rec).collect();
    let mut added: Vec<Rec> = new.iter().filter(|(k, t)| old.get(*k) != Some(t)).map(rec).collect();
    soa_first(&mut deleted);
    soa_first(&mut added);
    Diff { from, to, deleted, added }
}

/// The zone of `set` at `apex`, validated as the loader validates a zone file
/// ([`xdns_zone::records::RecordBuilder`], as an AXFR is built): empty non-terminals added,
/// RRsets sorted by type, one TTL per RRset (the smallest), owners outside the zone refused.
/// Errors and warnings name `file` (where the copy is kept) and the owner; warnings are
/// logged (the first 100).
pub fn build_zone(apex: &[u8], file: &Path, set: &RecordSet) -> Result<Zone, Vec<xdns_zone::LoadError>> {
    let mut b = xdns_zone::records::RecordBuilder::new(apex.into());
    for ((owner, rtype, rdata), ttl) in set {
        b.add(owner, *rtype, *ttl, rdata);
    }
    let built = b.build(file.to_path_buf());
    for w in built.warnings.iter().take(100) {
        tracing::warn!("{w}");
    }
    if !built.errors.is_empty() {
        return Err(built.errors);
    }
    Ok(built.zone)
}

/// The apex SOA (serial and RDATA) of a record set.
#[cfg_attr(not(test), allow(dead_code))]
pub fn soa_of(set: &RecordSet, apex: &[u8]) -> Option<(u32, Bytes)> {
    set.keys()
        .find(|(o, t, _)| *t == SOA && &o[..] == apex)
        .and_then(|(_, _, rd)| super::serial::soa_serial(rd).map(|s| (s, rd.clone())))
}

/// Write `set` as a master file at `path`: the apex SOA first, then every record, one a
/// line, with absolute names. Common types in presentation form, the rest as RFC 3597
/// generic data (which the loader parses into the same bytes).
pub fn write(path: &Path, apex: &[u8], set: &RecordSet) -> std::io::Result<()> {
    write_records(path, apex, set.iter().map(|(k, ttl)| (&k.0[..], k.1, &k.2[..], *ttl)).collect())
}

/// [`write`] of a zone's records (the version served, after a change applied in place): the
/// apex SOA first, then the records in the zone's own order (no sort: the writer can stop
/// between nodes). Stops, leaving `path` partly written, when `stop` is set (`Ok(false)`).
pub fn write_zone(path: &Path, zone: &Zone, stop: &std::sync::atomic::AtomicBool) -> std::io::Result<bool> {
    use std::sync::atomic::Ordering;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "; written by xdns from a zone transfer")?;
    let mut line = String::new();
    let mut rec = |f: &mut std::io::BufWriter<std::fs::File>, owner: &[u8], rtype: u16, ttl: u32, rd: &[u8]| {
        line.clear();
        let _ = write!(line, "{} {} IN ", key_to_text(owner), ttl);
        rdata_text(&mut line, rtype, rd);
        writeln!(f, "{line}")
    };
    let apex = zone.nodes.get(&zone.apex);
    if let Some(soa) = apex.and_then(|n| n.rrset(SOA)) {
        for rd in &soa.rdata {
            rec(&mut f, &zone.apex, SOA, soa.ttl, rd)?;
        }
    }
    for (i, (owner, node)) in zone.nodes.iter().enumerate() {
        if i % 1024 == 0 && stop.load(Ordering::Relaxed) {
            return Ok(false);
        }
        for rr in &node.rrsets {
            if rr.rtype == SOA && owner[..] == zone.apex[..] {
                continue;
            }
            for rd in &rr.rdata {
                rec(&mut f, owner, rr.rtype, node.record_ttl(rr, rd), rd)?;
            }
        }
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(true)
}

fn write_records(path: &Path, apex: &[u8], mut recs: Vec<(&[u8], u16, &[u8], u32)>) -> std::io::Result<()> {
    let soa = |k: &(&[u8], u16, &[u8], u32)| !(k.1 == SOA && k.0 == apex);
    recs.sort_by(|a, b| (soa(a), a.0, a.1).cmp(&(soa(b), b.0, b.1)));
    let mut f = std::io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(f, "; written by xdns from a zone transfer")?;
    let mut line = String::new();
    for (owner, rtype, rd, ttl) in recs {
        line.clear();
        let _ = write!(line, "{} {} IN ", key_to_text(owner), ttl);
        rdata_text(&mut line, rtype, rd);
        writeln!(f, "{line}")?;
    }
    f.into_inner().map_err(|e| e.into_error())?.sync_all()
}

/// `TYPE RDATA` of one record in presentation form.
fn rdata_text(out: &mut String, rtype: u16, rd: &[u8]) {
    if !known_text(out, rtype, rd) {
        let _ = write!(out, "TYPE{rtype} \\# {}", rd.len());
        for b in rd {
            let _ = write!(out, " {b:02x}");
        }
    }
}

/// A wire name at the start of `rd`: its length and text (uncompressed, as stored).
fn name_at(rd: &[u8]) -> Option<(usize, String)> {
    let mut pos = 0usize;
    loop {
        let l = *rd.get(pos)? as usize;
        if l > 63 {
            return None;
        }
        pos += 1 + l;
        if l == 0 {
            break;
        }
    }
    rd.get(pos - 1)?;
    Some((pos, key_to_text(&rd[..pos])))
}

/// The common types, written by hand (names as stored: case kept, root as `.`); false when
/// the type is another one or the RDATA does not fit it.
fn known_text(out: &mut String, rtype: u16, rd: &[u8]) -> bool {
    let start = out.len();
    let ok = match rtype {
        1 if rd.len() == 4 => write!(out, "A {}.{}.{}.{}", rd[0], rd[1], rd[2], rd[3]).is_ok(),
        28 if rd.len() == 16 => {
            let a: [u8; 16] = rd.try_into().unwrap_or_default();
            write!(out, "AAAA {}", std::net::Ipv6Addr::from(a)).is_ok()
        }
        2 | 5 | 12 => match name_at(rd) {
            Some((n, t)) if n == rd.len() => {
                let m = match rtype {
                    2 => "NS",
                    5 => "CNAME",
                    _ => "PTR",
                };
                write!(out, "{m} {t}").is_ok()
            }
            _ => false,
        },
        15 if rd.len() > 2 => match name_at(&rd[2..]) {
            Some((n, t)) if n + 2 == rd.len() => write!(out, "MX {} {t}", u16::from_be_bytes([rd[0], rd[1]])).is_ok(),
            _ => false,
        },
        6 => (|| {
            let (n1, m) = name_at(rd)?;
            let (n2, r) = name_at(rd.get(n1..)?)?;
            let nums = rd.get(n1 + n2..)?;
            if nums.len() != 20 {
                return None;
            }
            let v: Vec<u32> = nums.chunks(4).map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]])).collect();
            write!(out, "SOA {m} {r} {} {} {} {} {}", v[0], v[1], v[2], v[3], v[4]).ok()
        })()
        .is_some(),
        _ => false,
    };
    if !ok {
        out.truncate(start);
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use xdns_zone::{load_zone, ZoneSource};

    fn load(dir: &Path, name: &str, text: &str) -> Zone {
        let f = dir.join(format!("{name}.zone"));
        std::fs::write(&f, text).unwrap();
        load_zone(&ZoneSource { name: format!("{name}."), file: f }, None).unwrap()
    }

    const ZONE: &str = "$TTL 300\n@ IN SOA ns.a. Host.a. 7 60 30 600 60\n@ NS ns\n@ MX 10 Mail\n@ MX 20 .\nns A 198.18.0.1\nns AAAA 2001:db8::1\nwww CNAME ns\n_s._tcp SRV 1 2 3 ns\n@ TXT \"hi there\" \"x;y\"\n1 PTR ns.a.\nx\\.y TYPE65000 \\# 2 abcd\n";

    /// Written out and read back, a zone is the same zone, byte for byte.
    #[test]
    fn write_and_load_round_trip() {
        let dir = std::env::temp_dir().join(format!("xdns-journal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let z = load(&dir, "a", ZONE);
        let set = records_of(&z);
        assert_eq!(set.len(), 11);
        let out = dir.join("out.zone");
        write(&out, &z.apex, &set).unwrap();
        let text = std::fs::read_to_string(&out).unwrap();
        assert!(text.lines().nth(1).unwrap().contains(" SOA ns.a. Host.a. 7 60 30 600 60"), "{text}");
        assert!(text.contains("MX 20 ."), "{text}");
        let back = load_zone(&ZoneSource { name: "a.".into(), file: out.clone() }, None).unwrap();
        assert_eq!(records_of(&back), set);
        assert_eq!(back.serial, 7);
        // written from the zone (the path of an IXFR applied in place): the same records; a
        // writer told to stop says so
        let out2 = dir.join("out2.zone");
        let go = std::sync::atomic::AtomicBool::new(false);
        assert!(write_zone(&out2, &z, &go).unwrap());
        let text2 = std::fs::read_to_string(&out2).unwrap();
        assert!(text2.lines().nth(1).unwrap().contains(" SOA "), "{text2}");
        let back2 = load_zone(&ZoneSource { name: "a.".into(), file: out2.clone() }, None).unwrap();
        assert_eq!(records_of(&back2), set);
        assert!(!write_zone(&out2, &z, &std::sync::atomic::AtomicBool::new(true)).unwrap());
        // built directly, the same zone as loaded: nodes (empty non-terminals too), TTLs
        let built = build_zone(&z.apex, &out, &set).unwrap();
        assert_eq!(built.serial, 7);
        assert_eq!(built.nodes.len(), back.nodes.len());
        for (k, n) in &back.nodes {
            let b = &built.nodes[k];
            assert_eq!(b.rrsets.len(), n.rrsets.len(), "{}", key_to_text(k));
            for (x, y) in b.rrsets.iter().zip(&n.rrsets) {
                assert_eq!((x.rtype, x.ttl), (y.rtype, y.ttl));
                let mut xs = x.rdata.clone();
                let mut ys = y.rdata.clone();
                xs.sort();
                ys.sort();
                assert_eq!(xs, ys);
            }
        }
        // what the loader refuses, this refuses: CNAME and other data, an owner outside
        let mut bad = set.clone();
        bad.insert((b"\x03www\x01a\x00"[..].into(), 1, Bytes::from_static(&[198, 18, 0, 1])), 60);
        let e = build_zone(&z.apex, &out, &bad).unwrap_err();
        assert!(e.iter().any(|e| e.reason.contains("CNAME")), "{e:?}");
        let mut outside = set.clone();
        outside.insert((b"\x01b\x00"[..].into(), 1, Bytes::from_static(&[198, 18, 0, 1])), 60);
        assert!(build_zone(&z.apex, &out, &outside).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An RRSIG is written with the TTL of the RRset it covers (RFC 4034 §3), not the node's
    /// RRSIG set's (the smallest of them): in the journal's records and in a stored copy, as
    /// a transfer out writes it (`Node::record_ttl`).
    #[test]
    fn signatures_keep_their_rrsets_ttl() {
        let dir = std::env::temp_dir().join(format!("xdns-journal-s-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sig = "20300101000000 20250101000000 4242 a. AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+Pw==";
        let text = format!(
            "$TTL 300\n@ IN SOA ns.a. host.a. 7 60 30 600 60\n@ NS ns\nns 3600 A 198.18.0.1\n\
             ns 3600 RRSIG A 13 2 3600 {sig}\nns 60 NSEC a. A RRSIG NSEC\nns 60 RRSIG NSEC 13 2 60 {sig}\n"
        );
        let z = load(&dir, "a", &text);
        let ttl_of = |set: &RecordSet, covered: u16| {
            set.iter()
                .find(|((o, t, rd), _)| &o[..] == b"\x02ns\x01a\x00" && *t == 46 && rd[..2] == covered.to_be_bytes())
                .map(|(_, ttl)| *ttl)
        };
        let set = records_of(&z);
        assert_eq!((ttl_of(&set, 1), ttl_of(&set, 47)), (Some(3600), Some(60)), "{set:?}");
        let out = dir.join("signed.zone");
        let go = std::sync::atomic::AtomicBool::new(false);
        assert!(write_zone(&out, &z, &go).unwrap());
        let written = std::fs::read_to_string(&out).unwrap();
        // (RRSIG in the generic form: RDATA starting with the type covered)
        assert!(written.lines().any(|l| l.starts_with("ns.a. 3600 IN TYPE46 \\# 85 00 01 ")), "{written}");
        assert!(written.lines().any(|l| l.starts_with("ns.a. 60 IN TYPE46 \\# 85 00 2f ")), "{written}");
        let back = load_zone(&ZoneSource { name: "a.".into(), file: out }, None).unwrap();
        assert_eq!(records_of(&back), set);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The journal: the difference of two versions applied to the first gives the second;
    /// a deletion of a record we do not have is an error.
    #[test]
    fn diffs_apply_and_compute() {
        let dir = std::env::temp_dir().join(format!("xdns-journal-d-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let v1 = records_of(&load(&dir, "a", ZONE));
        let changed = ZONE.replace(" 7 60", " 8 60").replace("198.18.0.1", "198.18.0.2") + "new A 198.18.0.9\n";
        let v2 = records_of(&load(&dir, "a", &changed));
        let d = diff(&v1, &v2, 7, 8);
        assert_eq!(d.deleted.len(), 2, "{d:?}"); // old SOA, old A
        assert_eq!(d.added.len(), 3, "{d:?}"); // new SOA, new A, new name
        assert_eq!(d.deleted[0].rtype, SOA);
        assert_eq!(d.added[0].rtype, SOA);
        let mut s = v1.clone();
        apply(&mut s, std::slice::from_ref(&d)).unwrap();
        assert_eq!(s, v2);
        assert_eq!(soa_of(&s, b"\x01a\x00").map(|x| x.0), Some(8));
        // applied again: the old records are gone
        let e = apply(&mut s, &[d]).unwrap_err();
        assert!(e.contains("not in the zone"), "{e}");
        // a TTL change is a deletion and an addition
        let ttl = ZONE.replace("ns A 198", "ns 60 A 198");
        let v3 = records_of(&load(&dir, "a", &ttl));
        let d = diff(&v1, &v3, 7, 7);
        assert_eq!((d.deleted.len(), d.added.len()), (1, 1));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
