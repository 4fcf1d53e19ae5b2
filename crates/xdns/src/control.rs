//! The Unix control socket: `xdns stats` and reload requests.
//!
//! Protocol: the client sends one command line (`stats`, `reload` or `flush`), the server
//! answers with one line and closes. `stats` answers the [`Snapshot`] as JSON; `reload` answers
//! `ok` once the reload has been queued; `flush` empties the resolver's caches and answers
//! `ok N` (N answers removed); anything else answers `error: …`.

use std::io::{self, Read, Write};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::Path;
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
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(TIMEOUT, handle(stream, shared, reload)).await;
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "control accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
    }
}

async fn handle(
    stream: UnixStream,
    shared: Arc<Shared>,
    reload: mpsc::Sender<Request>,
) -> io::Result<()> {
    let (rd, mut wr) = stream.into_split();
    let mut line = String::new();
    BufReader::new(rd.take(MAX_COMMAND))
        .read_line(&mut line)
        .await?;
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
        "flush" => match shared.recursion.get() {
            Some(r) => format!("ok {}", r.resolver.flush()),
            None => "error: no resolver configured".to_string(),
        },
        other => format!("error: unknown command `{}`", other.escape_debug()),
    };
    wr.write_all(reply.as_bytes()).await?;
    wr.write_all(b"\n").await?;
    wr.shutdown().await
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
