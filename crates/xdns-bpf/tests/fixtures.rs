//! Fixture table for the XDP program (needs root): each row is a description, an input frame
//! built in code, and the expected verdict with the expected output frame. Run through
//! BPF_PROG_TEST_RUN; the verdict is read back from the per-CPU counters.
//!
//! The zone is made by hand (bodies from `xdns_wire::body::BodyWriter`, the engine's writer);
//! expected DNS payloads come from `xdns_wire::response::assemble`, the userspace assembler;
//! expected frames from `common::frame`, which computes its own checksums.

mod common;

use common::*;
use xdns_bpf::data::{AnswerEntry, KernelData, Kind, NodeEntry};
use xdns_wire::body::{BodyWriter, Section};
use xdns_wire::query::Query;
use xdns_wire::response::{assemble, Limits};
use xdns_wire::Body;

const A: u16 = 1;
const AAAA: u16 = 28;
const NS: u16 = 2;
const CNAME: u16 = 5;
const SOA: u16 = 6;
const MX: u16 = 15;
const TXT: u16 = 16;
const DS: u16 = 43;

fn soa_rdata() -> Vec<u8> {
    let mut r = wire("ns1.example.com");
    r.extend(wire("hostmaster.example.com"));
    for v in [2026112201u32, 7200, 3600, 1209600, 300] {
        r.extend_from_slice(&v.to_be_bytes());
    }
    r
}

fn negative(base: &str, rcode: u8) -> Body {
    negative_ttl(base, rcode, 300)
}

/// A negative answer whose SOA has this TTL.
fn negative_ttl(base: &str, rcode: u8, ttl: u32) -> Body {
    let mut w = BodyWriter::new(&wire(base)).unwrap();
    w.set_aa(true);
    w.set_rcode(rcode);
    w.set_section(Section::Authority).unwrap();
    w.write_rr(&wire("example.com"), false, SOA, ttl, &soa_rdata()).unwrap();
    w.finish()
}

fn a_body(base: &str, owner_is_q: bool) -> Body {
    let mut w = BodyWriter::new(&wire(base)).unwrap();
    w.set_aa(true);
    w.write_rr(&wire(base), owner_is_q, A, 300, &[192, 0, 2, 1]).unwrap();
    w.finish()
}

fn txt_body(base: &str, n: usize, each: usize) -> Body {
    let mut w = BodyWriter::new(&wire(base)).unwrap();
    w.set_aa(true);
    for i in 0..n {
        let mut t = vec![each as u8];
        t.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, each));
        w.write_rr(&wire(base), true, TXT, 300, &t).unwrap();
    }
    w.finish()
}

fn referral(cut: &str, glue_txt: usize) -> Body {
    let mut w = BodyWriter::new(&wire(cut)).unwrap();
    w.set_section(Section::Authority).unwrap();
    let ns = format!("ns.{cut}");
    w.write_rr(&wire(cut), false, NS, 3600, &wire(&ns)).unwrap();
    w.set_section(Section::Additional).unwrap();
    w.write_rr(&wire(&ns), false, A, 3600, &[198, 18, 5, 5]).unwrap();
    if glue_txt > 0 {
        let mut t = vec![glue_txt as u8];
        t.extend(std::iter::repeat_n(b'g', glue_txt));
        for _ in 0..3 {
            w.write_rr(&wire(&ns), false, TXT, 3600, &t).unwrap();
        }
    }
    w.set_ar_required(true);
    w.finish()
}

/// The hand-made zone: (data for the kernel, a lookup from body key to body for the rows).
fn zone() -> KernelData {
    let apex = wire("example.com");
    let node = |n: &str, cut: Option<&str>, wildcard: bool| NodeEntry {
        name: wire(n),
        apex: apex.clone(),
        cut: cut.map(wire),
        wildcard,
    };
    let nodes = vec![
        node("example.com", None, false),
        node("www.example.com", None, false),
        node("alias.example.com", None, false),
        node("wild.example.com", None, true),
        node("*.wild.example.com", None, false),
        node("sub.example.com", Some("sub.example.com"), false),
        node("ns.sub.example.com", Some("sub.example.com"), false),
        node("deep.example.com", Some("deep.example.com"), false),
        node("big.example.com", None, false),
        node("huge.example.com", None, false),
        node("mid.example.com", None, false),
    ];
    let mut alias = BodyWriter::new(&wire("alias.example.com")).unwrap();
    alias.set_aa(true);
    alias.write_rr(&wire("alias.example.com"), true, CNAME, 300, &wire("www.example.com")).unwrap();
    alias.write_rr(&wire("www.example.com"), false, A, 300, &[192, 0, 2, 1]).unwrap();
    let mut wild_a = BodyWriter::new(&wire("wild.example.com")).unwrap();
    wild_a.set_aa(true);
    wild_a.write_rr(&wire("wild.example.com"), true, A, 60, &[192, 0, 2, 7]).unwrap();
    wild_a.set_section(Section::Authority).unwrap();
    wild_a.write_rr(&wire("example.com"), false, NS, 60, &wire("ns1.example.com")).unwrap();
    let mut www_aaaa = BodyWriter::new(&wire("www.example.com")).unwrap();
    www_aaaa.set_aa(true);
    www_aaaa.write_rr(&wire("www.example.com"), true, AAAA, 300, &[0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]).unwrap();
    let ans = |n: &str, kind: Kind, body: Body| AnswerEntry { base: wire(n), kind, body };
    let answers = vec![
        ans("example.com", Kind::Other, negative("example.com", 0)),
        ans("example.com", Kind::NxDomain, negative("example.com", 3)),
        ans("www.example.com", Kind::Type(A), a_body("www.example.com", true)),
        ans("www.example.com", Kind::Other, negative("www.example.com", 0)),
        ans("www.example.com", Kind::Type(AAAA), www_aaaa.finish()),
        // A forged whole-name key for a name that is no node: what a hash collision with
        // another name's answer looks like (its base length is www's, not the question's).
        ans("fake.example.com", Kind::Type(A), a_body("www.example.com", true)),
        ans("alias.example.com", Kind::Type(A), alias.finish()),
        ans("wild.example.com", Kind::Wildcard(A), wild_a.finish()),
        ans("wild.example.com", Kind::WildcardOther, negative("wild.example.com", 0)),
        ans("sub.example.com", Kind::Other, referral("sub.example.com", 0)),
        ans("deep.example.com", Kind::Other, referral("deep.example.com", 200)),
        ans("big.example.com", Kind::Type(TXT), txt_body("big.example.com", 3, 200)),
        ans("huge.example.com", Kind::Type(TXT), txt_body("huge.example.com", 6, 250)),
        ans("mid.example.com", Kind::Type(TXT), txt_body("mid.example.com", 2, 200)),
    ];
    KernelData { nodes, answers }
}

