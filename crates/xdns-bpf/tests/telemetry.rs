//! The telemetry stage (bpf/telemetry.h; needs root): selection rules, histograms and the
//! in-band probe option, through BPF_PROG_TEST_RUN. Every row is run twice: with telemetry
//! off (the answer the fixture table already checks) and with the row's rules; the second
//! answer must be the first, or the first with the probe option appended and every length
//! and checksum that covers it right.

mod common;

use common::*;
use xdns_bpf::data::{AnswerEntry, KernelData, Kind, NodeEntry};
use xdns_bpf::telemetry::{Rule, KERNEL_AUTH};
use xdns_wire::body::BodyWriter;

const A: u16 = 1;
const AAAA: u16 = 28;

fn zone() -> KernelData {
    let apex = wire("example.com");
    let node = |n: &str| NodeEntry { name: wire(n), apex: apex.clone(), cut: None, wildcard: false };
    let mut w = BodyWriter::new(&wire("www.example.com")).unwrap();
    w.set_aa(true);
    w.write_rr(&wire("www.example.com"), true, A, 300, &[192, 0, 2, 1]).unwrap();
    let mut n = BodyWriter::new(&wire("example.com")).unwrap();
    n.set_aa(true);
    let answers = vec![
        AnswerEntry { base: wire("www.example.com"), kind: Kind::Type(A), body: w.finish() },
        AnswerEntry { base: wire("www.example.com"), kind: Kind::Other, body: n.finish() },
    ];
    KernelData { nodes: vec![node("example.com"), node("www.example.com")], answers }
}

fn nets() -> Vec<(&'static str, Net)> {
    let mut v4vlan = Net::v4();
    v4vlan.vlan = Some((0x8100, 42));
    let mut v6qinq = Net::v6();
    v6qinq.vlan = Some((0x88a8, 7));
    let mut v4opt = Net::v4();
    v4opt.ip_opts = vec![1, 1, 1, 0];
    vec![("ipv4", Net::v4()), ("ipv6", Net::v6()), ("ipv4+vlan", v4vlan), ("ipv6+802.1ad", v6qinq), ("ipv4+options", v4opt)]
}

/// An OPT record carrying `options` (raw bytes).
fn opt_with(options: Vec<u8>) -> Option<Opt> {
    Some(Opt { payload: 1232, dnssec_ok: false, version: 0, options })
}

fn probe_option(len: usize) -> Vec<u8> {
    let mut o = vec![0xfe, 0x1a];
    o.extend_from_slice(&(len as u16).to_be_bytes());
    o.extend(std::iter::repeat_n(0xab, len));
    o
}

/// What a row expects of the answer with the rules on.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// The same answer as with telemetry off, and not timed.
    Untimed,
    /// The same answer, timed.
    Timed,
    /// Timed, and the probe option appended.
    Probe,
    /// Timed, answered without the option, counted as a bad probe.
    BadProbe,
    /// Not answered by the kernel: this verdict.
    Pass(&'static str),
}

struct Row {
    what: &'static str,
    rules: Vec<&'static str>,
    qname: &'static str,
    qtype: u16,
    opt: Option<Opt>,
    want: Want,
}

fn rows() -> Vec<Row> {
    let row = |what, rules: Vec<&'static str>, qname, qtype, opt, want| Row { what, rules, qname, qtype, opt, want };
    let mut too_short = probe_option(16);
    too_short.truncate(2 + 2 + 5); // the option says 16 bytes, 5 follow: the options do not tile
    vec![
        row("off, probe asked", vec![], "www.example.com", A, opt_with(probe_option(0)), Want::Untimed),
        row("all, no OPT", vec!["all"], "www.example.com", A, None, Want::Timed),
        row("all, OPT without the option", vec!["all"], "www.example.com", A, opt_with(vec![]), Want::Timed),
        row("all, empty probe", vec!["all"], "www.example.com", A, opt_with(probe_option(0)), Want::Probe),
        row("all, 16-byte probe", vec!["all"], "WWW.Example.COM", A, opt_with(probe_option(16)), Want::Probe),
        row("all, probe after a cookie", vec!["all"], "www.example.com", A, opt_with([vec![0, 10, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8], probe_option(0)].concat()), Want::Probe),
        row("all, probe of 3 bytes", vec!["all"], "www.example.com", A, opt_with(probe_option(3)), Want::BadProbe),
        row("all, probe cut short", vec!["all"], "www.example.com", A, opt_with(too_short), Want::Pass("pass_edns_bad")),
        row("other client prefix", vec!["src=198.19.0.0/16"], "www.example.com", A, opt_with(probe_option(0)), Want::Untimed),
        row("client prefix", vec!["src=198.18.0.0/15", "src=2001:db8::/32"], "www.example.com", A, opt_with(probe_option(0)), Want::Probe),
        row("server prefix", vec!["dst=198.18.0.1/32", "dst=2001:db8::1/128"], "www.example.com", A, None, Want::Timed),
        row("other server", vec!["dst=198.18.0.9/32", "dst=2001:db8::9/128"], "www.example.com", A, None, Want::Untimed),
        row("qname suffix", vec!["qname=example.com"], "www.EXAMPLE.com", A, opt_with(probe_option(16)), Want::Probe),
        row("qname exact", vec!["qname=www.example.com"], "www.example.com", A, None, Want::Timed),
        row("qname elsewhere", vec!["qname=example.net"], "www.example.com", A, None, Want::Untimed),
        row("qname inside a label", vec!["qname=ww.example.com"], "www.example.com", A, None, Want::Untimed),
        row("qtype A", vec!["qtype=A"], "www.example.com", A, None, Want::Timed),
        row("qtype AAAA asked A", vec!["qtype=AAAA"], "www.example.com", A, None, Want::Untimed),
        row("NODATA, qtype AAAA", vec!["qtype=AAAA"], "www.example.com", AAAA, None, Want::Timed),
        row("path kernel-auth", vec!["path=kernel-auth"], "www.example.com", A, None, Want::Timed),
        row("path kernel-cache only", vec!["path=kernel-cache,user-auth"], "www.example.com", A, None, Want::Untimed),
        row("first rule decides", vec!["qname=example.net", "qtype=A path=kernel-auth"], "www.example.com", A, None, Want::Timed),
    ]
}

