//! Loader tests against the repository's zones (`tests/zones`) and small zones written to a
//! temporary directory: good zones load, every bad zone fails with the exact `FILE:LINE: reason`,
//! RDATA wire bytes, empty non-terminals, case folding, lines of multi-line records, includes.

use std::path::{Path, PathBuf};

use xdns_zone::load::{
    key_to_text, load_zone, load_zone_with_warnings, name_key, text_to_key, LoadError, ZoneSource,
};
use xdns_zone::Zone;

fn zones_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones")
}

fn src(origin: &str, file: impl Into<PathBuf>) -> ZoneSource {
    ZoneSource {
        name: origin.into(),
        file: file.into(),
    }
}

fn load_ok(origin: &str, file: impl Into<PathBuf>) -> Zone {
    match load_zone(&src(origin, file), None) {
        Ok(z) => z,
        Err(es) => panic!(
            "zone failed: {}",
            es.iter()
                .map(|e| e.to_string())
                .collect::<Vec<_>>()
                .join("\n")
        ),
    }
}

/// A fresh directory for one test's files.
fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xdns-load-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const HEAD: &str =
    "$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n  NS ns1\nns1 A 198.18.0.1\n";

/// Writes `text` as `zone.db` in a fresh directory and loads it as example.com.
fn load_text(name: &str, text: &str) -> (PathBuf, Result<Zone, Vec<LoadError>>) {
    let d = tmpdir(name);
    let f = d.join("zone.db");
    std::fs::write(&f, text).unwrap();
    let r = load_zone(&src("example.com.", &f), None);
    (f, r)
}

fn key(s: &str) -> Box<[u8]> {
    text_to_key(s).unwrap()
}

fn rdata(z: &Zone, name: &str, rtype: u16) -> Vec<Vec<u8>> {
    z.nodes
        .get(&key(name))
        .unwrap_or_else(|| panic!("no node {name}"))
        .rrset(rtype)
        .unwrap_or_else(|| panic!("no type {rtype} at {name}"))
        .rdata
        .iter()
        .map(|b| b.to_vec())
        .collect()
}

#[test]
fn good_zones_load() {
    let com = load_zone_with_warnings(
        &src("example.com.", zones_dir().join("example.com.zone")),
        None,
    )
    .expect("example.com loads");
    assert!(com.warnings.is_empty(), "{:?}", com.warnings);
    assert_eq!(com.zone.serial, 2024060101);
    assert_eq!(&*com.zone.apex, &*key("example.com."));
    assert!(com.zone.nodes.len() > 40);
    let net = load_ok("example.net.", zones_dir().join("example.net.zone"));
    assert_eq!(net.serial, 7);
    assert_eq!(net.nodes.len(), 5);
}

