//! The Unix control socket: `xdns stats` and reload requests.
//!
//! Protocol: the client sends one command line (`stats`, `reload`, `flush`, `flush name NAME`,
//! `flush subtree NAME`, `zone refresh NAME` or `zone retransfer NAME`), the server answers with one line and closes. `stats` answers the
//! [`Snapshot`] as JSON; `reload` answers `ok` once the reload has been queued; `flush`
//! empties the resolver's caches and the in-path cache (`[inpath]`), `flush name` forgets one name (resolver), `flush subtree` a name and
//! everything below it, each answering `ok N` (N answers removed); anything else answers
//! `error: …`. `takeover` (a new
//! `xdns serve --takeover`) is a short dialogue that passes fds: see [`crate::takeover`].

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, watch};

use crate::server::{Request, Shared};
use crate::stats::Snapshot;

/// Longest command accepted.
const MAX_COMMAND: u64 = 256;
/// Client and server I/O timeout.
const TIMEOUT: Duration = Duration::from_secs(10);

/// Bind the control socket at `path`, creating its directory and replacing a stale socket.
/// Fails if another server answers on it.
pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    if let Some(dir) = path.parent() {
        if !dir.as_os_str().is_empty() {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
    }
    if path.exists() {
        if StdUnixStream::connect(path).is_ok() {
            anyhow::bail!(
                "control socket {} is in use by a running server",
                path.display()
            );
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale {}", path.display()))?;
    }
    UnixListener::bind(path).with_context(|| format!("binding control socket {}", path.display()))
}

/// Serve control requests until shutdown.
pub async fn serve(
    listener: UnixListener,
    shared: Arc<Shared>,
    reload: mpsc::Sender<Request>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = crate::server::stopped(&mut stop) => break,
            r = listener.accept() => match r {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    let reload = reload.clone();
                    tokio::spawn(handle(stream, shared, reload));
                }
                Err(e) => {
                    tracing::warn!(error = %e, "control accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

/// One connection: a command line, then its answer within [`TIMEOUT`]; a `takeover` runs
/// under its own timeouts.
async fn handle(stream: UnixStream, shared: Arc<Shared>, reload: mpsc::Sender<Request>) {
    let (rd, wr) = stream.into_split();
    let mut reader = BufReader::new(rd.take(MAX_COMMAND));
    let mut line = String::new();
    match tokio::time::timeout(TIMEOUT, reader.read_line(&mut line)).await {
        Ok(Ok(_)) => {}
        _ => return,
    }
    if line.trim() == crate::takeover::COMMAND {
        if crate::progress::STARTUP.phase() != crate::progress::Phase::Serving {
            // nothing to hand over yet: the sockets and the XDP links come at the end of start-up
            let mut wr = wr;
            let _ = wr.write_all(b"error: the server is still starting; try again once it serves\n").await;
            return;
        }
        if let Err(e) = crate::takeover::serve(reader, wr, shared, reload).await {
            tracing::warn!(error = %e, "takeover connection failed");
        }
        return;
    }
    let _ = tokio::time::timeout(TIMEOUT, answer(line, wr, shared, reload)).await;
}

async fn answer(
    line: String,
    mut wr: tokio::net::unix::OwnedWriteHalf,
    shared: Arc<Shared>,
    reload: mpsc::Sender<Request>,
) -> io::Result<()> {
    let reply = match line.trim() {
        "stats" => {
            let snap = tokio::task::spawn_blocking(move || shared.snapshot())
                .await
                .map_err(io::Error::other)?;
            serde_json::to_string(&snap).map_err(io::Error::other)?
        }
        "reload" => match reload.try_send(Request::Reload) {
            Ok(()) => "ok".to_string(),
            Err(_) => "error: a reload is already queued".to_string(),
        },
        "flush" => {
            // the resolver's caches and the in-path cache, whichever run
            let resolver = shared.recursion.get().map(|r| r.resolver.flush());
            let inpath = match shared.inpath.get() {
                Some(i) => {
                    let i = i.clone();
                    Some(tokio::task::spawn_blocking(move || i.flush()).await.map_err(io::Error::other)?)
                }
                None => None,
            };
            match (resolver, inpath) {
                (None, None) => "error: no resolver and no in-path cache configured".to_string(),
                (_, Some(Err(e))) => format!("error: in-path cache not flushed: {e:#}"),
                (r, i) => format!("ok {}", r.unwrap_or(0) + i.and_then(Result::ok).unwrap_or(0)),
            }
        }
        cmd if cmd.starts_with("flush ") => flush_name(&shared, cmd),
        cmd if cmd.starts_with("guard ") => {
            let reply = shared.live_blocks.command(cmd);
            if reply.starts_with("ok") {
                crate::server::push_guard_lists(&shared).await;
            }
            reply
        }
        cmd if cmd.starts_with("zone ") => zone_command(&shared, cmd),
        cmd if cmd == "telemetry" || cmd.starts_with("telemetry ") => shared.telemetry.command(cmd),
        other => format!("error: unknown command `{}`", other.escape_debug()),
    };
    wr.write_all(reply.as_bytes()).await?;
    wr.write_all(b"\n").await?;
    wr.shutdown().await
}

/// `zone refresh NAME` / `zone retransfer NAME`: wake the secondary zone's task (it checks
/// its primaries at once; `retransfer` with an AXFR). The reply comes at once, not when the
/// transfer is done: `xdns stats` shows how it went.
fn zone_command(shared: &Shared, cmd: &str) -> String {
    let mut words = cmd.split_ascii_whitespace().skip(1);
    let (action, name) = match (words.next(), words.next(), words.next()) {
        (Some(a @ ("refresh" | "retransfer")), Some(n), None) => (a, n),
        _ => return format!("error: usage: zone refresh|retransfer NAME, not `{}`", cmd.escape_debug()),
    };
    let served = shared.served.load();
    match served.xfr.as_ref().and_then(|r| r.by_name(name)) {
        Some(sec) => {
            if action == "retransfer" {
                sec.retransfer();
            } else {
                sec.wake();
            }
            format!("ok {action} {}", sec.cfg.name)
        }
        None => format!("error: `{}` is not a secondary zone", name.escape_debug()),
    }
}

/// `flush name NAME` / `flush subtree NAME`: the reply line.
fn flush_name(shared: &Shared, cmd: &str) -> String {
    let mut words = cmd.split_ascii_whitespace().skip(1);
    let (subtree, text) = match (words.next(), words.next(), words.next()) {
        (Some("name"), Some(n), None) => (false, n),
        (Some("subtree"), Some(n), None) => (true, n),
        _ => return format!("error: usage: flush [name|subtree NAME], not `{}`", cmd.escape_debug()),
    };
    let name = match xdns_wire::name::from_presentation(text) {
        Ok(n) => xdns_wire::name::to_key(&n),
        Err(e) => return format!("error: `{}` is not a domain name: {e}", text.escape_debug()),
    };
    match shared.recursion.get() {
        Some(r) => format!("ok {}", r.resolver.flush_name(&name, subtree)),
        None => "error: no resolver configured".to_string(),
    }
}

/// Bind a control socket beside `path` (same directory), to be moved over `path` with
/// [`install`] once this process owns the service: a takeover must not cut the running server
/// off from its clients before it has handed over.
pub fn bind_aside(path: &Path) -> anyhow::Result<(UnixListener, PathBuf)> {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.new", std::process::id()));
    let aside = PathBuf::from(name);
    let _ = std::fs::remove_file(&aside);
    let l = UnixListener::bind(&aside)
        .with_context(|| format!("binding control socket {}", aside.display()))?;
    Ok((l, aside))
}

/// Move the socket bound by [`bind_aside`] over `path` (one `rename`: clients find either
/// the old server's socket or this one, never none).
pub fn install(aside: &Path, path: &Path) -> anyhow::Result<()> {
    std::fs::rename(aside, path)
        .with_context(|| format!("moving {} to {}", aside.display(), path.display()))
}

/// The identity (device, inode) of the socket file at `path`.
pub fn socket_id(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

/// Send `command` to the server at `path` and return its one-line reply (blocking).
pub fn request(path: &Path, command: &str) -> anyhow::Result<String> {
    let mut s = StdUnixStream::connect(path)
        .with_context(|| format!("connecting to {} (is xdns running?)", path.display()))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    s.set_write_timeout(Some(TIMEOUT))?;
    s.write_all(command.as_bytes())?;
    s.write_all(b"\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let out = out.trim_end().to_string();
    if let Some(e) = out.strip_prefix("error: ") {
        anyhow::bail!("server: {e}");
    }
    Ok(out)
}

/// Fetch the server's counters.
pub fn stats(path: &Path) -> anyhow::Result<Snapshot> {
    let text = request(path, "stats")?;
    serde_json::from_str(&text).context("the server's stats reply is not valid JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stats_reload_and_unknown_commands() {
        let dir = std::env::temp_dir().join(format!("xdns-control-{}", std::process::id()));
        let path = dir.join("sub/c.sock");
        let listener = bind(&path).unwrap();
        assert!(bind(&path).is_err(), "a live socket must not be replaced");
        let shared = Arc::new(Shared::new(Default::default()));
        shared
            .stats
            .tcp_accepted
            .fetch_add(3, std::sync::atomic::Ordering::Relaxed);
        let (tx, mut rx) = mpsc::channel(1);
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(serve(listener, shared, tx, stop_rx));

        let p = path.clone();
        let snap = tokio::task::spawn_blocking(move || stats(&p))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(snap.tcp.accepted, 3);
        let p = path.clone();
        let ok = tokio::task::spawn_blocking(move || request(&p, "reload"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(ok, "ok");
        assert!(matches!(rx.recv().await, Some(Request::Reload)));
        let p = path.clone();
        let bad = tokio::task::spawn_blocking(move || request(&p, "explode"))
            .await
            .unwrap();
        assert!(bad.unwrap_err().to_string().contains("unknown command"));

        stop_tx.send(true).unwrap();
        task.await.unwrap();
        drop(std::fs::remove_dir_all(&dir));
    }

    #[test]
    fn stale_socket_is_replaced() {
        let dir = std::env::temp_dir().join(format!("xdns-control-stale-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("c.sock");
        drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let r = rt.block_on(async { bind(&path).map(|_| ()) });
        assert!(r.is_ok(), "{r:?}");
        drop(std::fs::remove_dir_all(&dir));
    }

    #[test]
    fn no_server_is_a_clear_error() {
        let e = stats(Path::new("/nonexistent/xdns.sock")).unwrap_err();
        assert!(e.to_string().contains("is xdns running"), "{e}");
    }
}
