//! Zones for xdns: loading RFC 1035 master files (through `domain`'s zone-file scanner),
//! validation, the RFC 1034 §4.3.2 lookup, and compilation of answers into
//! [`xdns_wire::Body`]s that the userspace server and the XDP program both replay.

pub mod compile;
pub mod dnssec;
pub mod load;
pub mod lookup;
pub mod records;
pub mod respond;
pub mod tree;
pub mod validate;

pub use load::{load_zone, LoadError, ZoneSource};
pub use compile::{compile, compile_all};
pub use lookup::{enumerate, select, BodyKey, BodyKind};
pub use respond::{respond, DropReason, Outcome, RespondConfig, Transport};
pub use tree::{NameKey, Node, Rdatas, Rrset, Zone, ZoneSet};