#[test]
fn bad_zones_fail_with_file_line_reason() {
    let bad = zones_dir().join("bad");
    let cases: &[(&str, &str, Option<usize>, &str)] = &[
        ("syntax-error.zone", "syntax-error.zone", Some(7), "expected IPv4 address"),
        ("unknown-type.zone", "unknown-type.zone", Some(7), "expected rtype (column 13)"),
        ("missing-soa.zone", "missing-soa.zone", None, "missing SOA record at the zone apex example.com."),
        ("two-soa.zone", "two-soa.zone", Some(7), "more than one SOA record at the zone apex"),
        ("soa-not-at-apex.zone", "soa-not-at-apex.zone", Some(7), "SOA record at www.example.com., not at the zone apex"),
        ("missing-apex-ns.zone", "missing-apex-ns.zone", None, "missing NS records at the zone apex example.com."),
        ("cname-and-other.zone", "cname-and-other.zone", Some(8), "CNAME beside other data (A) at www.example.com."),
        ("out-of-zone.zone", "out-of-zone.zone", Some(7), "out-of-zone record: www.example.org. is not in zone example.com."),
        ("ds-at-apex.zone", "ds-at-apex.zone", Some(7), "DS record at the zone apex (DS belongs to the parent zone)"),
        (
            "below-dname.zone",
            "below-dname.zone",
            Some(8),
            "A record at www.old.example.com. is below the DNAME at old.example.com. (nothing may exist below a DNAME)",
        ),
        ("two-dname.zone", "two-dname.zone", Some(8), "more than one DNAME record at old.example.com."),
        (
            "include-missing.zone",
            "include-missing.zone",
            Some(7),
            "cannot open $INCLUDE file BAD/does-not-exist.inc: No such file or directory (os error 2)",
        ),
        ("include-error.zone", "include-error.inc", Some(3), "expected IPv6 address"),
    ];
    let mut seen = 0;
    for &(file, err_file, line, reason) in cases {
        let errs = load_zone(&src("example.com.", bad.join(file)), None).expect_err(file);
        let reason = reason.replace("BAD", &bad.display().to_string());
        let want = LoadError {
            file: bad.join(err_file),
            line,
            reason,
        };
        assert_eq!(errs, vec![want.clone()], "{file}");
        // The Display form is what `xdns check` prints.
        let shown = errs[0].to_string();
        match line {
            Some(l) => assert_eq!(
                shown,
                format!("{}:{l}: {}", want.file.display(), want.reason)
            ),
            None => assert_eq!(shown, format!("{}: {}", want.file.display(), want.reason)),
        }
        // The comment on line 2 of each bad file names the same line.
        let text = std::fs::read_to_string(bad.join(file)).unwrap();
        let expect = text.lines().nth(1).unwrap();
        match line {
            Some(l) => assert!(expect.contains(&format!("line {l}")), "{file}: {expect}"),
            None => assert!(expect.contains("no line"), "{file}: {expect}"),
        }
        seen += 1;
    }
    // Every bad zone file is in the table.
    let n = std::fs::read_dir(&bad)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "zone")
        })
        .count();
    assert_eq!(n, seen);
}

#[test]
fn wire_bytes_of_escapes_parentheses_and_generic_types() {
    let z = load_ok("example.com.", zones_dir().join("example.com.zone"));
    // SOA across lines in parentheses, with comments between the numbers.
    let mut soa = b"\x03ns1\x07example\x03com\x00\x0ahostmaster\x07example\x03com\x00".to_vec();
    for n in [2024060101u32, 7200, 3600, 1209600, 300] {
        soa.extend_from_slice(&n.to_be_bytes());
    }
    assert_eq!(rdata(&z, "example.com.", 6), vec![soa]);

    let txt = rdata(&z, "txt.example.com.", 16);
    let want: Vec<Vec<u8>> = vec![
        b"\x0bhello world".to_vec(),
        b"\x0asemi;colon\x0cquote\"inside\x0aback\\slash".to_vec(),
        b"\x05caf\xc3\xa9\x07tab\tsep\x08unquoted".to_vec(),
        b"\x05multi\x06string\x0cacross lines".to_vec(),
        b"\x00".to_vec(),
    ];
    assert_eq!(txt, want);

    assert_eq!(
        rdata(&z, "generic.example.com.", 65400),
        vec![vec![0x0a, 0, 0, 1]]
    );
    // RFC 3597 form of a known type gives the same bytes as the usual form.
    assert_eq!(
        rdata(&z, "generic-a.example.com.", 1),
        vec![vec![198, 18, 0, 99]]
    );

    // A long TXT RRset that cannot fit a 512-byte answer.
    let big: usize = rdata(&z, "big.example.com.", 16)
        .iter()
        .map(|d| d.len() + 16)
        .sum();
    assert!(big > 512, "{big}");
}

#[test]
fn rdata_matches_domain_for_every_type_in_the_zone() {
    // Cross-check a few types against domain's own scanner, independently of the loader.
    use domain::base::rdata::ComposeRecordData;
    use domain::zonefile::inplace::{Entry, Zonefile};
    let z = load_ok("example.com.", zones_dir().join("example.com.zone"));
    let text = std::fs::read(zones_dir().join("example.com.zone")).unwrap();
    let mut zf = Zonefile::from(&text[..]);
    zf.set_origin(domain::base::Name::from_str_abs("example.com."));
    let mut checked = 0;
    while let Ok(Some(entry)) = zf.next_entry() {
        let Entry::Record(rec) = entry else { continue };
        let owner = key_to_text(&name_key(rec.owner()));
        let mut want = Vec::new();
        rec.data().compose_rdata(&mut want).unwrap();
        let node = z.nodes.get(&key(&owner)).expect(&owner);
        let rr = node.rrset(rec.rtype().to_int()).expect(&owner);
        assert!(
            rr.rdata.iter().any(|d| d[..] == want[..]),
            "{owner} {}",
            rec.rtype()
        );
        checked += 1;
    }
    assert!(checked > 60, "{checked}");
}