/// What a row expects.
enum Want {
    /// XDP_TX with the answer made of this body.
    Answer(&'static str, Kind),
    /// XDP_PASS with this verdict name.
    Pass(&'static str),
}

struct Row {
    what: String,
    frame: Vec<u8>,
    net: Net,
    want: Want,
}

fn expected_dns(data: &KernelData, dns_query: &[u8], base: &str, kind: Kind) -> Vec<u8> {
    let body = &data.answers.iter().find(|a| a.base == wire(base) && a.kind == kind).expect("row body").body;
    let q = Query::parse(dns_query).expect("row query parses");
    let mut out = Vec::new();
    assemble(&q, body, &Limits::udp(q.edns.as_ref(), OUR_PAYLOAD), &mut out).expect("assemble");
    out
}

fn nets() -> Vec<(&'static str, Net)> {
    let mut v4opt = Net::v4();
    v4opt.ip_opts = vec![1, 1, 1, 0]; // NOP NOP NOP EOL
    let mut v4vlan = Net::v4();
    v4vlan.vlan = Some((0x8100, 42));
    let mut v6qinq = Net::v6();
    v6qinq.vlan = Some((0x88a8, 7));
    vec![("ipv4", Net::v4()), ("ipv6", Net::v6()), ("ipv4+vlan", v4vlan), ("ipv6+802.1ad", v6qinq), ("ipv4+options", v4opt)]
}

fn rows() -> Vec<Row> {
    let mut rows = Vec::new();
    let edns = |p: u16, d: bool| Opt::new(p, d);
    // (description, qname, qtype, opt, expected body)
    type Answered = (&'static str, &'static str, u16, Option<Opt>, &'static str, Kind);
    let answered: Vec<Answered> = vec![
        ("exact A", "www.example.com", A, None, "www.example.com", Kind::Type(A)),
        ("mixed case echoed", "wWw.ExAmple.COM", A, None, "www.example.com", Kind::Type(A)),
        ("fast path: exact AAAA, DO", "WWW.example.com", AAAA, edns(1232, true), "www.example.com", Kind::Type(AAAA)),
        ("fast path miss: walk to the exact node, NODATA", "www.example.com", TXT, None, "www.example.com", Kind::Other),
        ("fast path: colliding key of another length -> walk, NXDOMAIN", "fake.example.com", A, None, "example.com", Kind::NxDomain),
        ("CNAME chain", "alias.example.com", A, edns(1232, false), "alias.example.com", Kind::Type(A)),
        ("NODATA", "www.example.com", MX, edns(4096, true), "www.example.com", Kind::Other),
        ("NODATA at apex", "Example.com", TXT, None, "example.com", Kind::Other),
        ("NXDOMAIN delta>0", "nope.example.com", A, None, "example.com", Kind::NxDomain),
        ("NXDOMAIN two labels deeper, DO", "a.Nope.example.com", A, edns(1232, true), "example.com", Kind::NxDomain),
        ("wildcard", "a.b.wild.example.com", A, None, "wild.example.com", Kind::Wildcard(A)),
        ("wildcard other type", "X.wild.example.com", MX, edns(512, false), "wild.example.com", Kind::WildcardOther),
        ("referral below cut", "host.sub.example.com", A, None, "sub.example.com", Kind::Other),
        ("referral at cut", "sub.example.com", NS, edns(1232, false), "sub.example.com", Kind::Other),
        ("glue name answers as referral", "ns.sub.example.com", A, None, "sub.example.com", Kind::Other),
        ("ANY is a type of its own: NODATA here", "www.example.com", 255, None, "www.example.com", Kind::Other),
        ("qtype 0", "www.example.com", 0, None, "www.example.com", Kind::Other),
        ("TC: big answer, no EDNS", "big.example.com", TXT, None, "big.example.com", Kind::Type(TXT)),
        ("big answer fits with EDNS", "big.example.com", TXT, edns(1232, false), "big.example.com", Kind::Type(TXT)),
        ("client payload 100 counts as 512", "big.example.com", TXT, edns(100, false), "big.example.com", Kind::Type(TXT)),
        ("client payload capped by ours", "huge.example.com", TXT, edns(65000, false), "huge.example.com", Kind::Type(TXT)),
        ("body beyond the largest class, TC needs no bytes", "huge.example.com", TXT, edns(1232, false), "huge.example.com", Kind::Type(TXT)),
        ("medium answer, no EDNS fits", "mid.example.com", TXT, None, "mid.example.com", Kind::Type(TXT)),
        ("required glue does not fit: TC", "x.deep.example.com", A, None, "deep.example.com", Kind::Other),
        ("required glue fits with EDNS", "x.deep.example.com", A, edns(1232, true), "deep.example.com", Kind::Other),
    ];
    let odd = |mut o: Opt, opts: Vec<u8>| {
        o.options = opts;
        Some(o)
    };
    let with_opts: Vec<(&str, Option<Opt>)> = vec![
        ("EDNS cookie option ignored", odd(Opt::new(1232, false).unwrap(), vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8])),
        ("EDNS two options", odd(Opt::new(1232, true).unwrap(), vec![0, 10, 0, 0, 0, 12, 0, 2, 0, 0])),
    ];
    for (nname, net) in nets() {
        for (what, qn, qt, opt, base, kind) in &answered {
            let q = query(&wire(qn), *qt, opt.clone());
            rows.push(Row { what: format!("{nname}: {what}"), frame: frame(&net, &q), net: net.clone(), want: Want::Answer(base, *kind) });
        }
        for (what, opt) in &with_opts {
            let q = query(&wire("www.example.com"), A, opt.clone());
            rows.push(Row { what: format!("{nname}: {what}"), frame: frame(&net, &q), net: net.clone(), want: Want::Answer("www.example.com", Kind::Type(A)) });
        }
    }

    // Passed to userspace, with the reason.
    let v4 = Net::v4();
    let www = wire("www.example.com");
    let base_q = query(&www, A, None);
    let mut pass: Vec<(String, Net, Vec<u8>, &'static str)> = Vec::new();
    let mut p = |what: &str, net: &Net, dns: Vec<u8>, why: &'static str| pass.push((what.to_string(), net.clone(), dns, why));
    let mut v1 = Opt::new(1232, false).unwrap();
    v1.version = 1;
    p("EDNS version 1 -> BADVERS in userspace", &v4, query(&www, A, Some(v1)), "pass_edns_version");
    let mut two = query(&www, A, Opt::new(1232, false));
    two.extend(Opt::new(1232, false).unwrap().bytes());
    two[11] = 2;
    p("two OPT records", &v4, two, "pass_dns_counts");
    p("EDNS option overruns RDATA", &v4, query(&www, A, odd(Opt::new(1232, false).unwrap(), vec![0, 10, 0, 9, 1])), "pass_edns_bad");
    p("EDNS option header cut", &v4, query(&www, A, odd(Opt::new(1232, false).unwrap(), vec![0, 10, 0])), "pass_edns_bad");
    p("nine EDNS options (more than walked)", &v4, query(&www, A, odd(Opt::new(1232, false).unwrap(), [0u8, 10, 0, 0].repeat(9))), "pass_edns_bad");
    let mut nonroot = query(&www, A, Opt::new(1232, false));
    let at = nonroot.len() - 11;
    nonroot.splice(at..at + 1, [1u8, b'x', 0]);
    p("OPT owner not root", &v4, nonroot, "pass_edns_bad");
    let mut tsig = base_q.clone();
    tsig[11] = 1;
    tsig.extend_from_slice(&[0, 0, 250, 0, 255, 0, 0, 0, 0, 0, 0]);
    p("TSIG instead of OPT", &v4, tsig, "pass_edns_bad");
    let mut ch = base_q.clone();
    let n = ch.len();
    ch[n - 1] = 3;
    p("class CH", &v4, ch, "pass_qclass");
    p("AXFR", &v4, query(&www, 252, None), "pass_qtype_meta");
    p("IXFR", &v4, query(&www, 251, None), "pass_qtype_meta");
    p("qtype OPT", &v4, query(&www, 41, None), "pass_qtype_meta");
    p("qtype 128", &v4, query(&www, 128, None), "pass_qtype_meta");
    let mut qr = base_q.clone();
    qr[2] |= 0x80;
    p("QR=1", &v4, qr, "pass_dns_response");
    let mut notify = base_q.clone();
    notify[2] |= 4 << 3;
    p("opcode NOTIFY", &v4, notify, "pass_dns_opcode");
    let mut qd2 = base_q.clone();
    qd2[5] = 2;
    p("QDCOUNT=2", &v4, qd2, "pass_dns_counts");
    let mut qd0 = base_q.clone();
    qd0[5] = 0;
    p("QDCOUNT=0", &v4, qd0, "pass_dns_counts");
    let mut an1 = base_q.clone();
    an1[7] = 1;
    p("ANCOUNT=1", &v4, an1, "pass_dns_counts");
    let mut ns1 = base_q.clone();
    ns1[9] = 1;
    p("NSCOUNT=1", &v4, ns1, "pass_dns_counts");
    let mut long_label = vec![64u8];
    long_label.extend([b'a'; 64]);
    long_label.extend(wire("example.com"));
    p("label of 64 bytes", &v4, query(&long_label, A, None), "pass_qname");
    let mut long_name = Vec::new();
    for _ in 0..4 {
        long_name.push(63u8);
        long_name.extend([b'b'; 63]);
    }
    long_name.extend(wire("example.com"));
    p("name over 255 bytes", &v4, query(&long_name, A, None), "pass_qname");
    let mut ptr = vec![3, b'w', b'w', b'w', 0xc0, 12];
    ptr.truncate(6);
    p("compression pointer in question", &v4, query(&ptr, A, None), "pass_qname");
    let mut trailing = base_q.clone();
    trailing.push(0);
    p("one trailing byte", &v4, trailing, "pass_trailing");
    p("name under no zone", &v4, query(&wire("www.example.org"), A, None), "pass_no_zone");
    p("root name under no zone", &v4, query(&wire(""), A, None), "pass_no_zone");
    let mut port = Net::v4();
    port.dport = 5353;
    p("other port", &port, base_q.clone(), "pass_not_our_addr");
    let mut addr = Net::v4();
    addr.dst = vec![198, 18, 0, 9];
    p("other IPv4 address", &addr, base_q.clone(), "pass_not_our_addr");
    let mut addr6 = Net::v6();
    addr6.dst[15] = 9;
    p("other IPv6 address", &addr6, base_q.clone(), "pass_not_our_addr");
    let mut mf = Net::v4();
    mf.frag = 0x2000;
    p("IPv4 first fragment (MF)", &mf, base_q.clone(), "pass_ip_fragment");
    let mut off = Net::v4();
    off.frag = 0x0010;
    p("IPv4 later fragment (offset)", &off, base_q.clone(), "pass_ip_fragment");
    let mut ext = Net::v6();
    ext.v6_ext = Some(0);
    p("IPv6 hop-by-hop header", &ext, base_q.clone(), "pass_ipv6_ext");
    let mut tcp = Net::v4();
    tcp.proto = 6;
    p("TCP", &tcp, base_q.clone(), "pass_not_udp");
    // DNS payload cut at every length: the lengths in IP/UDP stay consistent.
    let full = query(&www, A, Opt::new(1232, true));
    for cut in 0..full.len() {
        let why = match cut {
            0..=11 => "pass_dns_short",
            c if c < 12 + www.len() + 4 => "pass_qname",
            c if c == 12 + www.len() + 4 => "pass_edns_bad",
            _ => "pass_edns_bad",
        };
        p(&format!("DNS cut at {cut}"), &v4, full[..cut].to_vec(), why);
    }
    for (what, net, dns, why) in pass {
        rows.push(Row { what, frame: frame(&net, &dns), net, want: Want::Pass(why) });
    }

    // The frame cut at every length (headers claim more than is there). BPF_PROG_TEST_RUN
    // refuses frames shorter than an Ethernet header, so cuts start at 14.
    let good = frame(&Net::v6(), &base_q);
    for cut in 14..good.len() {
        rows.push(Row { what: format!("ipv6 frame cut at {cut}"), frame: good[..cut].to_vec(), net: Net::v6(), want: Want::Pass("pass_l3_short") });
    }
    let good = frame(&Net::v4(), &base_q);
    for cut in 14..good.len() {
        rows.push(Row { what: format!("ipv4 frame cut at {cut}"), frame: good[..cut].to_vec(), net: Net::v4(), want: Want::Pass("pass_l3_short") });
    }
    // UDP length disagreeing with the IP length.
    let mut bad = frame(&Net::v4(), &base_q);
    bad[14 + 20 + 5] -= 1;
    rows.push(Row { what: "UDP length short by one".into(), frame: bad, net: Net::v4(), want: Want::Pass("pass_udp_bad") });
    // Ethernet padding after a short IPv4 packet is allowed.
    let mut padded = frame(&Net::v4(), &query(&wire("a.wild.example.com"), A, None));
    padded.extend([0u8; 6]);
    rows.push(Row { what: "ipv4 with Ethernet padding".into(), frame: padded, net: Net::v4(), want: Want::Answer("wild.example.com", Kind::Wildcard(A)) });
    // ARP.
    let mut arp = frame(&Net::v4(), &base_q);
    arp[12..14].copy_from_slice(&[0x08, 0x06]);
    rows.push(Row { what: "ARP".into(), frame: arp, net: Net::v4(), want: Want::Pass("pass_not_ip") });
    rows
}

fn counters(p: &xdns_bpf::runtime::XdpProgram) -> Vec<(String, u64)> {
    p.counters().unwrap()
}

#[test]
fn fixture_table() {
    require_root("fixture_table");
    run_fixture_table(load());
}

/// The same table with the guard stage loaded and empty (no list, no tier slot, features
/// counted): every row gives the same verdict and the same bytes as without it.
#[test]
fn fixture_table_with_an_empty_guard() {
    require_root("fixture_table_with_an_empty_guard");
    let prog = load_with(None, Some(guard_stage()));
    // empty lists installed are as good as none
    let empty = xdns_guard::lists::PrefixList::new();
    prog.guard().unwrap().replace_lists(&empty, &empty).unwrap();
    prog.guard().unwrap().replace_names(&Default::default()).unwrap();
    run_fixture_table(prog);
}

fn guard_stage() -> xdns_bpf::guard::GuardStage {
    xdns_bpf::guard::GuardStage { capacity: 1024, tier_slots: 4, features: true, names: 1024, feature_prefixes: 1024, feature_suffixes: 1024, rrl_accounts: 1024 }
}

/// A name blocked after the question memo learnt it is dropped, memo or not (the name check
/// runs before the seen stage); unblocked, it is answered again.
#[test]
fn name_blocks_come_before_the_memo() {
    require_root("name_blocks_come_before_the_memo");
    stay_on_one_cpu();
    let mut prog = load_with(None, Some(guard_stage()));
    prog.install(&zone()).unwrap();
    let g = prog.guard().unwrap();
    let f = frame(&Net::v4(), &query(&wire("www.example.com"), A, None));
    for _ in 0..3 {
        assert_eq!(verdict(&prog, &f).2, ["answered"]);
    }
    let (hits, _) = prog.memo_counts().unwrap();
    assert!(hits >= 1, "the third ask came from the memo");
    let names = xdns_guard::lists::parse_name_list("names", "www.example.com\n").unwrap();
    g.replace_names(&names).unwrap();
    let (act, _, moved) = verdict(&prog, &f);
    assert_eq!((act, moved), (1, vec!["drop_name".to_string()]));
    // a suffix entry blocks what is under it, not the name itself
    let names = xdns_guard::lists::parse_name_list("names", "*.example.com\n").unwrap();
    g.replace_names(&names).unwrap();
    assert_eq!(verdict(&prog, &f).2, ["drop_name"]);
    let apex = frame(&Net::v4(), &query(&wire("example.com"), A, None));
    assert_ne!(verdict(&prog, &apex).2, ["drop_name"]);
    g.replace_names(&Default::default()).unwrap();
    assert_eq!(verdict(&prog, &f).2, ["answered"]);
}

fn run_fixture_table(mut prog: xdns_bpf::runtime::XdpProgram) {
    let data = zone();
    // Before any data: everything passes as not loaded.
    let (act, _) = prog.test_run(&frame(&Net::v4(), &query(&wire("www.example.com"), A, None))).unwrap();
    assert_eq!(act, 2, "XDP_PASS before data is installed");
    assert_eq!(counters(&prog).iter().find(|(n, _)| n == "pass_not_loaded").unwrap().1, 1);
    prog.install(&data).unwrap();

    let rows = rows();
    let mut failures = Vec::new();
    for row in &rows {
        let before = counters(&prog);
        let (act, out) = match prog.test_run(&row.frame) {
            Ok(r) => r,
            Err(e) => {
                failures.push(format!("{}: test_run failed: {e}", row.what));
                continue;
            }
        };
        let after = counters(&prog);
        let moved: Vec<&str> = before
            .iter()
            .zip(&after)
            .filter(|(b, a)| a.1 != b.1)
            .map(|(_, a)| a.0.as_str())
            .collect();
        match &row.want {
            Want::Pass(why) => {
                if act != 2 || moved != [*why] || out != row.frame {
                    failures.push(format!("{}: want XDP_PASS {why}, got action {act} counters {moved:?}", row.what));
                }
            }
            Want::Answer(base, kind) => {
                let dns_q = dns_of(&row.frame).to_vec();
                let dns_q = &dns_q[..dns_q.len().min(dns_len(&row.frame))];
                let want = frame(&row.net.reply(), &expected_dns(&data, dns_q, base, *kind));
                if act != 3 || moved != ["answered"] {
                    failures.push(format!("{}: want XDP_TX, got action {act} counters {moved:?}", row.what));
                } else if !checksums_ok(&out) {
                    failures.push(format!("{}: checksums do not verify", row.what));
                } else if out != want {
                    failures.push(format!("{}: output differs\n got  {}\n want {}", row.what, hex(&out), hex(&want)));
                } else {
                    // Seen twice, a short question is kept in the memo (memo.h); the third ask
                    // is answered from it: the same bytes.
                    for n in 2..=3 {
                        match prog.test_run(&row.frame) {
                            Ok((3, again)) if again == want => {}
                            r => failures.push(format!("{}: ask {n} differs: {r:?}", row.what)),
                        }
                    }
                }
            }
        }
    }
    println!("{} fixture rows, {} failures", rows.len(), failures.len());
    let (insns, verified) = prog.insn_count().unwrap();
    println!("verified program: {insns} instructions, {verified} processed by the verifier");
    assert!(failures.is_empty(), "{} of {} rows failed:\n{}", failures.len(), rows.len(), failures.join("\n"));
}

/// DNS length from the UDP header (frames may carry Ethernet padding).
fn dns_len(f: &[u8]) -> usize {
    let total = dns_of(f).len();
    let l4 = f.len() - total - 8;
    usize::from(u16::from_be_bytes([f[l4 + 4], f[l4 + 5]])) - 8
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The question memo (memo.h) is consulted: a question asked twice is kept, and the third ask
/// takes the memo's answer index without walking or looking up. Pointing every kept entry at
/// a value that does not exist turns those asks into `pass_no_body`; a longer question (not
/// kept) and a new generation (the entries stop matching) answer from the full path again.
#[test]
fn question_memo_is_consulted() {
    require_root("question_memo_is_consulted");
    stay_on_one_cpu();
    let mut prog = load();
    let data = zone();
    prog.install(&data).unwrap();
    let short = frame(&Net::v4(), &query(&wire("www.example.com"), A, None));
    let long = frame(&Net::v4(), &query(&wire(&format!("{}.example.com", "x".repeat(60))), A, None));
    let ask = |prog: &xdns_bpf::runtime::XdpProgram, f: &[u8]| verdict(prog, f).2;
    for _ in 0..2 {
        assert_eq!(ask(&prog, &short), ["answered"]);
        assert_eq!(ask(&prog, &long), ["answered"]);
    }
    assert_eq!(prog.memo_counts().unwrap(), (0, 1), "kept at the second ask, not yet used");
    let used = prog.rewrite_memo(&|m| m.u.q.v = 0x7fff_fff0).unwrap();
    assert!(used >= 1, "the short question is kept after two asks");
    assert_eq!(ask(&prog, &short), ["pass_no_body"], "the memo's (broken) index was used");
    assert_eq!(prog.memo_counts().unwrap(), (1, 1));
    assert_eq!(ask(&prog, &long), ["answered"], "a name over 36 bytes is never kept");
    prog.install(&data).unwrap();
    assert_eq!(ask(&prog, &short), ["answered"], "a new generation: the old entries no longer match");
}

/// Frames of `n` distinct questions (A of h<i>.wild.example.com) whose memo slots share one set
/// of this CPU's memo, found with `memo_hash`, the model of the kernel's hash.
fn same_set_frames(prog: &xdns_bpf::runtime::XdpProgram, n: usize) -> Vec<Vec<u8>> {
    let sets = prog.memo_sets().unwrap();
    assert!(sets.is_power_of_two() && sets >= 2, "{sets} sets");
    let packet = |i: u32| query(&wire(&format!("h{i}.wild.example.com")), A, None);
    let gen = prog.generation();
    let set_of = |q: &[u8]| xdns_bpf::hash::memo_set(xdns_bpf::hash::memo_hash(prog.seed(), gen, &q[12..]), sets);
    let want = set_of(&packet(0));
    let same: Vec<u32> = (0..).filter(|&i| set_of(&packet(i)) == want).take(n).collect();
    same.iter().map(|&i| frame(&Net::v4(), &packet(i))).collect()
}

/// The memo's sets have two ways: two questions of one set are both kept and both served
/// from it (a direct-mapped memo would keep one); a third of that set takes one of their ways.
#[test]
fn question_memo_keeps_two_questions_per_set() {
    require_root("question_memo_keeps_two_questions_per_set");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let frames = same_set_frames(&prog, 3);
    let ask = |prog: &xdns_bpf::runtime::XdpProgram, f: &[u8]| verdict(prog, f).2;
    for f in &frames[..2] {
        for _ in 0..2 {
            assert_eq!(ask(&prog, f), ["answered"]);
        }
    }
    assert_eq!(prog.memo_counts().unwrap(), (0, 2), "both kept, in one set");
    assert_eq!(prog.rewrite_memo(&|m| m.u.q.v = 0x7fff_fff0).unwrap(), 2);
    for f in &frames[..2] {
        assert_eq!(ask(&prog, f), ["pass_no_body"], "served from the memo's (broken) index");
    }
    for _ in 0..2 {
        assert_eq!(ask(&prog, &frames[2]), ["answered"]);
    }
    assert_eq!(prog.memo_counts().unwrap(), (2, 3), "the third question of the set is kept");
    assert_eq!(ask(&prog, &frames[2]), ["answered"], "from its own, whole entry");
    assert_eq!(prog.memo_counts().unwrap(), (3, 3));
    let broken = frames[..2].iter().filter(|f| ask(&prog, f) == ["pass_no_body"]).count();
    assert_eq!(broken, 1, "it took exactly one of the two ways");
}

/// Two questions of one set asked in turn (A, B, A, B, ...) are both learnt: a set remembers
/// its last two first sightings, so neither erases the other's before its second ask. (With
/// one sighting per set they replaced each other forever and neither was ever kept.)
#[test]
fn question_memo_learns_two_questions_asked_in_turn() {
    require_root("question_memo_learns_two_questions_asked_in_turn");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let frames = same_set_frames(&prog, 2);
    for _ in 0..2 {
        for f in &frames {
            assert_eq!(verdict(&prog, f).2, ["answered"]);
        }
    }
    assert_eq!(prog.memo_counts().unwrap(), (0, 2), "both kept at their second ask");
    for f in &frames {
        assert_eq!(verdict(&prog, f).2, ["answered"]);
    }
    assert_eq!(prog.memo_counts().unwrap(), (2, 2), "both answered through the memo");
}

/// The memo keeps a name, type and class, not the OPT record or the header: kept from a query
/// without EDNS, the same question with EDNS (DO, another payload, a cookie) or without RD is
/// answered from the memo with exactly the bytes the full path (an empty memo) gives. The
/// name is long enough (26 bytes with type and class) that its hash sees no OPT byte, so all
/// of them probe the same slot.
#[test]
fn question_memo_answer_follows_the_packets_edns_and_flags() {
    require_root("question_memo_answer_follows_the_packets_edns_and_flags");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let mut fresh = load();
    fresh.install(&zone()).unwrap();
    let name = wire("A.b.wild.example.com");
    let plain = frame(&Net::v4(), &query(&name, A, None));
    for _ in 0..2 {
        assert_eq!(verdict(&prog, &plain).2, ["answered"]);
    }
    assert_eq!(prog.memo_counts().unwrap(), (0, 1));
    let mut cookie = Opt::new(1232, false).unwrap();
    cookie.options = vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
    let mut no_rd = query(&name, A, Opt::new(4096, true));
    no_rd[2] &= !0x01;
    let variants = [
        ("EDNS, DO", query(&name, A, Opt::new(1232, true))),
        ("EDNS, payload 512", query(&name, A, Opt::new(512, false))),
        ("EDNS cookie", query(&name, A, Some(cookie))),
        ("RD=0, EDNS", no_rd),
    ];
    for (i, (what, q)) in variants.iter().enumerate() {
        let f = frame(&Net::v4(), q);
        let (act, out, moved) = verdict(&prog, &f);
        assert_eq!(moved, ["answered"], "{what}");
        assert_eq!(prog.memo_counts().unwrap().0, i as u64 + 1, "{what}: answered from the memo");
        let (want_act, want, _) = verdict(&fresh, &f);
        assert_eq!((act, hex(&out)), (want_act, hex(&want)), "{what}: the same bytes as the full path");
        fresh.install(&zone()).unwrap(); // a new generation: the fresh program never memo-hits
    }
}

/// Perf mode of the table (root): the answered rows of IPv4 and IPv6, each the median of 2000
/// single kernel runs; prints nanoseconds per packet. Timing is not asserted; the verdict of
/// every row timed is (a row that stopped being answered would time something else).
#[test]
fn fixture_perf() {
    require_root("fixture_perf");
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let rows = rows();
    let timed = |row: &Row| {
        let want = match row.want {
            Want::Answer(..) => "answered",
            Want::Pass(why) => why,
        };
        assert_eq!(verdict(&prog, &row.frame).2, [want], "{}: the row to be timed", row.what);
        prog.bench(&row.frame, 2000).unwrap()
    };
    let arp = rows.iter().find(|r| r.what == "ARP").unwrap();
    println!("perf {:>5} ns/packet  baseline: ARP, passed at the first check", timed(arp));
    for what in ["other port", "QR=1", "label of 64 bytes", "one trailing byte", "name under no zone"] {
        let r = rows.iter().find(|r| r.what == what).unwrap();
        println!("perf {:>5} ns/packet  pass: {what}", timed(r));
    }
    for row in rows.iter().filter(|r| r.what.starts_with("ipv4: ") || r.what.starts_with("ipv6: ")) {
        if matches!(row.want, Want::Answer(..)) {
            println!("perf {:>5} ns/packet  {}", timed(row), row.what);
        }
    }
}

/// Bodies the kernel leaves to userspace: larger than the largest size class (reachable when
/// our EDNS payload exceeds it), and more fixups than stored when delta > 0. Both are still
/// answered in the kernel when no body byte or no fixup is needed.
#[test]
fn userspace_only_bodies() {
    require_root("userspace_only_bodies");
    let cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap()],
        edns_payload: 4096,
        seed: Some(3),
        capacity: xdns_bpf::runtime::Capacity { nodes: 64, answers: 64, bodies_m: 64, bodies_l: 64, table_vals: 0, table_bytes: 0 },
        resolver: None,
        guard: None,
        kit: None,
    };
    let mut prog = xdns_bpf::runtime::XdpProgram::load(&cfg).unwrap();
    let mut data = zone();
    // 40 MX records under the wildcard: each exchange name points into the base (a fixup).
    let base = wire("wild.example.com");
    let mut w = BodyWriter::new(&base).unwrap();
    w.set_aa(true);
    for i in 0..40u16 {
        let mut mx = i.to_be_bytes().to_vec();
        mx.extend(wire(&format!("m{i}.wild.example.com")));
        w.write_rr(&base, true, MX, 60, &mx).unwrap();
    }
    let many = w.finish();
    assert!(many.fixups.len() > 32, "{} fixups", many.fixups.len());
    data.answers.push(AnswerEntry { base: base.clone(), kind: Kind::Wildcard(MX), body: many.clone() });
    data.answers.push(AnswerEntry { base: wire("many.example.com"), kind: Kind::Type(MX), body: Body { base_len: 18, ..many } });
    data.nodes.push(NodeEntry { name: wire("many.example.com"), apex: wire("example.com"), cut: None, wildcard: false });
    prog.install(&data).unwrap();
    let outcome = |f: &[u8]| {
        let (act, _, moved) = verdict(&prog, f);
        (act, moved.join(","))
    };
    let big = Opt::new(4096, false);
    let huge = frame(&Net::v4(), &query(&wire("huge.example.com"), TXT, big.clone()));
    assert_eq!(outcome(&huge), (2, "pass_body_large".into()));
    let huge_tc = frame(&Net::v4(), &query(&wire("huge.example.com"), TXT, None));
    assert_eq!(outcome(&huge_tc), (3, "answered".into()), "TC=1 needs no body bytes");
    let wild = frame(&Net::v4(), &query(&wire("x.wild.example.com"), MX, big.clone()));
    assert_eq!(outcome(&wild), (2, "pass_fixups".into()));
    let exact = frame(&Net::v4(), &query(&wire("many.example.com"), MX, big));
    assert_eq!(outcome(&exact), (3, "answered".into()), "delta 0: fixups unused");
}

/// The program looks a node or a `Type(qtype)` answer up only when its presence-filter bit is
/// set: with the active generation's half emptied, names that exist pass as under no zone
/// (the fast path and the encloser walk both skipped them); the next install writes a full
/// filter into the other half and they answer again.
#[test]
fn presence_filter_is_consulted() {
    require_root("presence_filter_is_consulted");
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let ask = |prog: &xdns_bpf::runtime::XdpProgram, name: &str, qtype: u16| {
        let (act, _, moved) = verdict(prog, &frame(&Net::v4(), &query(&wire(name), qtype, None)));
        (act, moved.join(","))
    };
    let asks = [("www.example.com", A), ("nx.example.com", A), ("x.wild.example.com", A)];
    for (name, qtype) in asks {
        assert_eq!(ask(&prog, name, qtype), (3, "answered".into()), "{name}");
    }
    let gen = prog.generation();
    prog.put_filter(gen, &xdns_bpf::maps::Filter::new(prog.filter_words())).unwrap();
    for (name, qtype) in asks {
        assert_eq!(ask(&prog, name, qtype), (2, "pass_no_zone".into()), "{name}: filter empty");
    }
    prog.install(&zone()).unwrap();
    assert_ne!((prog.generation() ^ gen) & 1, 0, "generations alternate halves");
    for (name, qtype) in asks {
        assert_eq!(ask(&prog, name, qtype), (3, "answered".into()), "{name} after a reload");
    }
}

/// Answers come from the answer table (xdns_abi.h), and an answer placed there has no copy
/// in the `xdns_answers` hash map: after an install the hash map is empty and every kind of
/// answer is sent, byte for byte; with every bucket marked spilled the program asks the hash
/// maps, which hold none of them, nor the nodes, which are in the table too (pass: no zone).
/// Answers and nodes left out of a full table are in the hash maps only, and come from there
/// (an answer copied to the CPU's spill value) byte for byte the same. With the table's index
/// emptied and nothing marked spilled, the program believes the empty table and passes.
#[test]
fn answer_table_is_consulted() {
    require_root("answer_table_is_consulted");
    let asks = [
        ("www.example.com", A),
        ("WwW.ExAmPlE.cOm", AAAA),
        ("mx.www.example.com", MX),
        ("www.example.com", MX),
        ("nx.example.com", A),
        ("a.nx.example.com", A),
        ("x.wild.example.com", A),
        ("y.x.wild.example.com", MX),
        ("host.sub.example.com", A),
        ("sub.example.com", A),
    ];
    let frames: Vec<Vec<u8>> = asks.iter().map(|(n, t)| frame(&Net::v4(), &query(&wire(n), *t, None))).collect();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let want: Vec<_> = frames.iter().map(|f| verdict(&prog, f)).collect();
    assert!(want.iter().all(|(act, _, moved)| *act == 3 && moved == &["answered"]), "{want:?}");
    assert_eq!(prog.table_counts(), (zone().answers.len(), 0), "every answer in the table");
    assert_eq!(prog.clear_answer_map().unwrap(), 0, "no hash-map copy of an answer in the table");

    // A table of one page of records (its smallest), filled by 1000 other answers written
    // first: the zone's answers are left out, in the hash map only.
    let mut padded = KernelData::default();
    let apex = wire("example.com");
    for i in 0..1000 {
        let name = wire(&format!("pad{i}.example.com"));
        let mut w = BodyWriter::new(&name).unwrap();
        w.set_aa(true);
        w.write_rr(&name, true, A, 300, &[198, 18, (i >> 8) as u8, i as u8]).unwrap();
        padded.nodes.push(NodeEntry { name: name.clone(), apex: apex.clone(), cut: None, wildcard: false });
        padded.answers.push(AnswerEntry { base: name, kind: Kind::Type(A), body: w.finish() });
    }
    let z = zone();
    padded.nodes.extend(z.nodes);
    padded.answers.extend(z.answers);
    let cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap(), "[2001:db8::1]:53".parse().unwrap()],
        edns_payload: OUR_PAYLOAD,
        seed: Some(0x5eed_0123_4567_89ab),
        capacity: xdns_bpf::runtime::Capacity { nodes: 4096, answers: 4096, bodies_m: 4096, bodies_l: 1024, table_vals: 4096, table_bytes: 1 },
        resolver: None,
        guard: None,
        kit: None,
    };
    let mut small = xdns_bpf::runtime::XdpProgram::load(&cfg).expect("load (verifier)");
    small.install(&padded).unwrap();
    let (in_table, left_out) = small.table_counts();
    assert_eq!(in_table + left_out, padded.answers.len());
    assert!(in_table > 500 && in_table < 1000, "the page holds some of the padding only: {in_table}");
    assert_eq!(small.map_entries().1, left_out, "the hash map holds the answers left out, no others");
    // the nodes come after the answers: no room is left for any
    assert_eq!(small.node_counts(), (0, padded.nodes.len()), "every node in xdns_nodes");
    assert_eq!(small.map_entries().0, padded.nodes.len());
    for (i, f) in frames.iter().enumerate() {
        assert_eq!(verdict(&small, f), want[i], "{:?} from the hash map", asks[i]);
    }
    small.clear_answer_map().unwrap();
    for (i, f) in frames.iter().enumerate() {
        let (act, _, moved) = verdict(&small, f);
        assert_eq!((act, moved.join(",")), (2, "pass_no_body".into()), "{:?} was in the hash map only", asks[i]);
    }
    drop(small);

