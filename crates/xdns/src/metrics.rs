//! The optional Prometheus endpoint (`metrics = "ADDR:PORT"`): `GET /metrics` answers the same
//! counters as `xdns stats`, encoded by `prometheus-client` in OpenMetrics text.
//!
//! The HTTP side is a deliberately tiny HTTP/1.1 responder: read one request head (bounded in
//! size and time), answer, close. Families:
//! `xdns_queries_total{proto,qtype}` (answered), `xdns_received_total{proto}` (all messages),
//! `xdns_responses_total{rcode}`, `xdns_truncated_total`, `xdns_dropped_total{reason}`,
//! `xdns_tcp_connections_total{result}`, `xdns_tcp_idle_closed_total`, `xdns_tcp_open`,
//! `xdns_reloads_total`, `xdns_reload_failures_total`, `xdns_zone_load_failures_total`,
//! `xdns_uptime_seconds`, `xdns_zone_serial{zone}`, `xdns_zone_records{zone}`, for secondary
//! zones `xdns_zone_transfers_total{zone}`, `xdns_zone_transfer_failures_total{zone}`,
//! `xdns_zone_notifies_refused_total{zone}`, `xdns_zone_expired{zone}`,
//! `xdns_zone_last_transfer_milliseconds{zone}`, `xdns_zone_last_refresh_timestamp_seconds{zone}`,
//! `xdns_xdp_total{counter}`, `xdns_xdp_table_answers{state}`, `xdns_xdp_data_active`,
//! `xdns_xdp_attached{interface,mode}` (with XDP on), and one family per counter group of
//! [`Snapshot::groups`] (`xdns_GROUP_total{LABEL}`, or a gauge `xdns_GROUP{LABEL}`):
//! `xdns_xdp_memo_total{counter}`, `xdns_xdp_reply_total{counter}`,
//! `xdns_xdp_tx_errors_total{interface}`, `xdns_xdp_fallbacks_total{interface}` (with XDP
//! on), `xdns_resolver_total{counter}` (with `[resolver]`).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::server::Shared;
use crate::stats::Snapshot;
#[cfg(test)]
use crate::stats::Group;

/// Largest request head read.
const MAX_HEAD: usize = 8192;
/// Time allowed for a whole request.
const TIMEOUT: Duration = Duration::from_secs(5);

type Labels = Vec<(String, String)>;

fn counter_family(
    reg: &mut Registry,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, u64)>,
) {
    let fam = Family::<Labels, Counter>::default();
    for (labels, v) in rows {
        fam.get_or_create(&labels).inc_by(v);
    }
    reg.register(name, help, fam);
}

fn counter(reg: &mut Registry, name: &str, help: &str, v: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(v);
    reg.register(name, help, c);
}

fn gauge_family(
    reg: &mut Registry,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, i64)>,
) {
    let fam = Family::<Labels, Gauge>::default();
    for (labels, v) in rows {
        fam.get_or_create(&labels).set(v);
    }
    reg.register(name, help, fam);
}

