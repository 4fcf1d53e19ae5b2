//! The network behind a small trait, so resolution runs against an in-memory DNS tree in tests.
//!
//! [`Network::udp`] sends one datagram and returns the first received datagram that
//! [`Expect::matches`] accepts (right source address and port, ID, question with its 0x20
//! case); everything else is ignored and counted, and waiting goes on until the timeout.
//! [`Network::tcp`] does one framed exchange (RFC 7766) and checks the same.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

use crate::msg::Expect;

/// A boxed future (the trait is used as `dyn Network`).
pub type BoxFut<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Sends queries to upstream servers.
pub trait Network: Send + Sync + 'static {
    /// One UDP exchange with `expect.server`: the first matching reply, or an error
    /// (`TimedOut` when nothing matching arrived within `timeout`).
    fn udp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a Expect,
        timeout: Duration,
    ) -> BoxFut<'a, io::Result<Vec<u8>>>;
    /// One TCP exchange with `expect.server` (after TC=1).
    fn tcp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a Expect,
        timeout: Duration,
    ) -> BoxFut<'a, io::Result<Vec<u8>>>;
}

/// The real network: a fresh UDP socket per query on an ephemeral port chosen by the kernel
/// (Linux picks a random one from the whole ephemeral range), connected to the server so the
/// kernel already drops datagrams from other sources; the source is checked again anyway.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemNetwork;

/// Largest reply read over UDP.
const UDP_MAX: usize = 4096;

impl Network for SystemNetwork {
    fn udp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a Expect,
        timeout: Duration,
    ) -> BoxFut<'a, io::Result<Vec<u8>>> {
        Box::pin(async move {
            let bind: SocketAddr = if expect.server.is_ipv4() {
                (std::net::Ipv4Addr::UNSPECIFIED, 0).into()
            } else {
                (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
            };
            let sock = UdpSocket::bind(bind).await?;
            sock.connect(expect.server).await?;
            sock.send(query).await?;
            let mut buf = vec![0u8; UDP_MAX];
            let work = async {
                loop {
                    let (n, from) = sock.recv_from(&mut buf).await?;
                    if expect.matches(from, &buf[..n]) {
                        buf.truncate(n);
                        return Ok::<_, io::Error>(std::mem::take(&mut buf));
                    }
                }
            };
            match tokio::time::timeout(timeout, work).await {
                Ok(r) => r,
                Err(_) => Err(io::ErrorKind::TimedOut.into()),
            }
        })
    }

    fn tcp<'a>(
        &'a self,
        query: &'a [u8],
        expect: &'a Expect,
        timeout: Duration,
    ) -> BoxFut<'a, io::Result<Vec<u8>>> {
        Box::pin(async move {
            let work = async {
                let mut s = TcpStream::connect(expect.server).await?;
                let _ = s.set_nodelay(true);
                let mut framed = Vec::with_capacity(query.len() + 2);
                framed.extend_from_slice(&(query.len() as u16).to_be_bytes());
                framed.extend_from_slice(query);
                s.write_all(&framed).await?;
                loop {
                    let len = s.read_u16().await? as usize;
                    let mut m = vec![0u8; len];
                    s.read_exact(&mut m).await?;
                    if expect.matches_message(&m) {
                        return Ok::<_, io::Error>(m);
                    }
                    expect
                        .rejected
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            };
            match tokio::time::timeout(timeout, work).await {
                Ok(r) => r,
                Err(_) => Err(io::ErrorKind::TimedOut.into()),
            }
        })
    }
}