trait FromStrAbs {
    fn from_str_abs(s: &str) -> Self;
}
impl FromStrAbs for domain::base::Name<bytes::Bytes> {
    fn from_str_abs(s: &str) -> Self {
        std::str::FromStr::from_str(s).unwrap()
    }
}

#[test]
fn empty_non_terminals_and_case() {
    let z = load_ok("example.com.", zones_dir().join("example.com.zone"));
    for ent in [
        "y.ent.example.com.",
        "ent.example.com.",
        "_tcp.www.example.com.",
        "_udp.example.com.",
        "wild.example.com.",
        "case.example.com.",
    ] {
        let n = z
            .nodes
            .get(&key(ent))
            .unwrap_or_else(|| panic!("missing ENT {ent}"));
        assert!(n.rrsets.is_empty(), "{ent}");
    }
    // Owners are folded: `MiXeD.CaSe`, `NS2`, `WwW` are stored lowercase.
    assert!(z
        .nodes
        .keys()
        .all(|k| !k.iter().any(u8::is_ascii_uppercase)));
    assert!(z.nodes.contains_key(&key("mixed.case.example.com.")));
    assert_eq!(rdata(&z, "ns2.example.com.", 1), vec![vec![198, 18, 0, 2]]);
    assert_eq!(
        z.nodes[&key("www.example.com.")]
            .rrsets
            .iter()
            .map(|r| r.rtype)
            .collect::<Vec<_>>(),
        vec![1, 28, 65]
    );
    // RDATA keeps its case.
    assert_eq!(
        rdata(&z, "example.com.", 15)[0],
        b"\x00\x0a\x04Mail\x07Example\x03COM\x00".to_vec()
    );
    // Every node's ancestors up to the apex exist.
    for k in z.nodes.keys() {
        let mut p = &k[..];
        while p.len() > z.apex.len() {
            p = &p[1 + p[0] as usize..];
            assert!(
                z.nodes.contains_key(p),
                "{} lacks {}",
                key_to_text(k),
                key_to_text(p)
            );
        }
    }
    // Include with its own origin.
    assert_eq!(rdata(&z, "h1.hosts.example.com.", 28).len(), 1);
    assert_eq!(z.nodes[&key("h1.hosts.example.com.")].rrsets[0].ttl, 600);
}

#[test]
fn lines_of_single_and_multi_line_records() {
    // Lines 6-8: a record spanning parentheses; line 10: quoted `;` and `(`; line 13: an
    // indented record (owner inherited); errors are reported on the first line of the record.
    let text = format!(
        "{HEAD}www A 198.18.0.10\nwww ( CNAME\n ; comment\n  ns1 )\n\nt TXT \"a ; no comment\" \"(\"\nt CNAME ns1\nu A 198.18.0.1\n  CNAME ns1\n"
    );
    let (f, r) = load_text("lines", &text);
    let errs = r.unwrap_err();
    let got: Vec<_> = errs
        .iter()
        .map(|e| (e.line, e.reason.split(' ').next().unwrap().to_string()))
        .collect();
    assert_eq!(
        got,
        vec![
            (Some(6), "CNAME".into()),
            (Some(11), "CNAME".into()),
            (Some(13), "CNAME".into())
        ],
        "{errs:?}"
    );
    assert!(errs.iter().all(|e| e.file == f));
}

#[test]
fn several_errors_are_collected_and_scanning_resumes() {
    let text = format!(
        "{HEAD}a A 1.2.3\nb A 198.18.0.2\nc BOGUS 1\n  TXT \"skipped\"\nd ( A\n  300.1.1.1 )\ne AAAA ::1\ne CNAME b\n"
    );
    let (_, r) = load_text("several", &text);
    let errs = r.unwrap_err();
    let lines: Vec<_> = errs.iter().map(|e| e.line).collect();
    // A syntax error inside a multi-line entry is placed on the line where it is found.
    assert_eq!(
        lines,
        vec![Some(5), Some(7), Some(10), Some(12)],
        "{errs:?}"
    );
    assert!(errs[3].reason.starts_with("CNAME beside other data"));
}

