//! The whole authoritative answer path for one message (owner: engine).
//!
//! CONTRACT (used by the daemon, the fuzz target and the XDP differential tests):
//! `respond(zones, query, transport, cfg, out) -> Outcome` writes the complete response into
//! `out` (cleared first) when the outcome is `Answered`; for `Dropped`, `out` is empty.

use crate::tree::ZoneSet;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Transport {
    Udp,
    Tcp,
}

/// Server-wide answer settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RespondConfig {
    /// EDNS UDP payload size we advertise and cap UDP responses at (default 1232).
    pub edns_payload: u16,
}

impl Default for RespondConfig {
    fn default() -> Self {
        Self { edns_payload: 1232 }
    }
}

/// What happened to one message, for statistics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A response was written. `rcode` is the full 12-bit RCODE (16 = BADVERS);
    /// `qtype` is 0 when there was no question.
    Answered { rcode: u16, qtype: u16, truncated: bool },
    /// No response: the reason, for statistics.
    Dropped(DropReason),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Shorter than a header, or the header/question could not be parsed.
    Malformed,
    /// QR=1: responses are never answered.
    Response,
}

pub fn respond(
    zones: &ZoneSet,
    query: &[u8],
    transport: Transport,
    cfg: &RespondConfig,
    out: &mut Vec<u8>,
) -> Outcome {
    let _ = (zones, query, transport, cfg, out);
    unimplemented!("engine")
}