fn qdns(r: &Row) -> Vec<u8> {
    query(&wire(r.qname), r.qtype, r.opt.clone())
}

/// Check `out` is `base` with the probe option appended; returns (rx, tx).
fn check_probe(base: &[u8], out: &[u8]) -> Result<(u64, u64), String> {
    if !checksums_ok(out) {
        return Err("checksums".into());
    }
    let (b, o) = (dns_of(base), dns_of(out));
    if o.len() != b.len() + 20 {
        return Err(format!("DNS length {} vs {} + 20", o.len(), b.len()));
    }
    let n = b.len();
    if o[..n - 2] != b[..n - 2] {
        return Err("bytes before RDLENGTH differ".into());
    }
    if b[n - 11..n - 8] != [0, 0, 41] || b[n - 2..] != [0, 0] {
        return Err("the answer without telemetry does not end with an empty OPT".into());
    }
    if o[n - 2..n + 4] != [0, 20, 0xfe, 0x1a, 0, 16] {
        return Err(format!("option header {:02x?}", &o[n - 2..n + 4]));
    }
    let rx = u64::from_be_bytes(o[n + 4..n + 12].try_into().unwrap());
    let tx = u64::from_be_bytes(o[n + 12..n + 20].try_into().unwrap());
    if rx == 0 || tx < rx || tx - rx > 1_000_000_000 {
        return Err(format!("rx {rx} tx {tx}"));
    }
    // the frame before the DNS message: only the lengths (and checksums) may differ
    if out.len() != base.len() + 20 {
        return Err("frame length".into());
    }
    Ok((rx, tx))
}