#[test]
fn ttl_minimum_duplicates_and_warnings() {
    let text = format!("{HEAD}x 300 A 198.18.0.5\nx 100 A 198.18.0.6\nx 300 A 198.18.0.5\nsub NS ns.sub\nns.sub A 198.18.0.7\nfoo.sub MX 10 x\n");
    let d = tmpdir("ttl");
    let f = d.join("zone.db");
    std::fs::write(&f, text).unwrap();
    let l = load_zone_with_warnings(&src("example.com", &f), None).expect("loads");
    let rr = l.zone.nodes[&key("x.example.com.")]
        .rrset(1)
        .unwrap()
        .clone();
    assert_eq!(rr.ttl, 100);
    assert_eq!(rr.rdata.len(), 2, "duplicate removed");
    let w: Vec<_> = l
        .warnings
        .iter()
        .map(|w| (w.line, w.reason.clone()))
        .collect();
    assert_eq!(
        w,
        vec![
            (Some(6), "TTL 100 differs from TTL 300 of the A RRset at x.example.com.; using 100".into()),
            (Some(10), "MX record at foo.sub.example.com. is below the zone cut sub.example.com. and is ignored".into()),
        ]
    );
    // Glue below the cut is kept without a warning.
    assert!(l.zone.nodes.contains_key(&key("ns.sub.example.com.")));
}

#[test]
fn semantic_errors_table() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "x DS 1 13 2 00\n",
            5,
            "DS record at x.example.com., which is not a zone cut",
        ),
        (
            "x CNAME a\nx CNAME b\n",
            6,
            "more than one CNAME record at x.example.com.",
        ),
        (
            "x CH A 198.18.0.1\n",
            5,
            "different class: CH != IN (column 8)",
        ),
        (
            "x A 198.18.0.1\n@ CNAME x\n",
            6,
            "CNAME beside other data (NS) at example.com.",
        ),
        (
            "x TYPE1 \\# 3 010203\n",
            5,
            "RFC 3597 data is not valid A RDATA",
        ),
        ("$FOO bar\n", 5, "unknown control: $FOO (column 6)"),
    ];
    for (i, &(extra, line, reason)) in cases.iter().enumerate() {
        let (f, r) = load_text(&format!("sem{i}"), &format!("{HEAD}{extra}"));
        let errs = r.expect_err(extra);
        assert_eq!(
            errs,
            vec![LoadError {
                file: f,
                line: Some(line),
                reason: reason.into()
            }],
            "{extra}"
        );
    }
}

#[test]
fn include_loops_depth_and_relative_paths() {
    // Self include: a loop.
    let d = tmpdir("incloop");
    std::fs::write(d.join("zone.db"), format!("{HEAD}$INCLUDE zone.db\n")).unwrap();
    let errs = load_zone(&src("example.com.", d.join("zone.db")), None).unwrap_err();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].line, Some(5));
    assert!(errs[0].reason.starts_with("$INCLUDE loop"), "{}", errs[0]);

    // A chain of 20 includes in a subdirectory, each relative to its includer.
    let d = tmpdir("incdepth");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("zone.db"), format!("{HEAD}$INCLUDE sub/i0.inc\n")).unwrap();
    for i in 0..20 {
        std::fs::write(
            d.join(format!("sub/i{i}.inc")),
            format!("h{i} A 198.18.0.{i}\n$INCLUDE i{}.inc\n", i + 1),
        )
        .unwrap();
    }
    let errs = load_zone(&src("example.com.", d.join("zone.db")), None).unwrap_err();
    assert_eq!(errs.len(), 1, "{errs:?}");
    assert_eq!(errs[0].file, d.join("sub/i15.inc"));
    assert_eq!(errs[0].line, Some(2));
    assert!(
        errs[0].reason.contains("nested deeper than 16"),
        "{}",
        errs[0]
    );

    // Include without origin inherits the current $ORIGIN.
    let d = tmpdir("incorigin");
    std::fs::write(
        d.join("zone.db"),
        format!("{HEAD}$ORIGIN o.example.com.\n$INCLUDE x.inc\nback A 198.18.0.9\n"),
    )
    .unwrap();
    std::fs::write(d.join("x.inc"), "in A 198.18.0.8\n").unwrap();
    let z = load_ok("example.com.", d.join("zone.db"));
    assert!(z.nodes.contains_key(&key("in.o.example.com.")));
    assert!(z.nodes.contains_key(&key("back.o.example.com.")));
}