    let gen = prog.generation();
    let (buckets, _) = prog.table_shape();
    let empty = vec![xdns_bpf::types::xdns_bucket::default(); buckets];
    let mut spilled = empty.clone();
    spilled.iter_mut().for_each(|b| b.e[0].idx = xdns_bpf::hash::TABLE_SPILLED);
    prog.put_table_index(gen, &spilled).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let (act, _, moved) = verdict(&prog, f);
        assert_eq!((act, moved.join(",")), (2, "pass_no_zone".into()), "{:?}: spilled, not in the hash maps", asks[i]);
    }
    prog.put_table_index(gen, &empty).unwrap();
    for (i, f) in frames.iter().enumerate() {
        let (act, _, moved) = verdict(&prog, f);
        assert_eq!((act, moved.join(",")), (2, "pass_no_zone".into()), "{:?}: an empty table, nothing spilled", asks[i]);
    }
}

/// Presence-filter false positives never change an answer: bits set for a node that is not
/// an apex (flagged as one), for a name that does not exist (flagged as an apex), and for a
/// wildcard parent's absent child leave every reply byte for byte as it was; the direct
/// guesses miss or fail their length check and the walk looks the nodes up.
#[test]
fn presence_filter_false_positives_fall_back() {
    use xdns_bpf::hash::{name_hash, FILTER_APEX_NX, FILTER_CUT, FILTER_NODE, FILTER_WILDCARD};
    require_root("presence_filter_false_positives_fall_back");
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let asks = [
        ("nx.www.example.com", A),
        ("a.nx.example.com", A),
        ("x.wild.example.com", A),
        ("y.x.wild.example.com", MX),
        ("mx.www.example.com", MX),
        ("host.sub.example.com", A),
        ("sub.example.com", A),
    ];
    let frames: Vec<Vec<u8>> = asks.iter().map(|(n, t)| frame(&Net::v4(), &query(&wire(n), *t, None))).collect();
    let before: Vec<_> = frames.iter().map(|f| verdict(&prog, f)).collect();
    assert!(before.iter().all(|(act, _, moved)| *act == 3 && moved == &["answered"]), "{before:?}");
    let gen = prog.generation();
    let mut filter = prog.filter(gen).unwrap();
    let hash = |n: &str| name_hash(prog.seed(), &wire(n));
    filter.insert(hash("www.example.com"), FILTER_APEX_NX);
    filter.insert(hash("nx.example.com"), FILTER_NODE);
    filter.insert(hash("nx.example.com"), FILTER_APEX_NX);
    filter.insert(hash("x.wild.example.com"), FILTER_NODE);
    filter.insert(hash("x.wild.example.com"), FILTER_WILDCARD);
    // www has its own Other (NODATA) body: flagged as a cut, its AA=1 must send it back
    filter.insert(hash("www.example.com"), FILTER_CUT);
    filter.insert(hash("mx.www.example.com"), FILTER_NODE);
    filter.insert(hash("mx.www.example.com"), FILTER_CUT);
    prog.put_filter(gen, &filter).unwrap();
    let after: Vec<_> = frames.iter().map(|f| verdict(&prog, f)).collect();
    for ((ask, b), a) in asks.iter().zip(&before).zip(&after) {
        assert_eq!(a, b, "{ask:?}: a false positive changed the reply");
    }
}