#[test]
fn telemetry_table() {
    require_root("telemetry_table");
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    let mut failures = Vec::new();
    let mut count = 0;
    for r in rows() {
        for (nname, net) in nets() {
            let what = format!("{} [{nname}]", r.what);
            let f = frame(&net, &qdns(&r));
            tel.set_rules(&[]).unwrap();
            let (act0, base, moved0) = verdict(&prog, &f);
            let rules: Vec<Rule> = r.rules.iter().map(|t| Rule::parse(t).unwrap()).collect();
            tel.set_rules(&rules).unwrap();
            let before = tel.histograms().unwrap();
            let (act, out, moved) = verdict(&prog, &f);
            let after = tel.histograms().unwrap();
            let timed = after[KERNEL_AUTH].hist.count - before[KERNEL_AUTH].hist.count;
            let probes = after[KERNEL_AUTH].probes - before[KERNEL_AUTH].probes;
            let bad = after[KERNEL_AUTH].probe_bad - before[KERNEL_AUTH].probe_bad;
            count += 1;
            let res: Result<(), String> = (|| {
                if let Want::Pass(v) = r.want {
                    if act != 2 || moved != vec![v.to_string()] {
                        return Err(format!("want {v}, got action {act} {moved:?}"));
                    }
                    return if timed == 0 { Ok(()) } else { Err("a passed query was timed".into()) };
                }
                if act0 != 3 || moved0 != vec!["answered".to_string()] {
                    return Err(format!("telemetry off: action {act0} {moved0:?}"));
                }
                if act != 3 || moved != vec!["answered".to_string()] {
                    return Err(format!("telemetry on: action {act} {moved:?}"));
                }
                let want_timed = u64::from(r.want != Want::Untimed);
                if timed != want_timed {
                    return Err(format!("timed {timed}, want {want_timed}"));
                }
                if after[KERNEL_AUTH].rx_ktime - before[KERNEL_AUTH].rx_ktime != want_timed {
                    return Err("rx clock counter".into());
                }
                match r.want {
                    Want::Probe => {
                        check_probe(&base, &out)?;
                        if probes != 1 {
                            return Err(format!("probes counter {probes}"));
                        }
                    }
                    _ => {
                        if out != base {
                            return Err(format!("answer differs from telemetry off:\n  {base:02x?}\n  {out:02x?}"));
                        }
                        if probes != 0 {
                            return Err("probe counted".into());
                        }
                    }
                }
                if (bad == 1) != (r.want == Want::BadProbe) {
                    return Err(format!("probe_bad moved by {bad}"));
                }
                Ok(())
            })();
            if let Err(e) = res {
                failures.push(format!("{what}: {e}"));
            }
        }
    }
    tel.set_rules(&[]).unwrap();
    println!("{count} telemetry rows, {} failures", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let (insns, verified) = prog.telemetry_insn_count().unwrap();
    println!("telemetry end half: {insns} instructions, {verified} processed by the verifier");
    assert!(verified < 1_000_000);
}

/// One in N: a rule with sample=4 times exactly every fourth matching answer on a CPU.
#[test]
fn telemetry_sampling() {
    require_root("telemetry_sampling");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    tel.set_rules(&[Rule::parse("sample=4").unwrap()]).unwrap();
    let f = frame(&Net::v4(), &query(&wire("www.example.com"), A, None));
    for _ in 0..40 {
        assert_eq!(prog.test_run(&f).unwrap().0, 3);
    }
    let h = tel.histograms().unwrap();
    assert_eq!(h[KERNEL_AUTH].hist.count, 10);
    assert_eq!(h[KERNEL_AUTH].hist.buckets.iter().sum::<u64>(), 10);
    assert!(h[KERNEL_AUTH].hist.quantile(0.5).unwrap() > 0);
}

/// Rules replaced 400 times while another thread sends queries with the probe
/// option: every query is answered, each answer is either the plain one or the probed one,
/// whole (never a torn rule set, never a lost or broken answer).
#[test]
fn rule_edits_under_load_lose_no_query() {
    require_root("rule_edits_under_load_lose_no_query");
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    let f = frame(&Net::v4(), &query(&wire("www.example.com"), A, opt_with(probe_option(0))));
    let base = prog.test_run(&f).unwrap().1;
    let prog = std::sync::Arc::new(prog);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = {
        let (prog, stop, f, base) = (prog.clone(), stop.clone(), f.clone(), base.clone());
        std::thread::spawn(move || {
            let (mut plain, mut probed, mut bad) = (0u64, 0u64, Vec::new());
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let (act, out) = prog.test_run(&f).unwrap();
                if act != 3 {
                    bad.push(format!("action {act}"));
                } else if out == base {
                    plain += 1;
                } else if let Err(e) = check_probe(&base, &out) {
                    bad.push(e);
                } else {
                    probed += 1;
                }
            }
            (plain, probed, bad)
        })
    };
    let sets: Vec<Vec<Rule>> = vec![
        vec![Rule::parse("all").unwrap()],
        vec![],
        vec![Rule::parse("qname=example.net").unwrap(), Rule::parse("qname=example.com qtype=A").unwrap()],
        vec![Rule::parse("src=198.19.0.0/16").unwrap()],
    ];
    for i in 0..400 {
        tel.set_rules(&sets[i % sets.len()]).unwrap();
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (plain, probed, bad) = worker.join().unwrap();
    // the last set (src=198.19.0.0/16) selects nothing: the plain answer again
    assert_eq!(prog.test_run(&f).unwrap().1, base, "after the edits, the last set rules");
    println!("{plain} plain answers, {probed} probed, {} bad", bad.len());
    assert!(bad.is_empty(), "{:?}", &bad[..bad.len().min(5)]);
    assert!(plain > 0 && probed > 0, "both kinds of answers seen: {plain} plain, {probed} probed");
}

/// In-kernel ns per answered query (run_time_ns / run_cnt with BPF stats on, over
/// BPF_PROG_TEST_RUN; the end half's time is counted in the main program's): telemetry off,
/// on with a rule for a userspace path only, with rules this query does not match (an
/// address rule the set's summary rules out, one it admits, a name rule), on for every
/// answer, and with the probe option written; then with dnstap from XDP on: unselected by
/// address, by name (the query copied, no record), and every answer to the ring. The states alternate in rounds; each round's
/// ratio to the same round's "off" is printed, median and range, for docs/perf. Asserts only
/// that each state answers as it should.
#[test]
fn telemetry_perf() {
    require_root("telemetry_perf");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    // SAFETY: BPF_ENABLE_STATS takes no pointer; the fd it returns keeps the stats on (for
    // everyone, counted) until closed, without touching kernel.bpf_stats_enabled.
    let stats_fd = unsafe { libbpf_sys::bpf_enable_stats(libbpf_sys::BPF_STATS_RUN_TIME) };
    assert!(stats_fd >= 0, "bpf_enable_stats: {stats_fd}");
    let plain = frame(&Net::v4(), &query(&wire("www.example.com"), A, opt_with(vec![])));
    let probed = frame(&Net::v4(), &query(&wire("www.example.com"), A, opt_with(probe_option(0))));
    // (what, rules, dnstap from XDP, frame)
    let states: [(&str, Vec<Rule>, bool, &Vec<u8>); 10] = [
        ("off", vec![], false, &plain),
        // what a rule for userspace paths alone would cost here (the daemon gives the kernel
        // none such: crates/xdns/src/telemetry.rs, kernel_rules; its cost is then "off")
        ("on, userspace rule only (path=user-auth)", vec![Rule::parse("path=user-auth").unwrap()], false, &plain),
        ("on, unselected (src=198.19.0.0/16)", vec![Rule::parse("src=198.19.0.0/16").unwrap()], false, &plain),
        ("on, unselected (qname=nothing.invalid)", vec![Rule::parse("qname=nothing.invalid").unwrap()], false, &plain),
        ("on, all selected", vec![Rule::parse("all").unwrap()], false, &plain),
        ("on, all selected, probe written", vec![Rule::parse("all").unwrap()], false, &probed),
        // dnstap from XDP: the query copied by the begin half, the record written by the end
        ("dnstap, unselected (src=198.19.0.0/16)", vec![Rule::parse("src=198.19.0.0/16").unwrap()], true, &plain),
        ("dnstap, unselected (qname=nothing.invalid)", vec![Rule::parse("qname=nothing.invalid").unwrap()], true, &plain),
        ("dnstap, all selected", vec![Rule::parse("all").unwrap()], true, &plain),
        // the summary admits the client (the window, bits 20..31, is 0.2 for both): the
        // address call decides, as every unselected packet paid before the summary (last:
        // the states before keep their order and their set, 1 or 2, as before it)
        ("on, unselected, summary's window shared (src=198.19.0.2/32)", vec![Rule::parse("src=198.19.0.2/32").unwrap()], false, &plain),
    ];
    let (rounds, runs) = (120, 400);
    let mut ns = vec![Vec::new(); states.len()];
    for _ in 0..rounds {
        for (i, (what, rules, tap, f)) in states.iter().enumerate() {
            tel.set_rules_tap(rules, *tap).unwrap();
            assert_eq!(prog.test_run(f).unwrap().0, 3, "{what}: answered");
            let (c0, t0) = prog.run_stats().unwrap();
            for _ in 0..runs {
                prog.test_run(f).unwrap();
            }
            let (c1, t1) = prog.run_stats().unwrap();
            assert!(c1 - c0 >= runs, "{what}: run_cnt counted");
            ns[i].push((t1 - t0) as f64 / (c1 - c0) as f64);
            // read the ring outside the timed runs: it never fills (400 records, 64 KiB)
            let n = tel.take_events().unwrap().len() as u64;
            let want = if *tap && rules.len() == 1 && rules[0].to_string() == "all" { runs + 1 } else { 0 };
            assert_eq!(n, want, "{what}: events");
        }
    }
    // SAFETY: the fd bpf_enable_stats returned, closed once.
    unsafe { libc::close(stats_fd) };
    let median = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    // the machine is shared: other work only adds time, so the rounds' low fifth (the
    // 20th percentile) is the steadier figure; the median of the per-round ratios beside it
    let low = |mut v: Vec<f64>| {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 5]
    };
    let base = low(ns[0].clone());
    for (i, (what, _, _, _)) in states.iter().enumerate() {
        let ratios: Vec<f64> = ns[i].iter().zip(&ns[0]).map(|(a, b)| a / b).collect();
        let p20 = low(ns[i].clone());
        let (r, _, _) = median(ratios);
        println!("perf {p20:>6.1} ns/packet (p20 of rounds)  x{:.3} of off (p20)  x{r:.3} (median of round ratios)  telemetry {what}", p20 / base);
    }
    tel.set_rules(&[]).unwrap();
}