#[test]
fn include_starts_with_the_includers_ttl() {
    // A record without a TTL in an included file takes the includer's $TTL, not the last
    // explicit TTL (Knot and NSD agree); a $TTL set inside the include does not leak back.
    let d = tmpdir("incttl");
    std::fs::write(
        d.join("zone.db"),
        format!("{HEAD}$TTL 700
$INCLUDE x.inc
after A 198.18.0.9
"),
    )
    .unwrap();
    std::fs::write(
        d.join("x.inc"),
        "h1 600 A 198.18.0.7
h2 A 198.18.0.8
$TTL 50
h3 A 198.18.0.6
",
    )
    .unwrap();
    let z = load_ok("example.com.", d.join("zone.db"));
    let ttl = |n: &str| z.nodes[&key(n)].rrset(1).unwrap().ttl;
    assert_eq!(ttl("h1.example.com."), 600);
    assert_eq!(ttl("h2.example.com."), 700);
    assert_eq!(ttl("h3.example.com."), 50);
    assert_eq!(ttl("after.example.com."), 700);
}

#[test]
fn progress_is_reported_every_100k_records() {
    let mut text = String::from(HEAD);
    for i in 0..200_000u32 {
        text.push_str(&format!("h{i} A 198.18.{}.{}\n", i / 256 % 256, i % 256));
    }
    let d = tmpdir("progress");
    std::fs::write(d.join("zone.db"), text).unwrap();
    let calls = std::cell::RefCell::new(Vec::new());
    let cb = |n: u64| calls.borrow_mut().push(n);
    let z = load_zone(&src("example.com.", d.join("zone.db")), Some(&cb)).unwrap();
    assert_eq!(*calls.borrow(), vec![100_000, 200_000]);
    assert_eq!(z.nodes.len(), 200_002);
}

#[test]
fn odd_inputs_do_not_panic() {
    let inputs = [
        "",
        "\"",
        "(",
        ")",
        "\\",
        "@ SOA (",
        "$INCLUDE",
        "$ORIGIN",
        "$TTL x",
        "a\tA\t1.2.3.4 (",
        "* A 1.2.3.4",
        "\u{0}\u{1}\u{ff}",
        "@ TXT \"\\",
        "@ TYPE65535 \\# 70000 00",
        "x.. A 1.2.3.4",
        "@ A\n\n\n",
    ];
    for (i, t) in inputs.iter().enumerate() {
        let (_, r) = load_text(&format!("odd{i}"), t);
        assert!(r.is_err(), "{t:?}");
    }
    // A bad zone name is an error, not a panic.
    assert!(load_zone(&src("a..b", "/nonexistent"), None).is_err());
    assert!(load_zone(&src("example.com.", "/nonexistent/zone"), None).is_err());
}

/// The warnings of a signed zone, each at its file and line: an expired and an expiring
/// RRSIG, an RRset without a signature, a broken NSEC chain, NSEC3PARAM without an NSEC3
/// chain, no DNSKEY at the apex. Signatures of one node with different TTLs are no warning.
#[test]
fn signed_zone_warnings() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
    let soon = now + 2 * 86400;
    let later = now + 30 * 86400;
    let sig = |t: &str, exp: u64| format!("RRSIG {t} 13 2 3600 {exp} 1700000000 1 example.com. AAAA");
    let text = format!(
        "$TTL 3600\n\
         @ SOA ns1 hostmaster 1 7200 3600 1209600 300\n\
         \x20 NS ns1\n\
         \x20 {}\n\
         \x20 {}\n\
         \x20 NSEC ns1 NS SOA RRSIG NSEC NSEC3PARAM\n\
         \x20 300 {}\n\
         \x20 NSEC3PARAM 1 0 0 -\n\
         \x20 {}\n\
         ns1 A 198.18.0.1\n\
         \x20 NSEC www A RRSIG NSEC\n\
         \x20 {}\n",
        sig("SOA", later),
        sig("NS", 1700000000),
        sig("NSEC", later),
        sig("NSEC3PARAM", soon),
        sig("NSEC", later),
    );
    let d = tmpdir("signed");
    let f = d.join("zone.db");
    std::fs::write(&f, text).unwrap();
    let l = load_zone_with_warnings(&src("example.com.", &f), None).expect("loads");
    let w: Vec<(Option<usize>, String)> = l.warnings.iter().map(|w| (w.line, w.reason.clone())).collect();
    let has = |line: usize, what: &str| w.iter().any(|(l, r)| *l == Some(line) && r.contains(what));
    assert!(has(2, "has no DNSKEY at the apex"), "{w:#?}");
    assert!(has(5, "RRSIG NS at example.com. expired"), "{w:#?}");
    assert!(has(9, "RRSIG NSEC3PARAM at example.com. expires within"), "{w:#?}");
    assert!(has(10, "A RRset at ns1.example.com. has no RRSIG"), "{w:#?}");
    assert!(has(11, "NSEC chain broken at ns1.example.com.: next name www.example.com."), "{w:#?}");
    assert!(has(8, "NSEC3PARAM at example.com. without an NSEC3 chain"), "{w:#?}");
    assert_eq!(w.len(), 6, "nothing else (no TTL warning for the RRSIGs): {w:#?}");
}