/// A signed zone's bodies (`Body::dnssec`): DO=0 queries get them; DO=1 queries get the DO
/// body of the same key where one was compiled (`TypeDo`, `OtherDo`: here alias's A and the
/// cut's referral), else pass to userspace as `pass_dnssec` (NXDOMAIN and wildcards, whose
/// proofs depend on the name). A signed zone's answers are never memorised, so the second
/// round answers alike. An unsigned body answers DO=1 in the kernel.
#[test]
fn signed_zone_bodies_pass_with_do() {
    require_root("signed_zone_bodies_pass_with_do");
    let mut prog = load();
    let mut data = zone();
    for a in data.answers.iter_mut().filter(|a| a.base != wire("www.example.com")) {
        a.body.dnssec = true;
    }
    // DO bodies: alias A (an extra TXT record stands for its RRSIGs) and the referral at sub.
    let mut w = BodyWriter::new(&wire("alias.example.com")).unwrap();
    w.set_aa(true);
    w.write_rr(&wire("alias.example.com"), true, A, 300, &[192, 0, 2, 9]).unwrap();
    w.write_rr(&wire("alias.example.com"), true, TXT, 300, b"\x03sig").unwrap();
    let alias_do = w.finish();
    data.answers.push(AnswerEntry { base: wire("alias.example.com"), kind: Kind::TypeDo(A), body: alias_do.clone() });
    let mut sub_do = data.answers.iter().find(|a| a.base == wire("sub.example.com") && a.kind == Kind::Other).unwrap().body.clone();
    sub_do.dnssec = false;
    data.answers.push(AnswerEntry { base: wire("sub.example.com"), kind: Kind::OtherDo, body: sub_do });
    prog.install(&data).unwrap();
    let ask = |name: &str, qtype: u16, opt: Option<Opt>| {
        let (act, out, moved) = verdict(&prog, &frame(&Net::v4(), &query(&wire(name), qtype, opt)));
        (act, moved.join(","), out)
    };
    let cases: &[(&str, u16, Option<Opt>, (u32, &str))] = &[
        ("alias.example.com", A, None, (3, "answered")),
        ("alias.example.com", A, Opt::new(1232, false), (3, "answered")),
        ("alias.example.com", A, Opt::new(1232, true), (3, "answered")),
        ("nope.example.com", A, Opt::new(1232, true), (2, "pass_dnssec")),
        ("a.wild.example.com", A, Opt::new(1232, true), (2, "pass_dnssec")),
        ("host.sub.example.com", A, Opt::new(1232, true), (3, "answered")),
        ("Example.com", TXT, Opt::new(1232, true), (2, "pass_dnssec")),
        ("nope.example.com", A, Opt::new(1232, false), (3, "answered")),
        // the unsigned body of www: DO=1 stays in the kernel
        ("www.example.com", A, Opt::new(1232, true), (3, "answered")),
    ];
    for round in 0..2 {
        // the second round: no memo entry of the first may change a verdict
        for (name, t, opt, want) in cases {
            let (act, v, _) = ask(name, *t, opt.clone());
            assert_eq!((act, v), (want.0, want.1.to_string()), "round {round}: {name} {t} {opt:?}");
        }
    }
    // The DO=1 answer is the DO body, the DO=0 answer the plain one, asked in turn.
    for _ in 0..2 {
        let q1 = query(&wire("alias.example.com"), A, Opt::new(1232, true));
        let (_, _, out1) = ask("alias.example.com", A, Opt::new(1232, true));
        assert_eq!(dns_of(&out1), expected_for(&q1, &alias_do), "DO=1: the DO body");
        let (_, _, out0) = ask("alias.example.com", A, Opt::new(1232, false));
        let plain = &data.answers.iter().find(|a| a.base == wire("alias.example.com") && a.kind == Kind::Type(A)).unwrap().body;
        let q0 = query(&wire("alias.example.com"), A, Opt::new(1232, false));
        assert_eq!(dns_of(&out0), expected_for(&q0, plain), "DO=0: the plain body");
    }
    // What a signed zone's answers cost the kernel (no memo), against an unsigned one's.
    for (what, name, d) in [
        ("unsigned body, DO=0, answered (memo)", "www.example.com", false),
        ("signed zone, DO=0, answered", "alias.example.com", false),
        ("signed zone, DO=1, DO body answered", "alias.example.com", true),
        ("signed zone, DO=1 NXDOMAIN, pass_dnssec", "nope.example.com", true),
    ] {
        let f = frame(&Net::v4(), &query(&wire(name), A, Opt::new(1232, d)));
        println!("perf {:>5} ns/packet  {what}", prog.bench(&f, 2000).unwrap());
    }
}

