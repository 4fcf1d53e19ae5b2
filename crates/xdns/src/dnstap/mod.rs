//! dnstap: every query and response the daemon handles, as dnstap messages ([`proto`]) in
//! Frame Streams ([`fstrm`]), to a unix socket (a reader such as `fstrm_capture`, `dnstap`,
//! or a collector) or to a file (read by `kdig -G`, `dnstap-read`).
//!
//! What is logged (`[dnstap]`, `log_queries`/`log_responses` choose):
//! - `AUTH_QUERY`/`AUTH_RESPONSE`: messages answered from the served zones (and everything
//!   else the query plan answers or drops that is not the resolver's);
//! - `CLIENT_QUERY`/`CLIENT_RESPONSE`: queries the resolver takes (`[resolver]`), with
//!   their answers, whether from the cache at once or after a resolution;
//! - `RESOLVER_QUERY`/`RESOLVER_RESPONSE`: the resolver's upstream queries and the replies
//!   it accepted ([`Tapped`], around its network); their own source address is not known
//!   there and left out.
//!
//! The data path never waits: [`Dnstap::log`] encodes the message and offers it to a
//! bounded queue (`queue` messages); when the queue is full the message is dropped and
//! counted (`dnstap.dropped_queue_full`). One writer thread drains the queue into the sink;
//! while no reader is connected (none listening yet, restarted, too slow: a write waiting
//! longer than [`IO_TIMEOUT`] gives the connection up) messages are dropped and counted
//! (`dnstap.dropped_no_reader`), and the writer connects again every [`RETRY`]; an idle
//! writer checks every [`RETRY`] that its reader is still there. The kernel
//! path feeds the same queue through [`log`]: with `xdp = true`, the XDP answers a telemetry
//! rule selects (its 1 in N), read from a ring buffer by [`kernel::Reader`].
//!
//! One sink per process ([`install`]): SIGHUP with changed settings stops the old writer
//! (STOP, and FINISH awaited on a socket) and starts a new one; unchanged settings keep it.

pub mod fstrm;
pub mod kernel;
pub mod proto;

use std::io::{self, BufWriter, Write};
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::mpsc::{self, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwapOption;
use serde::Deserialize;
use toml::Spanned;

use crate::config::ConfigError;
pub use proto::{Kind, Message, Proto};

/// How long the writer waits before connecting to the socket again.
pub const RETRY: Duration = Duration::from_secs(1);
/// A write to, or a handshake with, the reader that takes longer gives the connection up.
pub const IO_TIMEOUT: Duration = Duration::from_secs(2);
/// Default `queue`.
pub const DEFAULT_QUEUE: usize = 16_384;

/// Where the messages go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sink {
    /// A Frame Streams reader listening on this unix socket (bidirectional).
    Socket(PathBuf),
    /// This file, truncated when opened (unidirectional).
    File(PathBuf),
}

/// `[dnstap]`, validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub sink: Sink,
    pub identity: String,
    pub version: String,
    pub log_queries: bool,
    pub log_responses: bool,
    pub queue: usize,
    /// The XDP answers the telemetry rules select go to dnstap too ([`kernel`]).
    pub xdp: bool,
}

/// `[dnstap]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDnstap {
    socket: Option<Spanned<String>>,
    file: Option<Spanned<String>>,
    identity: Option<String>,
    version: Option<String>,
    log_queries: Option<bool>,
    log_responses: Option<bool>,
    queue: Option<Spanned<i64>>,
    xdp: Option<bool>,
}

/// Longest unix socket path (`sun_path` less its NUL).
const MAX_SOCKET_PATH: usize = 107;