/// The ring record the end half must write for query `q` (sent in `f`, over `net`) answered
/// with `out`: the header (the times taken from `rec`, checked), the query's DNS message as
/// received, the answer's as sent.
fn want_event(net: &Net, q: &[u8], out: &[u8], rec: &[u8]) -> Result<Vec<u8>, String> {
    if rec.len() < 64 {
        return Err(format!("record of {} bytes", rec.len()));
    }
    let rx = u64::from_ne_bytes(rec[0..8].try_into().unwrap());
    let tx = u64::from_ne_bytes(rec[8..16].try_into().unwrap());
    if rx == 0 || tx < rx || tx - rx > 1_000_000_000 {
        return Err(format!("rx {rx} tx {tx}"));
    }
    let mut w = Vec::new();
    w.extend_from_slice(&rx.to_ne_bytes());
    w.extend_from_slice(&tx.to_ne_bytes());
    for a in [&net.src, &net.dst] {
        let mut b = [0u8; 16];
        b[..a.len()].copy_from_slice(a);
        w.extend_from_slice(&b);
    }
    w.extend_from_slice(&net.sport.to_ne_bytes());
    w.extend_from_slice(&net.dport.to_ne_bytes());
    w.push(if net.v6 { 6 } else { 4 });
    w.push(KERNEL_AUTH as u8);
    let r = dns_of(out);
    w.extend_from_slice(&(q.len() as u16).to_ne_bytes());
    w.extend_from_slice(&(r.len() as u16).to_ne_bytes());
    w.extend_from_slice(&net.vlan.map_or(0, |(_, tci)| tci & 0xfff).to_ne_bytes());
    w.extend_from_slice(&[0; 4]);
    w.extend_from_slice(q);
    w.extend_from_slice(r);
    Ok(w)
}