fn expected_for(dns_query: &[u8], body: &Body) -> Vec<u8> {
    let q = Query::parse(dns_query).expect("query parses");
    let mut out = Vec::new();
    assemble(&q, body, &Limits::udp(q.edns.as_ref(), OUR_PAYLOAD), &mut out).expect("assemble");
    out
}

/// Class M and L bodies changed in place (an IXFR of a signed zone changes its DO=1 NODATA
/// bodies, which the SOA's RRSIG makes larger than class S): each change writes the new bytes
/// under the other version of the body's key (`body_ver`, bpf/xdns_abi.h) before the answer,
/// and the old bytes are deleted after. The kernel answers the new bytes after every change,
/// over IPv4 and IPv6, back and forth between the versions; without EDNS the answer is TC=1.
#[test]
fn larger_bodies_change_in_place() {
    require_root("larger_bodies_change_in_place");
    let mut prog = load();
    let data = zone();
    prog.install(&data).unwrap();
    let body_of = |base: &str| data.answers.iter().find(|a| a.base == wire(base) && a.kind == Kind::Type(TXT)).unwrap().body.clone();
    let (mut mid, mut big) = (body_of("mid.example.com"), body_of("big.example.com"));
    for (round, each) in [190usize, 180, 170, 199].into_iter().enumerate() {
        let (new_mid, new_big) = (txt_body("mid.example.com", 2, each), txt_body("big.example.com", 3, each));
        assert!(new_mid.bytes.len() > 128 && new_mid.bytes.len() <= 512 && new_big.bytes.len() > 512, "class M and L");
        let change = |base: &str, old: &Body, new: &Body| xdns_bpf::delta::AnswerChange {
            base: wire(base),
            kind: Kind::Type(TXT),
            old: Some(old.clone()),
            new: Some(new.clone()),
        };
        let delta = xdns_bpf::delta::Delta {
            answers: vec![change("mid.example.com", &mid, &new_mid), change("big.example.com", &big, &new_big)],
            ..Default::default()
        };
        prog.apply(&delta).unwrap_or_else(|e| panic!("round {round}: {e:#}"));
        (mid, big) = (new_mid, new_big);
        for (net_name, net) in [("ipv4", Net::v4()), ("ipv6", Net::v6())] {
            for (name, body) in [("mid.example.com", &mid), ("big.example.com", &big)] {
                let q = query(&wire(name), TXT, Opt::new(1232, false));
                let (act, out, moved) = verdict(&prog, &frame(&net, &q));
                assert_eq!((act, moved.join(",")), (3, "answered".to_string()), "round {round} {net_name} {name}");
                assert_eq!(dns_of(&out), expected_for(&q, body), "round {round} {net_name} {name}: the new bytes");
                let q = query(&wire(name), TXT, None);
                let (act, out, moved) = verdict(&prog, &frame(&net, &q));
                assert_eq!((act, moved.join(",")), (3, "answered".to_string()), "round {round} {net_name} {name} TC");
                assert_eq!(dns_of(&out), expected_for(&q, body), "round {round} {net_name} {name}: TC=1");
            }
        }
    }
}