fn l1(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

/// The transfer state of each secondary zone (`primaries`), as in `xdns stats`: transfers
/// and failed checks since start, refused NOTIFYs, whether the zone is past its expire time,
/// the last transfer's duration and the time of the last successful check.
fn transfer_families(reg: &mut Registry, s: &Snapshot) {
    let secondaries: Vec<_> = s
        .zones
        .iter()
        .filter_map(|z| z.transfer.as_ref().map(|t| (l1("zone", &z.name), t)))
        .collect();
    if secondaries.is_empty() {
        return;
    }
    let gauge = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    counter_family(
        reg,
        "xdns_zone_transfers",
        "Zone transfers (AXFR or IXFR) completed since start, per secondary zone.",
        secondaries.iter().map(|(l, t)| (l.clone(), t.transfers)),
    );
    counter_family(
        reg,
        "xdns_zone_transfer_failures",
        "Checks with the primaries that failed (every primary), per secondary zone.",
        secondaries.iter().map(|(l, t)| (l.clone(), t.failures)),
    );
    counter_family(
        reg,
        "xdns_zone_notifies_refused",
        "NOTIFY messages refused (not from a primary, unsigned or badly signed), per secondary zone.",
        secondaries.iter().map(|(l, t)| (l.clone(), t.notifies_refused)),
    );
    gauge_family(
        reg,
        "xdns_zone_expired",
        "1 while a secondary zone is past its expire time (answered SERVFAIL).",
        secondaries.iter().map(|(l, t)| (l.clone(), i64::from(t.expired))),
    );
    gauge_family(
        reg,
        "xdns_zone_last_transfer_milliseconds",
        "Duration of the last transfer, from the request to serving the new version.",
        secondaries
            .iter()
            .filter_map(|(l, t)| t.last_transfer_ms.map(|v| (l.clone(), gauge(v)))),
    );
    gauge_family(
        reg,
        "xdns_zone_last_refresh_timestamp_seconds",
        "Unix time of the last successful check with a primary.",
        secondaries
            .iter()
            .filter_map(|(l, t)| t.last_refresh.map(|v| (l.clone(), gauge(v)))),
    );
}

/// Encode `s` as OpenMetrics text.
pub fn render(s: &Snapshot) -> String {
    let mut reg = Registry::default();
    let by_proto_qtype = s.qtypes_by_proto.iter().flat_map(|(proto, m)| {
        m.iter().map(move |(qt, &n)| {
            (
                vec![
                    ("proto".to_string(), proto.clone()),
                    ("qtype".to_string(), qt.clone()),
                ],
                n,
            )
        })
    });
    counter_family(
        &mut reg,
        "xdns_queries",
        "Queries answered, by transport and QTYPE.",
        by_proto_qtype,
    );
    counter_family(
        &mut reg,
        "xdns_received",
        "Messages received, by transport.",
        s.queries.iter().map(|(k, &v)| (l1("proto", k), v)),
    );
    counter_family(
        &mut reg,
        "xdns_responses",
        "Responses, by RCODE.",
        s.rcodes.iter().map(|(k, &v)| (l1("rcode", k), v)),
    );
    counter(
        &mut reg,
        "xdns_truncated",
        "UDP responses sent with TC=1.",
        s.truncated,
    );
    counter_family(
        &mut reg,
        "xdns_dropped",
        "Messages not answered, by reason.",
        s.dropped.iter().map(|(k, &v)| (l1("reason", k), v)),
    );
    counter_family(
        &mut reg,
        "xdns_tcp_connections",
        "TCP connections, accepted or refused over the limit.",
        [
            (l1("result", "accepted"), s.tcp.accepted),
            (l1("result", "refused"), s.tcp.refused),
        ],
    );
    counter(
        &mut reg,
        "xdns_tcp_idle_closed",
        "TCP connections closed by the idle timeout.",
        s.tcp.idle_closed,
    );
    let open = Gauge::<i64>::default();
    open.set(i64::try_from(s.tcp.open).unwrap_or(i64::MAX));
    reg.register("xdns_tcp_open", "TCP connections open now.", open);
    counter(
        &mut reg,
        "xdns_reloads",
        "Reloads attempted.",
        s.reloads.total,
    );
    counter(
        &mut reg,
        "xdns_reload_failures",
        "Reloads with at least one error.",
        s.reloads.failed,
    );
    counter(
        &mut reg,
        "xdns_zone_load_failures",
        "Zones that failed to load on reload.",
        s.reloads.zones_failed,
    );
    let up = Gauge::<i64>::default();
    up.set(i64::try_from(s.uptime_seconds).unwrap_or(i64::MAX));
    reg.register("xdns_uptime_seconds", "Seconds since start.", up);
    gauge_family(
        &mut reg,
        "xdns_zone_serial",
        "SOA serial of each zone served.",
        s.zones
            .iter()
            .map(|z| (l1("zone", &z.name), i64::from(z.serial))),
    );
    gauge_family(
        &mut reg,
        "xdns_zone_records",
        "Records in each zone served.",
        s.zones.iter().map(|z| {
            (
                l1("zone", &z.name),
                i64::try_from(z.records).unwrap_or(i64::MAX),
            )
        }),
    );
    transfer_families(&mut reg, s);
    counter_family(
        &mut reg,
        "xdns_xdp",
        "XDP fast path verdicts.",
        s.xdp.iter().map(|(k, &v)| (l1("counter", k), v)),
    );
    gauge_family(
        &mut reg,
        "xdns_xdp_table_answers",
        "Answers of the active zone data in the XDP answer table (in_table) and only in the slower hash map (left_out).",
        s.xdp_table.iter().map(|(k, &v)| {
            let state = k.strip_prefix("answers_").unwrap_or(k);
            (l1("state", state), i64::try_from(v).unwrap_or(i64::MAX))
        }),
    );
    if let Some(active) = s.xdp_data_active {
        let g = Gauge::<i64>::default();
        g.set(i64::from(active));
        reg.register(
            "xdns_xdp_data_active",
            "1 when zone data is in the XDP maps; 0 while a fresh start fills them (the kernel passes every query to userspace meanwhile).",
            g,
        );
    }
    gauge_family(
        &mut reg,
        "xdns_xdp_attached",
        "1 for each configured interface, labelled with how it runs the XDP program: native, generic (skb path), offload, or none.",
        s.xdp_attached.iter().map(|(i, how)| {
            let labels = vec![("interface".to_string(), i.clone()), ("mode".to_string(), how.clone())];
            (labels, 1)
        }),
    );
    for (name, g) in &s.groups {
        let rows = g.values.iter().map(|(k, &v)| (l1(g.meta.label, k), v));
        let name = format!("xdns_{name}");
        if g.meta.gauge {
            gauge_family(&mut reg, &name, g.meta.help, rows.map(|(l, v)| (l, i64::try_from(v).unwrap_or(i64::MAX))));
        } else {
            counter_family(&mut reg, &name, g.meta.help, rows);
        }
    }
    let mut out = String::new();
    if encode(&mut out, &reg).is_err() {
        out.clear();
    }
    // the latency histograms (telemetry.rs), before the end marker
    let eof = out.rfind("# EOF").unwrap_or(out.len());
    out.insert_str(eof, &crate::telemetry::metrics_text(s));
    out
}

/// Serve `/metrics` until shutdown.
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            _ = crate::server::stopped(&mut stop) => break,
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(TIMEOUT, handle(stream, shared)).await;
                    });
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