/// dnstap from XDP (bpf/telemetry.h, `xdns_tel_events`): for each row, over IPv4, IPv6, a
/// VLAN tag, 802.1ad and IPv4 options, the exact bytes of the ring record of a selected answer
/// (header, the query as received, the answer as sent: the probe option included), and no
/// record for an unselected answer, for dnstap off, or for a query longer than 512 bytes
/// (counted `dtap_long`). The answer is the same with dnstap on as off.
#[test]
fn dnstap_event_table() {
    require_root("dnstap_event_table");
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    let mut long_pad = vec![0, 12];
    long_pad.extend_from_slice(&520u16.to_be_bytes());
    long_pad.extend(std::iter::repeat_n(0, 520));
    #[derive(PartialEq)]
    enum Tap {
        Event,
        None,
        Long,
    }
    let rows: Vec<(&str, Vec<&str>, bool, Vec<u8>, Tap)> = vec![
        ("selected, no OPT", vec!["all"], true, query(&wire("www.example.com"), A, None), Tap::Event),
        ("selected, NODATA, OPT", vec!["qname=example.com"], true, query(&wire("WWW.example.com"), AAAA, opt_with(vec![])), Tap::Event),
        ("selected, probe written", vec!["all"], true, query(&wire("www.example.com"), A, opt_with(probe_option(0))), Tap::Event),
        ("selected by the second rule", vec!["qname=example.net", "qtype=A"], true, query(&wire("www.example.com"), A, None), Tap::Event),
        ("dnstap off", vec!["all"], false, query(&wire("www.example.com"), A, None), Tap::None),
        ("unselected: client prefix", vec!["src=198.19.0.0/16", "src=2001:db9::/32"], true, query(&wire("www.example.com"), A, None), Tap::None),
        ("unselected: qname", vec!["qname=example.net"], true, query(&wire("www.example.com"), A, None), Tap::None),
        ("unselected: path", vec!["path=kernel-cache"], true, query(&wire("www.example.com"), A, None), Tap::None),
        ("query of 568 bytes", vec!["all"], true, query(&wire("www.example.com"), A, opt_with(long_pad.clone())), Tap::Long),
    ];
    let mut failures = Vec::new();
    let mut count = 0;
    for (what, rules, tap, q, want) in &rows {
        for (nname, net) in nets() {
            count += 1;
            let f = frame(&net, q);
            tel.set_rules(&[]).unwrap();
            let (act0, base, _) = verdict(&prog, &f);
            let rules: Vec<Rule> = rules.iter().map(|t| Rule::parse(t).unwrap()).collect();
            tel.set_rules_tap(&rules, *tap).unwrap();
            let before = tel.histograms().unwrap()[KERNEL_AUTH].clone();
            let (act, out, moved) = verdict(&prog, &f);
            let after = tel.histograms().unwrap()[KERNEL_AUTH].clone();
            let recs = tel.take_events().unwrap();
            let res: Result<(), String> = (|| {
                if act0 != 3 || act != 3 || moved != vec!["answered".to_string()] {
                    return Err(format!("not answered: {act0} {act} {moved:?}"));
                }
                let probed = q.windows(2).any(|w| w == [0xfe, 0x1a]);
                if probed && *want == Tap::Event {
                    check_probe(&base, &out)?;
                } else if out != base {
                    return Err("the answer differs from dnstap off".into());
                }
                let (ev, long) = (after.dtap_events - before.dtap_events, after.dtap_long - before.dtap_long);
                match want {
                    Tap::Event => {
                        if recs.len() != 1 || ev != 1 || long != 0 {
                            return Err(format!("{} records, events {ev}, long {long}", recs.len()));
                        }
                        let w = want_event(&net, q, &out, &recs[0])?;
                        if recs[0] != w {
                            return Err(format!("record:\n  got  {:02x?}\n  want {w:02x?}", recs[0]));
                        }
                        let e = xdns_bpf::telemetry::TelEvent::parse(&recs[0]).ok_or("TelEvent::parse")?;
                        if e.query != *q || e.response != dns_of(&out) || e.server.port() != 53 || e.client.port() != net.sport {
                            return Err(format!("parsed: {e:?}"));
                        }
                    }
                    Tap::None | Tap::Long => {
                        if !recs.is_empty() || ev != 0 {
                            return Err(format!("{} records, events {ev}", recs.len()));
                        }
                        if long != u64::from(*want == Tap::Long) {
                            return Err(format!("dtap_long moved by {long}"));
                        }
                    }
                }
                if after.dtap_full != before.dtap_full {
                    return Err("dtap_full moved".into());
                }
                Ok(())
            })();
            if let Err(e) = res {
                failures.push(format!("{what} [{nname}]: {e}"));
            }
        }
    }
    tel.set_rules(&[]).unwrap();
    println!("{count} dnstap rows, {} failures", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let (insns, verified) = prog.telemetry_insn_count().unwrap();
    println!("telemetry end half: {insns} instructions, {verified} processed by the verifier");
}

/// dnstap from XDP with nobody reading the ring: once it is full, every further event is
/// counted `dtap_full` and the answers leave exactly as before (never waited for); the
/// records that fit are whole. A rule with sample=4 writes every fourth answer.
#[test]
fn dnstap_full_ring_counts_drops_and_answers_all() {
    require_root("dnstap_full_ring_counts_drops_and_answers_all");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    let q = query(&wire("www.example.com"), A, None);
    let f = frame(&Net::v4(), &q);
    let base = prog.test_run(&f).unwrap().1;
    tel.set_rules_tap(&[Rule::parse("sample=4").unwrap()], true).unwrap();
    for _ in 0..40 {
        assert_eq!(prog.test_run(&f).unwrap(), (3, base.clone()));
    }
    assert_eq!(tel.take_events().unwrap().len(), 10, "one in four");
    tel.set_rules_tap(&[Rule::parse("all").unwrap()], true).unwrap();
    // 1 MiB of records of 64 + 33 + 49 bytes (160 in the ring): about 6,500 fit
    let n = 9000u64;
    for i in 0..n {
        let (act, out) = prog.test_run(&f).unwrap();
        assert!(act == 3 && out == base, "answer {i} changed by a full ring");
    }
    let h = tel.histograms().unwrap()[KERNEL_AUTH].clone();
    println!("events {} ring full {}", h.dtap_events, h.dtap_full);
    assert_eq!(h.dtap_events + h.dtap_full, n + 10);
    assert!(h.dtap_full > 1000 && h.dtap_events > 5000, "{} written, {} dropped", h.dtap_events, h.dtap_full);
    let recs = tel.take_events().unwrap();
    assert_eq!(recs.len() as u64, h.dtap_events - 10);
    assert!(recs.iter().all(|r| xdns_bpf::telemetry::TelEvent::parse(r).is_some_and(|e| e.query == q && e.response == dns_of(&base))));
    // read: room again
    prog.test_run(&f).unwrap();
    assert_eq!(tel.take_events().unwrap().len(), 1);
    tel.set_rules(&[]).unwrap();
}

/// `scratch.tel.slot` on this CPU (the test stays on one), read from the map: telemetry.h's
/// XDNS_TEL_END 0 (on to the end half), _DONE 1 (no rule selects the query), _ASK 2.
fn slot_here(prog: &xdns_bpf::runtime::XdpProgram) -> u32 {
    use libbpf_rs::MapCore;
    use xdns_bpf::types::{xdns_scratch, xdns_tel_scratch};
    let id = prog.map_ids().unwrap().into_iter().find(|(n, _)| n == "xdns_scratch").expect("the scratch map").1;
    let m = libbpf_rs::MapHandle::from_map_id(id).unwrap();
    let cpus = m.lookup_percpu(&0u32.to_ne_bytes(), libbpf_rs::MapFlags::ANY).unwrap().expect("scratch[0]");
    // SAFETY: sched_getcpu has no preconditions.
    let cpu = unsafe { libc::sched_getcpu() };
    let at = std::mem::offset_of!(xdns_scratch, tel) + std::mem::offset_of!(xdns_tel_scratch, slot);
    u32::from_ne_bytes(cpus[cpu as usize][at..at + 4].try_into().unwrap())
}
const SLOT_END: u32 = 0;
const SLOT_DONE: u32 = 1;
const SLOT_ASK: u32 = 2;

/// Leave `scratch.tel.slot` at "ask" on this CPU, as a query whose question is then refused
/// leaves it (a name rule, a compression pointer for a name): the next packet must not find
/// it there unless its own begin half put it there.
fn leave_slot_asking(prog: &xdns_bpf::runtime::XdpProgram, tel: &xdns_bpf::telemetry::TelemetryMaps, net: &Net) {
    tel.set_rules(&[Rule::parse("qname=example.com").unwrap()]).unwrap();
    let mut bad = query(&[0], A, None);
    bad.truncate(12);
    bad.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
    let (act, _) = prog.test_run(&frame(net, &bad)).unwrap();
    assert_eq!((act, slot_here(prog)), (2, SLOT_ASK), "the setup: a refused question leaves the slot asking");
}

/// The summary's pre-filter (bpf/telemetry.h `xdns_tel_pre`, inline before the address call):
/// over IPv4, IPv6, a VLAN tag, 802.1ad and IPv4 options. A summary that admits every address
/// (`any`) is not checked. Addresses whose bits are clear (a
/// summary edited to say so while a rule would time every answer; another client /16, another
/// server, the other family's rules) are not timed, and the slot is "done" even where the
/// packet before left it "ask"; bits set with no rule matching (a shared window, a summary
/// edited full) are not timed either (the call decides); a matching rule is timed. The
/// summary the kernel reads back admits exactly what the row says, and the answer is the same
/// as with telemetry off.
#[test]
fn pre_filter_table() {
    require_root("pre_filter_table");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    type Edit = fn(&mut xdns_bpf::types::xdns_tel_set);
    let clear_all: Edit = |s| {
        s.sum.any = 0;
        s.sum.bits.iter_mut().for_each(|w| *w = 0);
    };
    let any_but_clear: Edit = |s| {
        s.sum.any = 1;
        s.sum.bits.iter_mut().for_each(|w| *w = 0);
    };
    let clear_servers: Edit = |s| {
        s.sum.any = 0;
        let w = xdns_bpf::telemetry::SUM_WORDS;
        for m in [1, 3] {
            s.sum.bits[m * w..(m + 1) * w].iter_mut().for_each(|w| *w = 0);
        }
    };
    let fill_all: Edit = |s| s.sum.bits.iter_mut().for_each(|w| *w = !0);
    let keep: Edit = |_| {};
    // (what, rules for an IPv4 and for an IPv6 packet, edit of the summary, admitted, timed)
    let rows: Vec<(&str, [&[&str]; 2], Edit, Option<bool>, bool)> = vec![
        ("bits clear (edited), a rule for every answer", [&["all"], &["all"]], clear_all, Some(false), false),
        ("server bits clear (edited), a rule for every answer", [&["all"], &["all"]], clear_servers, Some(false), false),
        ("client bits clear: another prefix", [&["src=198.19.0.0/16", "src=2001:db9::/32"]; 2], keep, Some(false), false),
        ("server bits clear: another server", [&["dst=198.18.0.9/32", "dst=2001:db8:0:9::1/128"]; 2], keep, Some(false), false),
        ("bits clear: rules of the other family only", [&["src=2001:db8::/32"], &["src=198.18.0.0/15"]], keep, Some(false), false),
        ("bits set by a shared window, no rule matches", [&["src=198.19.0.2/32", "src=2001:db9::/64"]; 2], keep, Some(true), false),
        ("bits set (edited), no rule matches", [&["src=198.19.0.0/16", "src=2001:db9::/32"]; 2], fill_all, Some(true), false),
        ("`any` (edited, the bits clear): no check, a client rule matches", [&["src=198.18.0.0/15", "src=2001:db8::/32"]; 2], any_but_clear, Some(true), true),
        ("bits set, a client rule matches", [&["src=198.18.0.0/15", "src=2001:db8::/32"]; 2], keep, Some(true), true),
        ("bits set, a server rule matches", [&["dst=198.18.0.1/32", "dst=2001:db8::1/128"]; 2], keep, Some(true), true),
        ("bits set, a /16 and a host: the host matches", [&["src=198.19.0.0/16", "src=198.18.0.2/32", "src=2001:db8::2/128"]; 2], keep, Some(true), true),
        ("every bit, a name rule matches", [&["qname=example.com"]; 2], keep, Some(true), true),
        ("every bit, a name rule does not", [&["qname=example.net"]; 2], keep, Some(true), false),
    ];
    let mut failures = Vec::new();
    let mut count = 0;
    for (what, rules, edit, admit, want_timed) in &rows {
        for (nname, net) in nets() {
            count += 1;
            let f = frame(&net, &query(&wire("www.example.com"), A, None));
            tel.set_rules(&[]).unwrap();
            let (_, base, _) = verdict(&prog, &f);
            leave_slot_asking(&prog, &tel, &net);
            let rules: Vec<Rule> = rules[usize::from(net.v6)].iter().map(|t| Rule::parse(t).unwrap()).collect();
            tel.set_rules_staged(&rules, *edit, true).unwrap();
            let before = tel.histograms().unwrap()[KERNEL_AUTH].clone();
            let (act, out, moved) = verdict(&prog, &f);
            let after = tel.histograms().unwrap()[KERNEL_AUTH].clone();
            let slot = slot_here(&prog);
            let res: Result<(), String> = (|| {
                let ctl = tel.ctl().map_err(|e| e.to_string())?;
                let ip = |b: &[u8]| -> std::net::IpAddr {
                    if b.len() == 4 {
                        std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).into()
                    } else {
                        std::net::Ipv6Addr::from(<[u8; 16]>::try_from(b).unwrap()).into()
                    }
                };
                let set = &ctl.sets[(ctl.active as usize + 1) & 1];
                if ctl.active == 0 || set.nrules as usize != rules.len() {
                    return Err(format!("active {} with {} rules", ctl.active, set.nrules));
                }
                let admits = xdns_bpf::telemetry::sum_admits(&set.sum, ip(&net.src), ip(&net.dst));
                if admit.is_some_and(|a| a != admits) {
                    return Err(format!("the summary admits: {admits}"));
                }
                if act != 3 || moved != vec!["answered".to_string()] || out != base {
                    return Err(format!("not the answer of telemetry off: {act} {moved:?}"));
                }
                let (timed, clock) = (after.hist.count - before.hist.count, after.rx_ktime - before.rx_ktime);
                if (timed, clock) != (u64::from(*want_timed), u64::from(*want_timed)) {
                    return Err(format!("timed {timed}, clock {clock}"));
                }
                let want_slot = if *want_timed { SLOT_END } else { SLOT_DONE };
                if slot != want_slot {
                    return Err(format!("slot {slot}, want {want_slot}"));
                }
                Ok(())
            })();
            if let Err(e) = res {
                failures.push(format!("{what} [{nname}]: {e}"));
            }
        }
    }
    tel.set_rules(&[]).unwrap();
    println!("{count} pre-filter rows, {} failures", failures.len());
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The summary flips with its set: a new set written but not yet active (the first of the
/// writer's two writes) changes nothing a packet sees, even when its summary rules the packet
/// out or in; the flip changes rules and summary together. IPv4 and IPv6, VLAN-tagged.
#[test]
fn pre_filter_summary_flips_with_its_set() {
    require_root("pre_filter_summary_flips_with_its_set");
    stay_on_one_cpu();
    let mut prog = load();
    prog.install(&zone()).unwrap();
    let tel = prog.telemetry().unwrap();
    let selects: Vec<Rule> = ["src=198.18.0.0/15", "src=2001:db8::/32"].iter().map(|t| Rule::parse(t).unwrap()).collect();
    let misses: Vec<Rule> = ["src=198.19.0.0/16", "src=2001:db9::/32"].iter().map(|t| Rule::parse(t).unwrap()).collect();
    let mut v4vlan = Net::v4();
    v4vlan.vlan = Some((0x8100, 42));
    for (nname, net) in [("ipv4", Net::v4()), ("ipv6", Net::v6()), ("ipv4+vlan", v4vlan)] {
        let f = frame(&net, &query(&wire("www.example.com"), A, None));
        let timed = || {
            let before = tel.histograms().unwrap()[KERNEL_AUTH].hist.count;
            assert_eq!(prog.test_run(&f).unwrap().0, 3, "[{nname}] answered");
            tel.histograms().unwrap()[KERNEL_AUTH].hist.count - before == 1
        };
        let idle_admits = || {
            let c = tel.ctl().unwrap();
            let (client, server) = if net.v6 { ("2001:db8::2", "2001:db8::1") } else { ("198.18.0.2", "198.18.0.1") };
            xdns_bpf::telemetry::sum_admits(&c.sets[(c.active as usize) & 1].sum, client.parse().unwrap(), server.parse().unwrap())
        };
        tel.set_rules(&selects).unwrap();
        assert!(timed(), "[{nname}] the selecting set");
        // written, not flipped: the staged summary (clear for this client) is not read
        tel.set_rules_staged(&misses, |_| {}, false).unwrap();
        assert!(!idle_admits(), "[{nname}] the staged set's summary rules the client out");
        assert!(timed(), "[{nname}] staged, not active: the old set and its summary still decide");
        tel.set_rules(&misses).unwrap();
        assert!(!timed(), "[{nname}] flipped: the new set and its summary");
        // and back: staged, the selecting summary (set for this client) is not read either
        tel.set_rules_staged(&selects, |_| {}, false).unwrap();
        assert!(idle_admits(), "[{nname}] the staged set's summary admits the client");
        assert!(!timed(), "[{nname}] staged, not active");
        tel.set_rules(&selects).unwrap();
        assert!(timed(), "[{nname}] flipped back");
    }
    tel.set_rules(&[]).unwrap();
}
