//! Reading a BPF ring buffer on the caller's thread until told to stop: the one loop behind
//! the daemon's readers of `xdns_kit_events` (kernel iteration's handed-over responses) and
//! `xdns_tel_events` (dnstap records of the kernel's answers).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result};
use libbpf_rs::MapHandle;

/// Read the ring buffer `map` (named `name` in errors) until `stop` is set: every record to
/// `f` (the records waiting at a wake-up in one batch), then `batch_done` once per wake-up
/// (also after a wait that found none), waiting at most `poll` between looks at `stop`.
pub(crate) fn read(
    map: &MapHandle,
    name: &str,
    poll: Duration,
    stop: &AtomicBool,
    mut f: impl FnMut(&[u8]),
    mut batch_done: impl FnMut(),
) -> Result<()> {
    let mut b = libbpf_rs::RingBufferBuilder::new();
    b.add(map, |rec: &[u8]| {
        f(rec);
        0
    })?;
    let rb = b.build()?;
    while !stop.load(Ordering::Relaxed) {
        match rb.poll(poll) {
            Ok(()) => {}
            Err(e) if e.kind() == libbpf_rs::ErrorKind::Interrupted => {}
            Err(e) => return Err(e).with_context(|| format!("reading {name}")),
        }
        batch_done();
    }
    Ok(())
}