/// Class M answers placed in the answer table carry their bytes and fixups inline in their
/// record (`XDNS_BODY_INLINE`, bpf/xdns_abi.h), at their length: after an install
/// `xdns_bodies_m` is empty, and every class M answer is sent byte for byte as userspace
/// assembles it, over IPv4 and IPv6: delta 0, delta > 0 with its fixups shifted, TC=1 when
/// it does not fit (no EDNS), and one whose record starts in the last four bytes of a page,
/// so that its bytes and fixups are read from the page's slack. Changed in place, the answer
/// leaves the table for the hash maps under its version (new bytes answered) while its old
/// record stays as it was: pointed at again (what a packet that found it before the change
/// still holds), it answers the old bytes. A reload (the other half) answers them all again
/// from the table.
#[test]
fn inline_m_bodies() {
    use xdns_bpf::data::{answer_key, encode_body, record_len, PAGE};
    require_root("inline_m_bodies");
    let mut prog = load();
    let apex = wire("example.com");
    let node = |n: &str, cut: bool| NodeEntry { name: wire(n), apex: apex.clone(), cut: cut.then(|| wire(n)), wildcard: false };
    let ans = |n: &str, kind: Kind, body: Body| AnswerEntry { base: wire(n), kind, body };
    let mut data = KernelData { nodes: vec![node("example.com", false)], answers: vec![ans("example.com", Kind::NxDomain, negative("example.com", 3))] };
    // class S padding first, so that the edge referral's record starts at the page's last
    // four bytes: placed as the loader places (the same keys, buckets and record lengths)
    let (buckets, bytes) = prog.table_shape();
    let (seed, gen) = (prog.seed(), prog.generation() + 1);
    let mut model = xdns_bpf::maps::Table::new(buckets, bytes);
    let len_of = |b: &Body| {
        let (a, v) = encode_body(b);
        record_len(&a, &v)
    };
    let pad_body = |name: &str, n: usize| {
        let mut w = BodyWriter::new(&wire(name)).unwrap();
        w.set_aa(true);
        let mut t = vec![n as u8];
        t.extend(std::iter::repeat_n(b'p', n));
        w.write_rr(&wire(name), true, TXT, 300, &t).unwrap();
        w.finish()
    };
    let place = |model: &mut xdns_bpf::maps::Table, base: &str, kind: Kind, b: &Body| {
        let k = answer_key(seed, gen, &wire(base), kind);
        model.place(&k, len_of(b))
    };
    for a in &data.answers {
        let k = answer_key(seed, gen, &a.base, a.kind);
        model.place(&k, len_of(&a.body)).expect("placed");
    }
    let lens: Vec<usize> = (0..=110).map(|n| len_of(&pad_body("pad0.example.com", n))).collect();
    let (min, max) = (lens[0], lens[110]);
    let target = PAGE - 4;
    for i in 0.. {
        let rem = target - model.bytes_used();
        if rem == 0 {
            break;
        }
        let want = if rem >= max + min { max } else if lens.contains(&rem) { rem } else { rem - min };
        let n = lens.iter().position(|&l| l == want).unwrap_or_else(|| panic!("a pad of {want} bytes ({rem} left)"));
        let name = format!("pad{i}.example.com");
        let b = pad_body(&name, n);
        if place(&mut model, &name, Kind::Type(TXT), &b).is_some() {
            data.nodes.push(node(&name, false));
            data.answers.push(ans(&name, Kind::Type(TXT), b));
        }
    }
    let edge = referral("edge.example.com", 100);
    let mtxt = txt_body("mtxt.example.com", 2, 150);
    let mbig = txt_body("mbig.example.com", 2, 240);
    let mcut = referral("mcut.example.com", 60);
    for (n, b) in [("edge", &edge), ("mtxt", &mtxt), ("mbig", &mbig), ("mcut", &mcut)] {
        assert!(b.bytes.len() > 128 && b.bytes.len() <= 512, "{n}: class M ({} bytes)", b.bytes.len());
    }
    assert!(!edge.fixups.is_empty() && !mcut.fixups.is_empty(), "referrals have fixups");
    let m_answers = [("edge.example.com", Kind::Other, &edge), ("mtxt.example.com", Kind::Type(TXT), &mtxt), ("mbig.example.com", Kind::Type(TXT), &mbig), ("mcut.example.com", Kind::Other, &mcut)];
    for (i, (base, kind, b)) in m_answers.iter().enumerate() {
        let at = place(&mut model, base, *kind, b).expect("placed");
        if i == 0 {
            assert_eq!(4 * at as usize, PAGE - 4, "the edge record starts in the page's last four bytes");
        }
        data.answers.push(ans(base, *kind, (*b).clone()));
    }
    data.nodes.extend([node("edge.example.com", true), node("mtxt.example.com", false), node("mbig.example.com", false), node("mcut.example.com", true)]);
    prog.install(&data).unwrap();
    assert_eq!(prog.generation(), gen);
    assert_eq!(prog.table_counts(), (data.answers.len(), 0), "every answer in the table");
    let (_, answers, bodies) = prog.map_entries();
    assert_eq!((answers, bodies), (0, 0), "no hash-map answer, no class M bytes in xdns_bodies_m");
    // (question, type, EDNS, body, TC expected)
    let asks = |edge: &Body| -> Vec<(&'static str, u16, Option<Opt>, Body, bool)> {
        vec![
            ("edge.example.com", NS, Opt::new(1232, true), edge.clone(), false),
            ("a.b.edge.example.com", A, Opt::new(1232, false), edge.clone(), false),
            ("mtxt.example.com", TXT, None, mtxt.clone(), false),
            ("MTXT.example.com", TXT, Opt::new(4096, true), mtxt.clone(), false),
            ("mbig.example.com", TXT, Opt::new(1232, false), mbig.clone(), false),
            ("mbig.example.com", TXT, None, mbig.clone(), true),
            ("host.mcut.example.com", A, None, mcut.clone(), false),
            ("x.y.host.mcut.example.com", AAAA, Opt::new(1232, false), mcut.clone(), false),
        ]
    };
    let check = |prog: &xdns_bpf::runtime::XdpProgram, what: &str, edge: &Body| {
        for (net_name, net) in [("ipv4", Net::v4()), ("ipv6", Net::v6())] {
            for (name, t, opt, body, tc) in asks(edge) {
                let q = query(&wire(name), t, opt);
                let (act, out, moved) = verdict(prog, &frame(&net, &q));
                assert_eq!((act, moved.join(",")), (3, "answered".to_string()), "{what} {net_name} {name}");
                assert!(checksums_ok(&out), "{what} {net_name} {name}: checksums");
                assert_eq!(out, frame(&net.reply(), &expected_for(&q, &body)), "{what} {net_name} {name}: the bytes");
                assert_eq!(dns_of(&out)[2] & 2 != 0, tc, "{what} {net_name} {name}: TC");
            }
        }
    };
    check(&prog, "installed", &edge);

    // the edge referral changed in place: to the hash maps, under version 1
    let new_edge = referral("edge.example.com", 90);
    let delta = xdns_bpf::delta::Delta {
        answers: vec![xdns_bpf::delta::AnswerChange { base: wire("edge.example.com"), kind: Kind::Other, old: Some(edge.clone()), new: Some(new_edge.clone()) }],
        ..Default::default()
    };
    prog.apply(&delta).unwrap();
    assert_eq!(prog.table_counts(), (data.answers.len() - 1, 1));
    let (_, answers, bodies) = prog.map_entries();
    assert_eq!((answers, bodies), (1, 1), "the changed answer and its class M bytes in the hash maps");
    check(&prog, "changed in place", &new_edge);
    // the old record is untouched: the index as installed finds it again, old bytes
    prog.put_table_index(gen, model.buckets()).unwrap();
    check(&prog, "old record", &edge);

    // a reload: the other half, every class M answer inline again
    prog.install(&data).unwrap();
    assert_eq!(prog.generation(), gen + 1);
    assert_eq!(prog.table_counts(), (data.answers.len(), 0));
    let (_, answers, bodies) = prog.map_entries();
    assert_eq!((answers, bodies), (0, 0), "after the reload: no class M bytes outside the table");
    check(&prog, "reloaded", &edge);
}

/// A signed zone `s.test.` (NSEC), loaded from text: the kernel data of the full compile,
/// and the zone set (for userspace's answers). `soa_sigs` RRSIGs over the SOA (255-byte
/// signatures): one makes the apex part class M, two class L.
fn signed_zone(soa_sigs: usize) -> (KernelData, xdns_zone::ZoneSet) {
    let sig = |t: &str, l: u8, k: usize| format!("RRSIG {t} 8 {l} 3600 20300101000000 20200101000000 {k} s.test. {}", "A".repeat(340));
    let mut text = String::from("$TTL 3600\n@ SOA ns1 h 1 7200 3600 1209600 300\n@ NS ns1\n@ DNSKEY 257 3 8 AAAA\n");
    for k in 0..soa_sigs {
        text += &format!("@ {}\n", sig("SOA", 2, k + 1));
    }
    text += &format!("@ {}\n@ {}\n@ NSEC ns1 NS SOA RRSIG NSEC DNSKEY\n@ {}\n", sig("NS", 2, 1), sig("DNSKEY", 2, 1), sig("NSEC", 2, 1));
    for (n, next) in [("ns1", "www"), ("www", "s.test.")] {
        text += &format!("{n} A 198.18.0.1\n{n} {}\n{n} NSEC {next} A RRSIG NSEC\n{n} {}\n", sig("A", 3, 1), sig("NSEC", 3, 1));
    }
    zone_from_text("s.test.", &format!("signed-{soa_sigs}"), &text)
}

/// The query `q` over `net` is answered by the kernel with userspace's answer of `body`, byte
/// for byte (TC=1 as `tc`), in a frame with valid checksums.
fn answered_as(prog: &xdns_bpf::runtime::XdpProgram, net: &Net, q: &[u8], body: &Body, tc: bool, what: &str) {
    let (act, out, moved) = verdict(prog, &frame(net, q));
    assert_eq!((act, moved.join(",")), (3, "answered".to_string()), "{what}");
    let want = expected_for(q, body);
    assert_eq!(want[2] & 0x02 != 0, tc, "{what}: TC as userspace");
    assert_eq!(dns_of(&out), &want[..], "{what}: userspace's bytes");
    assert_eq!(out, frame(&net.reply(), &want), "{what}: the frame");
    assert!(checksums_ok(&out), "{what}: checksums");
}

