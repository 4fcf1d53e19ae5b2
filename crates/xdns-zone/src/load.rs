//! Loading RFC 1035 master files into a [`Zone`] (owner: loader).
//!
//! CONTRACT (filled in by the loader work):
//! - `load_zone(&ZoneSource, progress)` scans with `domain::zonefile::inplace::Zonefile`,
//!   follows `$INCLUDE` (relative to the including file's directory), converts every record to
//!   uncompressed wire RDATA, lowercases owners, builds `Zone::nodes` including empty
//!   non-terminals, then runs `validate::validate`.
//! - Errors are collected (not just the first), each naming file, line and reason;
//!   `Display` is `FILE:LINE: reason`.
//! - `progress` is called every 100,000 records with the count so far.

use std::path::PathBuf;

use crate::tree::Zone;

/// Where a zone comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSource {
    /// The apex in presentation form, e.g. `example.com.`
    pub name: String,
    pub file: PathBuf,
}

/// A problem found while loading or validating a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub file: PathBuf,
    /// 1-based line, when the problem belongs to a line.
    pub line: Option<usize>,
    pub reason: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(l) => write!(f, "{}:{}: {}", self.file.display(), l, self.reason),
            None => write!(f, "{}: {}", self.file.display(), self.reason),
        }
    }
}

impl std::error::Error for LoadError {}

/// Load and validate one zone.
pub fn load_zone(
    src: &ZoneSource,
    progress: Option<&dyn Fn(u64)>,
) -> Result<Zone, Vec<LoadError>> {
    let _ = (src, progress);
    unimplemented!("loader")
}