/// This host's name, the default `identity`.
fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is valid for its length; gethostname NUL-terminates within it (or
    // truncates, and the last byte stays 0).
    let r = unsafe { libc::gethostname(buf.as_mut_ptr() as *mut libc::c_char, buf.len() - 1) };
    if r != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

/// Validate `[dnstap]` (paths relative to `base`, the configuration's directory).
pub fn settings(
    file: Spanned<FileDnstap>,
    base: &Path,
    err: &dyn Fn(Option<usize>, String) -> ConfigError,
    line: &dyn Fn(std::ops::Range<usize>) -> Option<usize>,
    errors: &mut Vec<ConfigError>,
) -> Option<Settings> {
    let at = line(file.span());
    let f = file.into_inner();
    let path = |p: &Spanned<String>, what: &str, errors: &mut Vec<ConfigError>| {
        if p.get_ref().trim().is_empty() {
            errors.push(err(line(p.span()), format!("[dnstap] {what} must not be empty")));
            return None;
        }
        Some(base.join(p.get_ref()))
    };
    let sink = match (&f.socket, &f.file) {
        (Some(s), None) => {
            let p = path(s, "socket", errors)?;
            if p.as_os_str().len() > MAX_SOCKET_PATH {
                errors.push(err(line(s.span()), format!("[dnstap] socket path {} is longer than {MAX_SOCKET_PATH} bytes", p.display())));
                return None;
            }
            Sink::Socket(p)
        }
        (None, Some(fl)) => {
            let p = path(fl, "file", errors)?;
            if !p.parent().is_some_and(|d| d.as_os_str().is_empty() || d.is_dir()) {
                errors.push(err(line(fl.span()), format!("[dnstap] file {}: its directory does not exist", p.display())));
                return None;
            }
            if p.is_dir() {
                errors.push(err(line(fl.span()), format!("[dnstap] file {} is a directory", p.display())));
                return None;
            }
            Sink::File(p)
        }
        (Some(_), Some(_)) => {
            errors.push(err(at, "[dnstap] has both `socket` and `file`: give one".into()));
            return None;
        }
        (None, None) => {
            errors.push(err(at, "[dnstap] needs `socket` (a Frame Streams reader) or `file`".into()));
            return None;
        }
    };
    let (log_queries, log_responses) = (f.log_queries.unwrap_or(true), f.log_responses.unwrap_or(true));
    if !log_queries && !log_responses {
        errors.push(err(at, "[dnstap] log_queries and log_responses are both false: nothing to log (leave [dnstap] out)".into()));
    }
    let mut queue = DEFAULT_QUEUE;
    if let Some(q) = &f.queue {
        match usize::try_from(*q.get_ref()) {
            Ok(n) if (1..=1 << 24).contains(&n) => queue = n,
            _ => errors.push(err(line(q.span()), format!("[dnstap] queue {} out of range 1..=16777216", q.get_ref()))),
        }
    }
    Some(Settings {
        sink,
        identity: f.identity.unwrap_or_else(hostname),
        version: f.version.unwrap_or_else(|| format!("xdns {}", env!("CARGO_PKG_VERSION"))),
        log_queries,
        log_responses,
        queue,
        xdp: f.xdp.unwrap_or(false),
    })
}

/// The counters of the `dnstap` stats group (they live across reloads).
#[derive(Default)]
pub struct Counters {
    /// Messages written to the sink.
    pub sent: AtomicU64,
    /// Messages dropped because the queue was full (the writer could not keep up).
    pub dropped_queue_full: AtomicU64,
    /// Messages dropped because no reader was connected, or the connection failed.
    pub dropped_no_reader: AtomicU64,
    /// Sinks opened: handshakes completed with a reader, or files opened.
    pub connections: AtomicU64,
}

/// The two ends of a client's message, as far as the transport knows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ends {
    /// The client's address and port.
    pub client: Option<SocketAddr>,
    /// The server's (ours) the message was sent to.
    pub server: Option<SocketAddr>,
}

/// Log the answer to a client's query that the resolver answers after a resolution
/// (`CLIENT_RESPONSE`; the query was logged when it came, by the query plan).
pub fn client_response(ends: Ends, proto: Proto, wire: &[u8], query_time: Option<SystemTime>) {
    if !enabled() || wire.is_empty() {
        return;
    }
    let m = Message { kind: Kind::ClientResponse, proto, query_addr: ends.client, response_addr: ends.server, wire, time: SystemTime::now(), query_time };
    log(&m);
}