/// An NSEC3 chain (RFC 5155 §7.1) whose next hashed owners form a ring is no warning; one
/// link that skips an owner is "NSEC3 chain broken", at that owner's line, naming the next
/// hash it gives and the one the chain wants. NSEC3 records of other parameters are not part
/// of the chain; when they are all there is, NSEC3PARAM has no chain.
#[test]
fn nsec3_chain_warnings() {
    let later = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() + 30 * 86400;
    let h = |c: char| c.to_string().repeat(32);
    let (h0, h1, h2, h3) = (h('0'), h('1'), h('2'), h('3'));
    let zone = |links: [&str; 4], params: &str| {
        let mut t = format!(
            "$TTL 3600\n@ SOA ns1 hostmaster 1 7200 3600 1209600 300\n@ NS ns1\n@ NSEC3PARAM {params}\n\
             @ RRSIG SOA 13 2 3600 {later} 1700000000 1 example.com. AAAA\nns1 A 198.18.0.1\n"
        );
        for (owner, next) in [&h0, &h1, &h2, &h3].iter().zip(links) {
            t.push_str(&format!("{owner} NSEC3 1 0 0 - {next} A RRSIG\n"));
        }
        t
    };
    let d = tmpdir("nsec3");
    let f = d.join("zone.db");
    let warnings = |text: String| {
        std::fs::write(&f, text).unwrap();
        let l = load_zone_with_warnings(&src("example.com.", &f), None).expect("loads");
        l.warnings.iter().filter(|w| w.reason.contains(" chain")).map(|w| (w.line, w.reason.clone())).collect::<Vec<_>>()
    };
    // a whole ring (the last points back at the first): nothing
    let w = warnings(zone([&h1, &h2, &h3, &h0], "1 0 0 -"));
    assert!(w.is_empty(), "{w:#?}");
    // 1 → 3 skips 2 (line 8 holds owner 1)
    let w = warnings(zone([&h1, &h3, &h3, &h0], "1 0 0 -"));
    assert_eq!(w.len(), 1, "{w:#?}");
    assert_eq!(w[0].0, Some(8), "{w:#?}");
    assert_eq!(w[0].1, format!("NSEC3 chain broken at {h1}: next hashed owner {h3}, the next in the chain is {h2}"), "{w:#?}");
    // NSEC3PARAM of another salt: the records are of no chain it names
    let w = warnings(zone([&h1, &h2, &h3, &h0], "1 0 0 ab"));
    assert_eq!(w.len(), 1, "{w:#?}");
    assert!(w[0].1.contains("NSEC3PARAM at example.com. without an NSEC3 chain of its parameters"), "{w:#?}");
}