/// The zone `origin` of `text`, loaded from a file (in a directory named by `tag`): the kernel
/// data of the full compile, and the zone set (for userspace's answers).
fn zone_from_text(origin: &str, tag: &str, text: &str) -> (KernelData, xdns_zone::ZoneSet) {
    let dir = std::env::temp_dir().join(format!("xdns-fixtures-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("zone");
    std::fs::write(&f, text).unwrap();
    let z = xdns_zone::load_zone(&xdns_zone::ZoneSource { name: origin.into(), file: f }, None).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    let mut set = xdns_zone::ZoneSet::default();
    set.zones.insert(z.apex.clone(), std::sync::Arc::new(z));
    (xdns_bpf::data::compile_kernel_data(&set), set)
}

/// A signed zone's DO=1 NODATA written by the kernel from two stored parts (issue 28): the
/// apex's SOA + RRSIG(SOA) part (`Kind::ApexDo`, class M or L), rebased by the question's extra
/// length, then the name's own NSEC + RRSIG part. Over IPv4 and IPv6, at the apex (delta 0)
/// and below it (delta > 0, the question in capitals too), the frame is userspace's answer
/// (`compile_dnssec`, assembled) byte for byte with valid checksums; with a 512-byte EDNS
/// payload the whole does not fit: TC=1, no records. DO=0 gets the apex's NODATA rebased (the
/// node shares it). Without the apex part the query passes intact (`pass_no_body`).
#[test]
fn signed_nodata_from_two_parts() {
    require_root("signed_nodata_from_two_parts");
    use xdns_zone::lookup::{BodyKey, BodyKind};
    let mut prog = load();
    for soa_sigs in [1, 2] {
        let (data, zones) = signed_zone(soa_sigs);
        let z = zones.zones.values().next().unwrap();
        let apex_part = &data.answers.iter().find(|a| a.kind == Kind::ApexDo).expect("the apex part").body;
        let own = &data.answers.iter().find(|a| a.kind == Kind::OtherDo && a.base == wire("www.s.test")).unwrap().body;
        assert!(own.after_apex && own.bytes.len() > 128, "www's own part, class M");
        assert_eq!(apex_part.bytes.len() > 512, soa_sigs == 2, "the apex part: class M, or L");
        prog.install(&data).unwrap();
        for net in [Net::v4(), Net::v6()] {
            for (name, payload, tc) in [("www.s.test", 1232, false), ("WWW.s.test", 1232, false), ("s.test", 1232, false), ("www.s.test", 512, true)] {
                let what = format!("{} SOA RRSIGs, {} {name} payload {payload}", soa_sigs, if net.v6 { "IPv6" } else { "IPv4" });
                let q = query(&wire(name), TXT, Opt::new(payload, true));
                let base = wire(name).to_ascii_lowercase();
                let want_body = xdns_zone::compile::compile_dnssec(z, &BodyKey { base: base.clone().into(), kind: BodyKind::Other }, &base);
                answered_as(&prog, &net, &q, &want_body, tc, &what);
            }
            // DO=0: the apex's NODATA, rebased
            let q = query(&wire("www.s.test"), TXT, Opt::new(1232, false));
            let base = wire("www.s.test");
            let plain = xdns_zone::compile::compile(z, &BodyKey { base: base.into(), kind: BodyKind::Other });
            answered_as(&prog, &net, &q, &plain, false, "DO=0: the apex's NODATA");
        }
        // the apex part missing: the DO=1 NODATA passes intact, DO=1 positive answers do not
        apex_part_missing(&mut prog, &data, Kind::ApexDo, ("www.s.test", TXT), ("www.s.test", A));
    }
}

/// `data` installed without its apex part of `kind`: `split`'s DO=1 question passes intact
/// (`pass_no_body`), `whole`'s is still answered.
fn apex_part_missing(prog: &mut xdns_bpf::runtime::XdpProgram, data: &KernelData, kind: Kind, split: (&str, u16), whole: (&str, u16)) {
    let mut without = data.clone();
    without.answers.retain(|a| a.kind != kind);
    prog.install(&without).unwrap();
    let f = frame(&Net::v4(), &query(&wire(split.0), split.1, Opt::new(1232, true)));
    let (act, out, moved) = verdict(prog, &f);
    assert_eq!((act, moved.join(","), out == f), (2, "pass_no_body".to_string(), true), "{split:?}: no apex part");
    let (act, _, moved) = verdict(prog, &frame(&Net::v4(), &query(&wire(whole.0), whole.1, Opt::new(1232, true))));
    assert_eq!((act, moved.join(",")), (3, "answered".to_string()), "{whole:?} DO=1");
}

/// An NSEC3 zone with opt-out, `o.test.`, loaded from text: an insecure delegation `d`
/// (opt-out: no NSEC3 of its own, glue), another below an empty non-terminal (`a.e`, `e`
/// without an NSEC3 too), a secure one `s` (DS), `www`; the chain hashed with the zone's
/// parameters, every RRset "signed" (64-byte signatures).
fn optout_zone() -> (KernelData, xdns_zone::ZoneSet) {
    use xdns_zone::dnssec::{nsec3_label, Nsec3Params};
    let sig = |t: &str, l: u8| format!("RRSIG {t} 13 {l} 3600 20300101000000 20200101000000 7 o.test. {}", "A".repeat(88));
    let p = Nsec3Params { algorithm: 1, iterations: 0, salt: Vec::new() };
    // (name, types): the names that have an NSEC3 (opt-out: not the insecure delegation `d`)
    let chained = [("o.test", "SOA NS DNSKEY NSEC3PARAM RRSIG"), ("www.o.test", "A RRSIG"), ("s.o.test", "NS DS RRSIG")];
    let mut hashed: Vec<(String, &str)> = chained
        .iter()
        .map(|(n, t)| (String::from_utf8(nsec3_label(&wire(n), &p).unwrap().into_vec()).unwrap(), *t))
        .collect();
    hashed.sort();
    let mut text = String::from("$TTL 3600\n@ SOA ns1.o.test. h 1 7200 3600 1209600 300\n@ NS ns1.o.test.\n");
    text += &format!("@ DNSKEY 257 3 13 AAAA\n@ NSEC3PARAM 1 0 0 -\n@ {}\n@ {}\n@ {}\n@ {}\n", sig("SOA", 2), sig("NS", 2), sig("DNSKEY", 2), sig("NSEC3PARAM", 2));
    text += &format!("www A 198.18.0.1\nwww {}\n", sig("A", 3));
    text += "d NS ns.d\nns.d A 198.18.0.2\na.e NS ns.other.\n";
    text += &format!("s NS ns.other.\ns DS 7 13 2 {}\ns {}\n", "AB".repeat(32), sig("DS", 3));
    for (i, (h, types)) in hashed.iter().enumerate() {
        let next = &hashed[(i + 1) % hashed.len()].0;
        text += &format!("{h} NSEC3 1 1 0 - {} {types}\n{h} {}\n", next.to_ascii_uppercase(), sig("NSEC3", 3));
    }
    zone_from_text("o.test.", "optout", &text)
}

/// The DO=1 DS NODATA of an insecure delegation in an NSEC3 zone with opt-out, written by
/// the kernel from two stored parts (issue 30): the apex's SOA + the apex's NSEC3 part
/// (`Kind::ApexProofDo`: SOA, RRSIG, the NSEC3 matching the apex, RRSIG), rebased, then the
/// delegation's own part (the opt-out NSEC3 covering it, RRSIG), found at the delegation's
/// node by the walk (no `Type(DS)` body at the cut: DO=0 is the apex's NODATA, rebased). Over
/// IPv4 and IPv6, the question in capitals too, the frame is userspace's answer byte for byte;
/// a 512-byte payload: TC=1 as userspace. The secure delegation's DS is answered as before.
/// Without the apex part the query passes intact (`pass_no_body`).
#[test]
fn optout_ds_nodata_from_two_parts() {
    require_root("optout_ds_nodata_from_two_parts");
    use xdns_zone::lookup::{BodyKey, BodyKind};
    let mut prog = load();
    let (data, zones) = optout_zone();
    let z = zones.zones.values().next().unwrap();
    let at = |base: &str, kind: Kind| data.answers.iter().find(|a| a.kind == kind && a.base == wire(base)).map(|a| &a.body);
    let apex_part = at("o.test", Kind::ApexProofDo).expect("the apex's SOA + NSEC3 part");
    assert_eq!((apex_part.nscount, apex_part.ancount), (4, 0), "SOA, RRSIG, the apex's NSEC3, RRSIG");
    let own = at("d.o.test", Kind::TypeDo(DS)).expect("d's DS NODATA, its own part");
    assert!(own.after_apex && own.apex_nsec3 && own.nscount == 2, "the covering NSEC3 and its RRSIG alone");
    assert!(at("d.o.test", Kind::Type(DS)).is_none(), "DO=0: the apex's NODATA, rebased");
    prog.install(&data).unwrap();
    for net in [Net::v4(), Net::v6()] {
        for (name, qtype, payload) in [("d.o.test", DS, 1232), ("D.O.test", DS, 1232), ("d.o.test", DS, 512), ("s.o.test", DS, 1232)] {
            let what = format!("{} {name} {qtype} payload {payload}", if net.v6 { "IPv6" } else { "IPv4" });
            let q = query(&wire(name), qtype, Opt::new(payload, true));
            let base = wire(name).to_ascii_lowercase();
            let want_body = xdns_zone::compile::compile_dnssec(z, &BodyKey { base: base.clone().into(), kind: BodyKind::Type(qtype) }, &base);
            answered_as(&prog, &net, &q, &want_body, payload == 512, &what);
        }
        // DO=0: the apex's NODATA, rebased
        let q = query(&wire("d.o.test"), DS, Opt::new(1232, false));
        let plain = xdns_zone::compile::compile(z, &BodyKey { base: wire("d.o.test").into(), kind: BodyKind::Type(DS) });
        answered_as(&prog, &net, &q, &plain, false, "DO=0: the apex's NODATA");
    }
    // the apex part missing: the DO=1 DS NODATA passes intact, the secure delegation's DS does not
    apex_part_missing(&mut prog, &data, Kind::ApexProofDo, ("d.o.test", DS), ("s.o.test", DS));
}

/// Every answer the kernel gives for the NSEC3 opt-out zone is userspace's, byte for byte:
/// each name (the apex, data, the delegations and names below them, the empty non-terminal,
/// an absent name) and type, DO=0 and DO=1, with a 1232- and a 512-byte payload and without
/// EDNS; what it passes is a DO=1 NXDOMAIN (`pass_dnssec`). The DS NODATA of both insecure
/// delegations and the empty non-terminal's NODATA (own parts after the apex's NSEC3 part)
/// are answered by the kernel.
#[test]
fn optout_zone_kernel_equals_userspace() {
    require_root("optout_zone_kernel_equals_userspace");
    use xdns_zone::{respond, Outcome, RespondConfig, Transport};
    let mut prog = load();
    let (data, zones) = optout_zone();
    for (base, kind) in [("d.o.test", Kind::TypeDo(DS)), ("a.e.o.test", Kind::TypeDo(DS)), ("e.o.test", Kind::OtherDo)] {
        let own = data.answers.iter().find(|a| a.kind == kind && a.base == wire(base)).map(|a| &a.body);
        assert!(own.is_some_and(|b| b.after_apex && b.apex_nsec3), "{base}: an own part after the apex's NSEC3 part");
    }
    prog.install(&data).unwrap();
    let names = ["o.test", "www.o.test", "d.o.test", "ns.d.o.test", "x.d.o.test", "s.o.test", "x.s.o.test", "e.o.test", "a.e.o.test", "nx.o.test"];
    let opts = [Opt::new(1232, true), Opt::new(512, true), Opt::new(1232, false), None];
    let (mut answered, mut passed) = (Vec::new(), Vec::new());
    for (i, name) in names.iter().enumerate() {
        for qt in [A, NS, DS, TXT, SOA] {
            for (j, opt) in opts.iter().enumerate() {
                let dns = query(&wire(name), qt, opt.clone());
                let net = if (i + j) % 2 == 0 { Net::v4() } else { Net::v6() };
                let f = frame(&net, &dns);
                let (act, out, moved) = verdict(&prog, &f);
                let what = format!("{name}/{qt} {opt:?}");
                let mut want = Vec::new();
                let cfg = RespondConfig { edns_payload: OUR_PAYLOAD };
                assert!(matches!(respond(&zones, &dns, Transport::Udp, &cfg, &mut want), Outcome::Answered { .. }), "{what}");
                match act {
                    3 => {
                        assert_eq!(dns_of(&out), &want[..], "{what}: kernel and userspace differ");
                        assert!(checksums_ok(&out), "{what}: checksums");
                        answered.push(format!("{name}/{qt}/{j}"));
                    }
                    _ => {
                        assert_eq!((act, out == f), (2, true), "{what}: passed intact");
                        assert_eq!(moved.join(","), "pass_dnssec", "{what}: only name-dependent proofs pass");
                        passed.push(format!("{name}/{qt}/{j}"));
                    }
                }
            }
        }
    }
    for must in ["d.o.test/43/0", "a.e.o.test/43/0", "e.o.test/16/0", "d.o.test/43/2"] {
        assert!(answered.iter().any(|a| a == must), "{must} answered by the kernel: {passed:?}");
    }
    assert!(passed.iter().all(|p| p.starts_with("nx.") && !p.ends_with("/2") && !p.ends_with("/3")), "{passed:?}");
}

/// The program with the fixtures' seed and listen addresses, and maps of capacity `c`.
fn load_sized(c: xdns_bpf::runtime::Capacity) -> xdns_bpf::runtime::XdpProgram {
    let cfg = xdns_bpf::runtime::LoadConfig {
        listen: vec!["198.18.0.1:53".parse().unwrap(), "[2001:db8::1]:53".parse().unwrap()],
        edns_payload: OUR_PAYLOAD,
        seed: Some(0x5eed_0123_4567_89ab),
        capacity: c,
        resolver: None,
        guard: None,
        kit: None,
    };
    xdns_bpf::runtime::XdpProgram::load(&cfg).expect("load (verifier)")
}

/// Nodes share the answer table (xdns_abi.h `XDNS_TABLE_NODE`); those that find no room (here:
/// the table's one page of records runs out, so the last nodes written, the zone's own, are
/// left out and their buckets spilled) are in `xdns_nodes` only, and the lookup
/// (`xdns_node_find`) finds them there: every question is answered byte for byte as by a
/// program whose table holds every node, whether its node is in the table or spilled (NODATA
/// at a name, below a cut, an empty non-terminal's NODATA, NXDOMAIN below a name).
#[test]
fn nodes_left_out_of_the_table_come_from_the_hash_map() {
    require_root("nodes_left_out_of_the_table_come_from_the_hash_map");
    let apex = wire("example.com");
    let z = zone();
    // 1500 empty non-terminals written before the zone's nodes: a page holds about 1300 node
    // records, after the zone's answers
    let mut data = KernelData { nodes: Vec::new(), answers: z.answers.clone() };
    for i in 0..1500 {
        data.nodes.push(NodeEntry { name: wire(&format!("pad{i}.example.com")), apex: apex.clone(), cut: None, wildcard: false });
    }
    data.nodes.extend(z.nodes.iter().cloned());
    // the reference: a sparse index (16 entries per key), where no bucket fills
    let mut full = load_sized(xdns_bpf::runtime::Capacity { table_vals: 1 << 16, ..xdns_bpf::runtime::Capacity::for_data(&data) });
    full.install(&data).unwrap();
    assert_eq!(full.node_counts(), (data.nodes.len(), 0), "every node in the large table");
    assert_eq!(full.map_entries().0, 0, "no node in xdns_nodes");
    let mut small = load_sized(xdns_bpf::runtime::Capacity { nodes: 4096, answers: 4096, bodies_m: 4096, bodies_l: 1024, table_vals: 4096, table_bytes: 1 });
    small.install(&data).unwrap();
    assert_eq!(small.table_counts(), (data.answers.len(), 0), "every answer in the small table");
    let (in_table, left_out) = small.node_counts();
    assert_eq!(in_table + left_out, data.nodes.len());
    assert!(in_table > 1000 && left_out > z.nodes.len(), "the zone's nodes are left out: {in_table} + {left_out}");
    assert_eq!(small.map_entries().0, left_out, "xdns_nodes holds the nodes left out, no others");
    let asks = [
        ("www.example.com", MX),
        ("WWW.example.com", SOA),
        ("ns.sub.example.com", A),
        ("x.ns.sub.example.com", A),
        ("sub.example.com", 43),
        ("big.example.com", MX),
        ("y.x.wild.example.com", MX),
        ("pad0.example.com", A),
        ("pad1499.example.com", AAAA),
        ("a.pad1499.example.com", A),
        ("nx.example.com", A),
    ];
    for (name, qtype) in asks {
        for (net_name, net) in [("ipv4", Net::v4()), ("ipv6", Net::v6())] {
            let f = frame(&net, &query(&wire(name), qtype, Opt::new(1232, false)));
            let want = verdict(&full, &f);
            assert_eq!((want.0, want.2.join(",")), (3, "answered".to_string()), "{net_name} {name} {qtype}: the large table answers");
            assert_eq!(verdict(&small, &f), want, "{net_name} {name} {qtype}: the same bytes with its node spilled");
        }
    }
    // and the spilled nodes are the hash map's: without it a left-out name is not found (its
    // apex's NXDOMAIN, where it exists: NODATA)
    assert!(small.clear_node_map().unwrap() > 0);
    let f = frame(&Net::v4(), &query(&wire("pad1499.example.com"), TXT, None));
    let rcode = |out: &[u8]| dns_of(out)[3] & 0xf;
    let (act, out, _) = verdict(&full, &f);
    assert_eq!((act, rcode(&out)), (3, 0), "NODATA from the table that holds the node");
    let (act, out, _) = verdict(&small, &f);
    assert_eq!((act, rcode(&out)), (3, 3), "pad1499's node was in xdns_nodes only");
}

/// In-place updates (`Loader::apply`) add nodes to `xdns_nodes` with their bucket spilled,
/// move a changed node there (bucket spilled, then its table entry emptied) and empty a removed
/// node's entry: after the change a new name's NODATA and NXDOMAIN below it are answered, a
/// changed node's NODATA is its own new body (no longer its apex's), and a removed name is
/// NXDOMAIN, each byte for byte.
#[test]
fn nodes_change_in_place() {
    require_root("nodes_change_in_place");
    use xdns_bpf::delta::{AnswerChange, Delta, NodeChange};
    let mut prog = load();
    let data = zone();
    prog.install(&data).unwrap();
    assert_eq!(prog.node_counts(), (data.nodes.len(), 0));
    let apex = wire("example.com");
    let node = |n: &str| NodeEntry { name: wire(n), apex: apex.clone(), cut: None, wildcard: false };
    // a NODATA body of big's own, unlike the apex's (a shorter negative TTL)
    let own_other = |base: &str| negative_ttl(base, 0, 60);
    let mid = data.answers.iter().find(|a| a.base == wire("mid.example.com")).unwrap().body.clone();
    let delta = Delta {
        nodes: vec![
            NodeChange { name: wire("new.example.com"), old: None, new: Some((node("new.example.com"), true)) },
            NodeChange { name: wire("big.example.com"), old: Some((node("big.example.com"), false)), new: Some((node("big.example.com"), true)) },
            NodeChange { name: wire("mid.example.com"), old: Some((node("mid.example.com"), false)), new: None },
        ],
        answers: vec![
            AnswerChange { base: wire("new.example.com"), kind: Kind::Type(A), old: None, new: Some(a_body("new.example.com", true)) },
            AnswerChange { base: wire("new.example.com"), kind: Kind::Other, old: None, new: Some(own_other("new.example.com")) },
            AnswerChange { base: wire("big.example.com"), kind: Kind::Other, old: None, new: Some(own_other("big.example.com")) },
            AnswerChange { base: wire("mid.example.com"), kind: Kind::Type(TXT), old: Some(mid), new: None },
        ],
        ..Default::default()
    };
    let q = |name: &str, qtype: u16| query(&wire(name), qtype, Opt::new(1232, false));
    let before = verdict(&prog, &frame(&Net::v4(), &q("big.example.com", MX)));
    prog.apply(&delta).unwrap();
    assert_eq!(prog.node_counts(), (data.nodes.len() - 2, 2), "the new and the changed node in xdns_nodes");
    assert_eq!(prog.map_entries().0, 2);
    let mut after = data.clone();
    after.answers.push(AnswerEntry { base: wire("new.example.com"), kind: Kind::Type(A), body: a_body("new.example.com", true) });
    after.answers.push(AnswerEntry { base: wire("new.example.com"), kind: Kind::Other, body: own_other("new.example.com") });
    after.answers.push(AnswerEntry { base: wire("big.example.com"), kind: Kind::Other, body: own_other("big.example.com") });
    let rows = [
        ("new.example.com", A, "new.example.com", Kind::Type(A)),
        ("new.example.com", MX, "new.example.com", Kind::Other),
        ("x.new.example.com", A, "example.com", Kind::NxDomain),
        ("big.example.com", MX, "big.example.com", Kind::Other),
        ("mid.example.com", TXT, "example.com", Kind::NxDomain),
        ("x.mid.example.com", TXT, "example.com", Kind::NxDomain),
        ("www.example.com", MX, "www.example.com", Kind::Other),
    ];
    for (name, qtype, base, kind) in rows {
        for (net_name, net) in [("ipv4", Net::v4()), ("ipv6", Net::v6())] {
            let dq = q(name, qtype);
            let (act, out, moved) = verdict(&prog, &frame(&net, &dq));
            assert_eq!((act, moved.join(",")), (3, "answered".to_string()), "{net_name} {name} {qtype}");
            assert_eq!(out, frame(&net.reply(), &expected_dns(&after, &dq, base, kind)), "{net_name} {name} {qtype}: the bytes");
        }
    }
    assert_ne!(verdict(&prog, &frame(&Net::v4(), &q("big.example.com", MX))).1, before.1, "big's NODATA changed");
}