/// The process's counters.
pub static COUNTERS: Counters = Counters {
    sent: AtomicU64::new(0),
    dropped_queue_full: AtomicU64::new(0),
    dropped_no_reader: AtomicU64::new(0),
    connections: AtomicU64::new(0),
};

/// A running dnstap sink: the queue's sending side and the writer thread.
pub struct Dnstap {
    settings: Settings,
    tx: Option<SyncSender<Vec<u8>>>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Dnstap {
    /// Start the writer thread for `settings` (it connects or opens the file itself).
    pub fn start(settings: Settings) -> io::Result<Self> {
        let (tx, rx) = mpsc::sync_channel(settings.queue);
        let sink = settings.sink.clone();
        let writer = std::thread::Builder::new().name("xdns-dnstap".into()).spawn(move || run(rx, sink))?;
        Ok(Self { settings, tx: Some(tx), writer: Some(writer) })
    }

    /// The settings it runs with.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Whether messages of `kind` are logged.
    pub fn wants(&self, kind: Kind) -> bool {
        if kind.is_query() {
            self.settings.log_queries
        } else {
            self.settings.log_responses
        }
    }

    /// Log `m` (encoded here, written by the writer thread); never blocks: a full queue
    /// drops it (counted).
    pub fn log(&self, m: &Message<'_>) {
        if !self.wants(m.kind) {
            return;
        }
        let Some(tx) = &self.tx else { return };
        let mut frame = Vec::with_capacity(m.wire.len() + 96 + self.settings.identity.len() + self.settings.version.len());
        fstrm::begin_data(&mut frame);
        proto::encode(self.settings.identity.as_bytes(), self.settings.version.as_bytes(), m, &mut frame);
        fstrm::finish_data(&mut frame);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(frame) {
            COUNTERS.dropped_queue_full.fetch_add(1, Relaxed);
        }
    }

    /// Close the queue and wait (at most `wait`) for the writer to write what it holds and
    /// end the stream.
    fn close(mut self, wait: Duration) {
        self.tx = None;
        let Some(w) = self.writer.take() else { return };
        let t = Instant::now();
        while !w.is_finished() && t.elapsed() < wait {
            std::thread::sleep(Duration::from_millis(5));
        }
        if w.is_finished() {
            let _ = w.join();
        }
    }
}

/// The sink in use, if any.
static TAP: ArcSwapOption<Dnstap> = ArcSwapOption::const_empty();
/// Whether [`TAP`] is set (a cheaper test for transports deciding to gather addresses).
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether a sink is configured.
pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}

/// The sink in use (a cheap guard; hold it only for the message at hand).
pub fn current() -> arc_swap::Guard<Option<Arc<Dnstap>>> {
    TAP.load()
}

/// Log `m` to the sink in use, if any: the entry point for paths that do not hold the sink
/// (the resolver's upstream queries; kernel events fed from a ring buffer later).
pub fn log(m: &Message<'_>) {
    if let Some(t) = TAP.load().as_deref() {
        t.log(m);
    }
}

/// Serialises [`install`] and [`shutdown`].
static INSTALL: Mutex<()> = Mutex::new(());

/// Make `settings` the sink in use (at start and on every reload): unchanged settings keep
/// the running writer; otherwise the old one ends its stream and a new one starts.
pub fn install(settings: Option<&Settings>) {
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let running = TAP.load_full();
    if running.as_ref().map(|t| t.settings()) == settings {
        return;
    }
    let new = match settings.map(|s| Dnstap::start(s.clone())) {
        Some(Ok(d)) => Some(Arc::new(d)),
        Some(Err(e)) => {
            tracing::error!(error = %e, "dnstap: cannot start the writer thread; not logging");
            None
        }
        None => None,
    };
    if let Some(n) = &new {
        tracing::info!(sink = ?n.settings.sink, "dnstap on");
    } else if running.is_some() {
        tracing::info!("dnstap off");
    }
    ENABLED.store(new.is_some(), Relaxed);
    let old = TAP.swap(new);
    drop(running);
    retire(old);
}

