//! Every configuration key with its default and meaning: the source of the `xdns.toml(5)`
//! manual page (`xdns manual`). Tests hold it to the parser (every key the parser accepts is
//! here, and nothing else) and to crates/xdns/README.md (every key is in its tables), so the
//! three cannot drift apart.

/// One key of the configuration file.
pub struct Key {
    /// `""` for the top level, else the table (`tcp`, `xdp`, `zone`, `resolver`, ...).
    pub section: &'static str,
    pub name: &'static str,
    pub default: &'static str,
    pub meaning: &'static str,
}

const fn k(section: &'static str, name: &'static str, default: &'static str, meaning: &'static str) -> Key {
    Key { section, name, default, meaning }
}

/// Every key, in the order of the manual page.
pub const KEYS: &[Key] = &[
    k("", "listen", r#"["127.0.0.1:53", "[::1]:53"]"#, "UDP and TCP listen addresses (IPv6 sockets are IPV6_V6ONLY)."),
    k("", "control", "/run/xdns/control.sock", "Unix control socket of xdns stats, flush and --takeover; created with its directory as a fresh start begins (stats show its progress), removed at stop."),
    k("", "metrics", "none", "ADDR:PORT of a Prometheus GET /metrics endpoint."),
    k("", "edns_payload", "1232", "EDNS payload advertised and the UDP answer cap, 512 to 4096. With [xdp] on, a change needs a restart (the kernel's value is fixed at load)."),
    k("", "udp_workers", "0", "UDP threads per listen address; 0 = one per core."),
    k("", "user", "none (stays root)", "Run as this user once the sockets are bound and the XDP program attached: capabilities kept only by the XDP thread (CAP_NET_ADMIN, CAP_BPF), no_new_privs, a seccomp deny list."),
    k("", "group", "the user's primary group", "The group to run as, with user."),
    k("tcp", "idle_timeout_ms", "10000", "Close a connection idle this long while at most half the slots are in use; beyond, it shrinks linearly to idle_min_ms. Told to clients that send edns-tcp-keepalive (RFC 7828)."),
    k("tcp", "idle_min_ms", "1000", "The idle timeout with every slot in use."),
    k("tcp", "max_connections", "1024", "Slots over all TCP listeners; when all are taken, a new connection closes the longest-idle connection of the client holding the most, and is refused only when none is idle."),
    k("tcp", "max_per_client", "64", "Connections one client (an IPv4 address, an IPv6 /64) may hold; its next closes its own longest-idle one, or is refused when all are busy."),
    k("tcp", "io_timeout_ms", "2000", "A query must arrive whole, and an answer be written, within this long."),
    k("tcp", "max_pipelined", "100", "Answers pending on one connection before its reader pauses."),
    k("log", "level", "info", "A tracing filter (info, debug, xdns=trace, ...); RUST_LOG wins."),
    k("guard", "blocklist", "none", "File of addresses and prefixes (IPv4, IPv6, one a line, # comments) whose messages get no answer."),
    k("guard", "allowlist", "none", "File of addresses and prefixes never blocked nor rate limited."),
    k("guard", "block_names", "none", "File of names, exact or *.suffix, whose queries get no answer."),
    k("guard", "rrl", "none (off)", "Response rate limiting of UDP answers: { rate = 200, slip = 2, ipv4_prefix = 24, ipv6_prefix = 56 }; every slip-th limited answer is sent truncated (TC=1)."),
    k("guard", "detect", "false", "Automatic detection each interval (needs [xdp]): sources over a rate learned from normal traffic, random-subdomain floods (the suffix blocked for unknown labels only), amplification; blocked live, lifted by the rate monitor (xdns guard list)."),
    k("guard", "detect_interval_ms", "500", "Length of a detection interval, 100 to 1000 ms."),
    k("guard", "detect_min_rate", "200", "Floor of the learned per-source threshold, packets/s (a source is counted per IPv4 /24, IPv6 /56)."),
    k("guard", "detect_unblock_after", "5", "Intervals below the threshold before a detected block is lifted (hysteresis)."),
    k("guard", "detect_block_for", "1h", "Expiry of a detected block (s, m, h, d), or \"never\" (only the rate monitor lifts it)."),
    k("guard", "offload_slots", "0", "Size of the hardware tier holding the heaviest blocked sources (top-K): ethtool n-tuple rules where the interface supports them, else a modelled K-slot table in XDP (at most 16; a model, not a NIC)."),
    k("guard", "cookie_secret_lifetime", "26h", "Rotation period of the server cookie secret (s, m, h, d), or \"never\"; the previous secret keeps verifying until the next rotation, in userspace and in XDP (Knot DNS's secret-lifetime)."),
    k("guard", "cookies", "false", "DNS cookies (RFC 7873, RFC 9018 server cookies): a valid server cookie bypasses RRL; a malformed COOKIE option gets FORMERR."),
    k("dnstap", "socket", "none", "Unix socket of a Frame Streams reader (fstrm_capture, a dnstap collector) to send dnstap messages to: READY/ACCEPT/START handshake, reconnected every second while it is away. One of socket or file."),
    k("dnstap", "file", "none", "File to write dnstap messages to (Frame Streams, truncated at start; kdig -G and dnstap-read read it)."),
    k("dnstap", "identity", "the host name", "The identity field of every message."),
    k("dnstap", "version", "xdns VERSION", "The version field of every message."),
    k("dnstap", "log_queries", "true", "Log queries: AUTH_QUERY, CLIENT_QUERY (resolver clients), RESOLVER_QUERY (upstream)."),
    k("dnstap", "log_responses", "true", "Log responses: AUTH_RESPONSE, CLIENT_RESPONSE, RESOLVER_RESPONSE."),
    k("dnstap", "queue", "16384", "Messages waiting for the writer thread; beyond, dropped and counted (dnstap.dropped_queue_full), never waited for."),
    k("dnstap", "xdp", "false", "Also log the answers XDP sends that a [telemetry] rule selects (its sample=N: one in N): the query as received and the answer as sent, through a ring buffer (telemetry.dnstap_xdp_*: events, lost to a full ring, too long), never waited for. Authoritative answers as AUTH_QUERY/AUTH_RESPONSE, answers from the resolver's cache as CLIENT_QUERY/CLIENT_RESPONSE. No rule for a kernel path: nothing from XDP."),
    k("telemetry", "rules", "[] (off)", "Which answers are timed, at most 8 rules, the first match decides: \"src=PREFIX dst=PREFIX qname=SUFFIX qtype=TYPE path=kernel-auth,kernel-cache,user-auth,resolver-hit,resolver-miss,resolver-upstream sample=N\" (any subset; \"all\" alone: everything). Editable live with xdns telemetry add|del|list. Timed answers (and, with path resolver-upstream, the resolver's upstream queries) go into histograms (xdns stats, /metrics); those whose query carries EDNS option 65050 get the server's receive and transmit ns back in it."),
    k("xdp", "interfaces", "[] (off)", "Interfaces the XDP program answers on."),
    k("xdp", "mode", "auto", "auto, native or generic. auto picks generic on a veth whose peer runs no XDP program, else lets the kernel choose, and moves an interface that loses answers to generic."),
    k("inpath", "client_interfaces", "(required)", "The transparent in-path cache (a forwarding host): interfaces where clients' queries arrive; cache hits are answered there on behalf of the server."),
    k("inpath", "upstream_interfaces", "(required)", "Interfaces where the servers' responses arrive; only responses to queries forwarded by this host are learnt."),
    k("inpath", "servers", "(required)", "Server prefixes (ADDR or ADDR/LEN) whose UDP port 53 answers are cached; everything else is forwarded untouched."),
    k("inpath", "max_ttl", "3600", "Seconds an entry lives at most (RFC 2308 negative answers: min(SOA TTL, SOA MINIMUM) under this)."),
    k("inpath", "capacity", "65536", "Entries kept (sets of 4, least recently used replaced, evictions counted); about 2 KiB each when held."),
    k("inpath", "pending", "65536", "Forwarded queries remembered while their response is awaited (slots of a hashed table, rounded up to a power of two; a newer query takes an older one's slot)."),
    k("inpath", "timeout_ms", "3000", "A response later than this after its query is forwarded, not learnt."),
    k("inpath", "forward", "pass", "How cache misses and responses are forwarded: pass (the kernel routes them) or redirect (bpf_fib_lookup + bpf_redirect to an interface of [inpath], the kernel otherwise)."),
    k("inpath", "mode", "auto", "auto, native or generic, as [xdp] mode (auto: generic on a veth whose peer runs no XDP program)."),
    k("zone", "name", "(required)", "A zone to serve ([[zone]], one table per zone)."),
    k("zone", "file", "(required unless primaries)", "Its master file, relative to the configuration file's directory; for a secondary, where the last good copy is kept and read at start."),
    k("zone", "primaries", "none", "A secondary zone: the primaries to transfer from (ADDR, ADDR@PORT or [v6]:PORT), tried in order; only their NOTIFY is accepted."),
    k("zone", "key", "none", "The [[key]] transfers and NOTIFY are signed with (in and out)."),
    k("zone", "notify", "[]", "Secondaries told of every new serial (NOTIFY, RFC 1996), with retries."),
    k("zone", "allow_transfer", "[]", "Prefixes that may transfer the zone (AXFR, IXFR from the journal); others get REFUSED."),
    k("key", "name", "(required)", "A TSIG key (RFC 8945), as tsig-keygen prints it: its name."),
    k("key", "algorithm", "(required)", "hmac-sha256, hmac-sha384 or hmac-sha512."),
    k("key", "secret", "(required)", "The secret, base64."),
    k("catalog", "name", "(required)", "A catalog zone (RFC 9432): its members become secondary zones of the same primaries and key."),
    k("catalog", "primaries", "(required)", "Where the catalog is transferred from."),
    k("catalog", "key", "none", "The [[key]] of its transfers."),
    k("catalog", "file", "none", "Where its last good copy is kept; its members' copies go to FILE.members/NAME.zone (read at start, expire from their mtime)."),
    k("resolver", "root_hints", "(required)", "Root hints file (NS at the root and their A/AAAA), relative to the configuration file."),
    k("resolver", "allow", r#"["127.0.0.0/8", "::1/128"]"#, "Client prefixes that may recurse; others get REFUSED."),
    k("resolver", "cache_entries", "100000", "Answers kept in the userspace cache."),
    k("resolver", "prefetch_percent", "10", "A hit in the last N % of a TTL refreshes the answer before it expires (0 = off)."),
    k("resolver", "prefetch_min_ttl", "2", "Answers with a TTL below this many seconds are never prefetched."),
    k("resolver", "fanout", "2", "Servers asked for each upstream question, fastest first; 1 to 8."),
    k("resolver", "fanout_delay_ms", "20", "The k-th of those is asked k times this later unless a reply came first."),
    k("resolver", "upstream_timeout_ms", "800", "Wait for one upstream reply."),
    k("resolver", "resolve_timeout_ms", "4000", "Limit for one whole resolution."),
    k("resolver", "max_upstream_queries", "48", "Upstream queries per client question."),
    k("resolver", "max_glueless", "6", "NS names without glue resolved per client question."),
    k("resolver", "max_ttl", "86400", "Cap on positive TTLs."),
    k("resolver", "max_negative_ttl", "3600", "Cap on negative TTLs (RFC 2308)."),
    k("resolver", "stale_ttl", "86400", "Expired answers may be served this long when the authorities do not answer (RFC 8767); 0 = never."),
    k("resolver", "stale_answer_after_ms", "1800", "With a stale answer at hand, a resolution slower than this is answered stale while it goes on."),
    k("resolver", "failure_ttl", "5", "A failed resolution answers SERVFAIL without retrying for this long (RFC 9520)."),
    k("resolver", "upstream_port", "53", "Destination port of iterative queries."),
    k("resolver", "ipv4", "true", "Ask servers over IPv4."),
    k("resolver", "ipv6", "true", "Ask servers over IPv6."),
    k("resolver", "qname_minimisation", "true", "RFC 9156, relaxed."),
    k("resolver", "forwarders", "[]", "IP or IP:PORT: when set, every question goes with RD=1 to these instead of iterating."),
    k("resolver", "max_pending", "10000", "UDP questions waiting for the resolver at once, shared between client prefixes (/24, /56: none holds half; under contention each its share); beyond, SERVFAIL at once with an Extended DNS Error."),
    k("resolver", "fetches_per_server", "1000", "Upstream queries outstanding to one server at most; the bound adapts (+1 per reply, -1/16 per timeout) down to fetches_floor. 0 = no bound."),
    k("resolver", "fetches_per_zone", "500", "Upstream queries outstanding for one zone at most, adapting the same way. 0 = no bound."),
    k("resolver", "fetches_floor", "2", "The least an adapting bound falls to: a dead server or zone still gets this many probes."),
    k("resolver", "kernel_iteration", "true with `[xdp]` and no forwarders", "Cache misses iterated in the XDP program (needs `[xdp]`): the query is rewritten into a query to the deepest known zone cut's server, with a random ID, port and letter case; responses are checked in the kernel, referrals with glue followed there, a plain A/AAAA/TXT final answer, or its NXDOMAIN/NODATA with the zone's SOA alone, answered there (back the way the query came); the rest finished by userspace. Unset: on with `[xdp]` interfaces and no `forwarders` (off with forwarders: the kernel does not forward; `true` with forwarders is an error), and off with a warning naming the port when a port of `kernel_iteration_ports` is taken. Next hops from `bpf_fib_lookup`, or, where forwarding is off (the default), from the daemon's next-hop table (README.md, \"Resolver misses iterated in the kernel\")."),
    k("resolver", "kernel_iteration_ports", r#""61000-61255""#, "LOW-HIGH: source ports the daemon reserves for kernel iteration (binds them all, so no other socket of the host takes them); 1024 and above, at most 32768."),
    k("resolver", "kernel_iteration_pending", "16384", "Queries the kernel may have sent and not yet seen answered (the pending map's size, 1 to 1048576); a miss that finds it full goes to userspace (`kit.handover_pending_full`)."),
];

/// The `xdns.toml(5)` manual page, in roff.
pub fn manual_page(version: &str) -> String {
    let esc = |s: &str| s.replace('\\', "\\\\").replace('-', "\\-");
    let mut out = format!(
        ".TH XDNS.TOML 5 \"\" \"xdns {}\" \"File Formats\"\n.SH NAME\nxdns.toml \\- configuration of the xdns DNS server\n\
         .SH DESCRIPTION\nA TOML file read by \\fBxdns serve\\fR and \\fBxdns check\\fR (see \\fBxdns\\fR(8)). Every table rejects unknown keys; \
         every error names the file, the line and the reason. SIGHUP reloads the file; keys that need a restart keep their running values \
         (\\fBxdns serve \\-\\-takeover\\fR applies them without losing a query).\n",
        esc(version)
    );
    let mut section = None;
    for key in KEYS {
        if section != Some(key.section) {
            section = Some(key.section);
            let title = match key.section {
                "" => "TOP-LEVEL KEYS".to_string(),
                "zone" | "key" | "catalog" => format!("[[{}]]", key.section),
                s => format!("[{s}]"),
            };
            out.push_str(&format!(".SH {}\n", esc(&title)));
        }
        out.push_str(&format!(".TP\n\\fB{}\\fR (default: {})\n{}\n", esc(key.name), esc(key.default), esc(key.meaning)));
    }
    out.push_str(".SH FILES\n/etc/xdns/xdns.toml\n.SH SEE ALSO\n\\fBxdns\\fR(8)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{parse, Overrides};
    use std::collections::BTreeSet;

    /// The keys the parser accepts in `section`, from its own error for an unknown key
    /// ("unknown field `zzz`, expected one of `a`, `b`").
    fn parser_keys(section: &str) -> BTreeSet<String> {
        let text = match section {
            "" => "zzz_unknown = 1\n".to_string(),
            "zone" | "key" | "catalog" => format!("[[{section}]]\nzzz_unknown = 1\n"),
            s => format!("[{s}]\nzzz_unknown = 1\n"),
        };
        let errs = parse(&text, std::path::Path::new("/tmp/x.toml"), &Overrides::default()).unwrap_err();
        let msg = errs[0].reason.clone();
        let expected = msg.split("expected").nth(1).unwrap_or_else(|| panic!("{msg}"));
        expected.split('`').skip(1).step_by(2).map(str::to_string).collect()
    }

    #[test]
    fn every_key_the_parser_accepts_is_documented_and_nothing_else() {
        let tables: BTreeSet<&str> = ["", "tcp", "log", "guard", "dnstap", "telemetry", "xdp", "zone", "key", "catalog", "resolver", "inpath"].into();
        for section in &tables {
            let mut parser = parser_keys(section);
            if section.is_empty() {
                // tables are documented by their keys
                parser.retain(|k| !tables.contains(k.as_str()));
            }
            let doc: BTreeSet<String> = KEYS.iter().filter(|k| k.section == *section).map(|k| k.name.to_string()).collect();
            assert_eq!(parser, doc, "section [{section}]: parser keys vs config_doc::KEYS");
        }
        assert!(KEYS.iter().all(|k| tables.contains(k.section)), "a key in an unknown section");
    }

    #[test]
    fn every_key_is_in_the_readme_tables() {
        let readme = include_str!("../README.md");
        for key in KEYS {
            let cell = match key.section {
                "" | "resolver" => format!("`{}`", key.name),
                "xdp" | "zone" | "key" | "catalog" => key.name.to_string(),
                s => format!("`[{s}] {}`", key.name),
            };
            assert!(readme.contains(&cell), "crates/xdns/README.md lacks {cell}");
        }
    }

    #[test]
    fn the_manual_page_has_every_key() {
        let page = manual_page("0.1.0");
        assert!(page.starts_with(".TH XDNS.TOML 5"));
        for key in KEYS {
            assert!(page.contains(&format!("\\fB{}\\fR", key.name.replace('-', "\\-"))), "{}", key.name);
        }
    }
}