/// The response for a request head: (status line, content type, body).
fn route(head: &[u8]) -> (&'static str, &'static str, bool) {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or_default();
    let mut parts = line.split(|&b| b == b' ');
    let (method, target) = (
        parts.next().unwrap_or_default(),
        parts.next().unwrap_or_default(),
    );
    let path = target.split(|&b| b == b'?').next().unwrap_or_default();
    match (method, path) {
        (b"GET", b"/metrics") => (
            "200 OK",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            true,
        ),
        (b"GET", _) => ("404 Not Found", "text/plain", false),
        _ => ("405 Method Not Allowed", "text/plain", false),
    }
}

async fn handle(mut stream: TcpStream, shared: Arc<Shared>) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            break;
        }
    }
    let (status, ctype, ok) = route(&head);
    let body = if ok {
        let snap = tokio::task::spawn_blocking(move || shared.snapshot())
            .await
            .map_err(std::io::Error::other)?;
        render(&snap)
    } else {
        format!("{status}\n")
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(resp.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{Stats, TransferInfo, ZoneInfo};
    use xdns_zone::{Outcome, Transport};

    #[test]
    fn renders_counters() {
        let stats = Stats::new();
        let sh = stats.shard();
        sh.record(
            Transport::Udp,
            Outcome::Answered {
                rcode: 3,
                qtype: 28,
                truncated: false,
            },
        );
        sh.record(
            Transport::Tcp,
            Outcome::Answered {
                rcode: 0,
                qtype: 1,
                truncated: false,
            },
        );
        let mut s = stats.snapshot();
        s.zones.push(ZoneInfo {
            name: "example.com.".into(),
            serial: 42,
            records: 5,
            ..Default::default()
        });
        s.zones.push(ZoneInfo {
            name: "sec.example.".into(),
            serial: 7,
            records: 3,
            transfer: Some(TransferInfo {
                transfers: 4,
                failures: 2,
                notifies_refused: 1,
                expired: true,
                last_transfer_ms: Some(12),
                last_refresh: Some(1_700_000_000),
                ..Default::default()
            }),
        });
        s.xdp_table.insert("answers_in_table".into(), 7);
        s.xdp_table.insert("answers_left_out".into(), 0);
        s.groups.insert("xdp_memo".into(), Group::counters("memo", "counter", [("hits".into(), 11)]));
        s.groups.insert("xdp_reply".into(), Group::counters("reply", "counter", [("kept".into(), 3)]));
        s.xdp_data_active = Some(true);
        s.xdp_attached.insert("s0".into(), "native".into());
        s.groups.insert("xdp_tx_errors".into(), Group::counters("errors", "interface", [("s0".into(), 5)]));
        s.groups.insert("xdp_fallbacks".into(), Group::counters("fallbacks", "interface", [("s0".into(), 1)]));
        let mut level = Group::counters("a level", "pool", [("a".into(), 2)]);
        level.meta.gauge = true;
        s.groups.insert("some_level".into(), level);
        let text = render(&s);
        for want in [
            "xdns_xdp_data_active 1",
            "xdns_xdp_attached{interface=\"s0\",mode=\"native\"} 1",
            "xdns_xdp_tx_errors_total{interface=\"s0\"} 5",
            "xdns_xdp_fallbacks_total{interface=\"s0\"} 1",
            "xdns_xdp_memo_total{counter=\"hits\"} 11",
            "xdns_xdp_reply_total{counter=\"kept\"} 3",
            "xdns_some_level{pool=\"a\"} 2",
            "xdns_xdp_table_answers{state=\"in_table\"} 7",
            "xdns_xdp_table_answers{state=\"left_out\"} 0",
            "xdns_queries_total{proto=\"udp\",qtype=\"AAAA\"} 1",
            "xdns_queries_total{proto=\"tcp\",qtype=\"A\"} 1",
            "xdns_responses_total{rcode=\"NXDOMAIN\"} 1",
            "xdns_received_total{proto=\"udp\"} 1",
            "xdns_dropped_total{reason=\"malformed\"} 0",
            "xdns_zone_serial{zone=\"example.com.\"} 42",
            "xdns_zone_transfers_total{zone=\"sec.example.\"} 4",
            "xdns_zone_transfer_failures_total{zone=\"sec.example.\"} 2",
            "xdns_zone_notifies_refused_total{zone=\"sec.example.\"} 1",
            "xdns_zone_expired{zone=\"sec.example.\"} 1",
            "xdns_zone_last_transfer_milliseconds{zone=\"sec.example.\"} 12",
            "xdns_zone_last_refresh_timestamp_seconds{zone=\"sec.example.\"} 1700000000",
            "# EOF",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
    }

    #[test]
    fn routes() {
        let table: [(&[u8], &str); 5] = [
            (b"GET /metrics HTTP/1.1\r\n\r\n", "200 OK"),
            (b"GET /metrics?x=1 HTTP/1.1\r\n\r\n", "200 OK"),
            (b"GET / HTTP/1.1\r\n\r\n", "404 Not Found"),
            (b"POST /metrics HTTP/1.1\r\n\r\n", "405 Method Not Allowed"),
            (b"", "405 Method Not Allowed"),
        ];
        for (head, status) in table {
            assert_eq!(route(head).0, status, "{}", String::from_utf8_lossy(head));
        }
    }
}