/// Stop logging and let the writer end its stream (at stop).
pub fn shutdown() {
    let _one = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    ENABLED.store(false, Relaxed);
    retire(TAP.swap(None));
}

/// An old sink: closed once nothing else holds it (a message being logged holds it for
/// that long only), else its writer ends when the last holder lets go.
fn retire(old: Option<Arc<Dnstap>>) {
    let Some(mut old) = old else { return };
    let t = Instant::now();
    loop {
        match Arc::try_unwrap(old) {
            Ok(d) => return d.close(IO_TIMEOUT * 2),
            Err(still) if t.elapsed() < Duration::from_millis(200) => {
                old = still;
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(_) => return,
        }
    }
}

/// The `dnstap` stats group, while a sink is configured.
pub fn snapshot(s: &mut crate::stats::Snapshot) {
    if !enabled() {
        return;
    }
    let c = &COUNTERS;
    s.groups.insert(
        "dnstap".into(),
        crate::stats::Group::counters(
            "dnstap messages: sent, dropped (queue full, no reader), sinks opened",
            "counter",
            [
                ("sent".to_string(), c.sent.load(Relaxed)),
                ("dropped_queue_full".to_string(), c.dropped_queue_full.load(Relaxed)),
                ("dropped_no_reader".to_string(), c.dropped_no_reader.load(Relaxed)),
                ("connections".to_string(), c.connections.load(Relaxed)),
            ],
        ),
    );
}

/// An open sink.
enum Output {
    File(BufWriter<std::fs::File>),
    Socket(BufWriter<UnixStream>, UnixStream),
}

impl Output {
    /// Open `sink`: the file (START written), or the socket (READY, ACCEPT, START).
    fn open(sink: &Sink) -> io::Result<Self> {
        let start = fstrm::control(fstrm::START, Some(fstrm::CONTENT_TYPE));
        match sink {
            Sink::File(p) => {
                let mut w = BufWriter::new(std::fs::File::create(p)?);
                w.write_all(&start)?;
                w.flush()?;
                Ok(Output::File(w))
            }
            Sink::Socket(p) => {
                let s = UnixStream::connect(p)?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                let mut rd = s.try_clone()?;
                let mut w = BufWriter::with_capacity(64 << 10, s);
                w.write_all(&fstrm::control(fstrm::READY, Some(fstrm::CONTENT_TYPE)))?;
                w.flush()?;
                let (kind, types) = fstrm::read_control(&mut rd)?;
                if kind != fstrm::ACCEPT || !types.iter().any(|t| t == fstrm::CONTENT_TYPE) {
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "the reader did not ACCEPT protobuf:dnstap.Dnstap"));
                }
                w.write_all(&start)?;
                w.flush()?;
                Ok(Output::Socket(w, rd))
            }
        }
    }

    /// Whether a socket's reader has closed its end (nothing to read is not that).
    fn hung_up(&self) -> bool {
        let Output::Socket(_, rd) = self else { return false };
        let mut b = [0u8; 1];
        // SAFETY: valid fd owned by `rd`; a one-byte buffer of that length.
        let r = unsafe { libc::recv(rd.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
        r == 0 || (r < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock)
    }

    fn writer(&mut self) -> &mut dyn Write {
        match self {
            Output::File(w) => w,
            Output::Socket(w, _) => w,
        }
    }

    /// End the stream: STOP, and on a socket the reader's FINISH (awaited at most
    /// [`IO_TIMEOUT`]).
    fn finish(mut self) {
        let stop = fstrm::control(fstrm::STOP, None);
        let w = self.writer();
        if w.write_all(&stop).and_then(|()| w.flush()).is_err() {
            return;
        }
        if let Output::Socket(_, rd) = &mut self {
            match fstrm::read_control(rd) {
                Ok((fstrm::FINISH, _)) => {}
                other => tracing::debug!(reply = ?other, "dnstap: the reader did not FINISH"),
            }
        }
    }
}

/// The writer thread: frames from `rx` into the sink, connecting again after failures,
/// until every sender is gone.
fn run(rx: mpsc::Receiver<Vec<u8>>, sink: Sink) {
    let mut out: Option<Output> = None;
    let mut next_try = Instant::now();
    let mut warned = false;
    loop {
        if out.is_none() && Instant::now() >= next_try {
            match Output::open(&sink) {
                Ok(o) => {
                    COUNTERS.connections.fetch_add(1, Relaxed);
                    tracing::info!(sink = ?sink, "dnstap: writing");
                    warned = false;
                    out = Some(o);
                }
                Err(e) => {
                    if !warned {
                        tracing::warn!(sink = ?sink, error = %e, "dnstap: cannot open the sink; retrying every second, messages dropped meanwhile");
                        warned = true;
                    }
                    next_try = Instant::now() + RETRY;
                }
            }
        }
        let first = match rx.recv_timeout(RETRY) {
            Ok(f) => f,
            Err(RecvTimeoutError::Timeout) => {
                // idle: notice a reader gone meanwhile, so the next message finds a new one
                if out.as_ref().is_some_and(Output::hung_up) {
                    tracing::info!(sink = ?sink, "dnstap: the reader went away; connecting again");
                    out = None;
                    next_try = Instant::now();
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        let Some(o) = &mut out else {
            COUNTERS.dropped_no_reader.fetch_add(1, Relaxed);
            continue;
        };
        // this frame and whatever else waits, then one flush
        let mut batch = 1u64;
        let mut r = o.writer().write_all(&first);
        while r.is_ok() && batch < 1024 {
            match rx.try_recv() {
                Ok(f) => {
                    batch += 1;
                    r = o.writer().write_all(&f);
                }
                Err(_) => break,
            }
        }
        let r = r.and_then(|()| o.writer().flush());
        match r {
            Ok(()) => {
                COUNTERS.sent.fetch_add(batch, Relaxed);
            }
            Err(e) => {
                COUNTERS.dropped_no_reader.fetch_add(batch, Relaxed);
                tracing::warn!(sink = ?sink, error = %e, "dnstap: write failed; connecting again");
                warned = true;
                out = None;
                next_try = Instant::now() + RETRY;
            }
        }
    }
    if let Some(o) = out {
        o.finish();
    }
}

/// The network of the resolver with its upstream queries and the replies it accepted
/// logged (`RESOLVER_QUERY`, `RESOLVER_RESPONSE`) while a sink is configured.
pub struct Tapped<N>(pub N);

impl<N: xdns_resolver::Network> xdns_resolver::Network for Tapped<N> {
    fn udp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a xdns_resolver::msg::Expect,
        timeout: Duration,
    ) -> xdns_resolver::net::BoxFut<'a, io::Result<Vec<u8>>> {
        Box::pin(async move { upstream(Proto::Udp, query, expect.server, self.0.udp(query, expect, timeout)).await })
    }

    fn tcp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a xdns_resolver::msg::Expect,
        timeout: Duration,
    ) -> xdns_resolver::net::BoxFut<'a, io::Result<Vec<u8>>> {
        Box::pin(async move { upstream(Proto::Tcp, query, expect.server, self.0.tcp(query, expect, timeout)).await })
    }
}

/// One upstream exchange, logged around.
async fn upstream(
    proto: Proto,
    query: &[u8],
    server: SocketAddr,
    exchange: impl std::future::Future<Output = io::Result<Vec<u8>>>,
) -> io::Result<Vec<u8>> {
    let sent = SystemTime::now();
    if enabled() {
        log(&Message { kind: Kind::ResolverQuery, proto, query_addr: None, response_addr: Some(server), wire: query, time: sent, query_time: None });
    }
    let r = exchange.await;
    if let (Ok(reply), true) = (&r, enabled()) {
        let m = Message { kind: Kind::ResolverResponse, proto, query_addr: None, response_addr: Some(server), wire: reply, time: SystemTime::now(), query_time: Some(sent) };
        log(&m);
    }
    r
}

#[cfg(test)]
mod tests;
