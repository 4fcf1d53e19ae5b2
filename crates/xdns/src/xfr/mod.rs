//! Zone transfers (issue 28): xdns as a secondary of a standard primary.
//!
//! - [`keys`]: `[[key]]` TSIG keys (RFC 8945), signing and checking through `domain::tsig`;
//! - [`serial`]: serial arithmetic (RFC 1982) and the SOA timers (RFC 1035 §3.3.13);
//! - [`client`]: IXFR (RFC 1995) and AXFR (RFC 5936) over TCP, and what an answer means;
//! - [`journal`]: a zone as a set of records, IXFR differences applied to it (and computed
//!   between two versions), written out as a master file;
//! - [`incremental`]: an IXFR applied to a spare copy of the zone in place, validated where it
//!   touched, swapped in whole (the whole-zone build is the fallback);
//! - [`secondary`]: one task per secondary zone: timers, NOTIFY, transfers, the atomic swap
//!   (userspace and the XDP maps, as a reload does), expiry, the stored copy;
//! - [`notify`]: the query-plan step that answers NOTIFY (RFC 1996) and SERVFAIL for an
//!   expired zone.
//!
//! - [`primary`]: AXFR/IXFR out to `allow_transfer` clients, from a journal of differences
//!   between loaded versions, and NOTIFY to `notify` targets on every new serial.
//!
//! - [`catalog`]: catalog zones (RFC 9432): their members become secondary zones.

pub mod catalog;
pub mod client;
pub mod incremental;
pub mod journal;
pub mod keys;
pub mod notify;
pub mod primary;
pub mod secondary;
pub mod serial;

pub use secondary::Registry;
