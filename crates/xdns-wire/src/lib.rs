//! DNS wire helpers for xdns. No I/O, no zone knowledge.
//!
//! The central idea: a response is `header | question (echoed as the client sent it) | body | OPT`.
//! The *body* (answer, authority and additional sections) is compiled once against a *base name*
//! (the zone-tree name the lookup matched) and can then be replayed for any question name that
//! ends in that base name: compression pointers into the question are shifted by the length of
//! the question's extra leading labels (`delta`). The XDP program replays the very same bytes,
//! which is how the kernel and userspace answers stay byte-identical.

pub mod body;
pub mod cache;
pub mod name;
pub mod opt;
pub mod query;
pub mod response;
pub mod rtype;

pub use body::{Body, BodyError, BodyWriter, Section};
pub use cache::{AnswerCache, CacheKey, CachedAnswer, NoCache};
pub use query::{Edns, ParseError, Query, Question, Status};
pub use response::{assemble, error_response, AssembleError, Assembled, Limits};


/// DNS header length in bytes.
pub const HEADER_LEN: usize = 12;
/// Offset of the question name in every message.
pub const QNAME_OFFSET: u16 = 12;
/// A compression pointer to the question name (offset 12).
pub const PTR_QNAME: u16 = 0xC000 | QNAME_OFFSET;
