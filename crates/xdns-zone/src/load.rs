//! Loading RFC 1035 master files into a [`Zone`] (owner: loader).
//!
//! CONTRACT:
//! - `load_zone(&ZoneSource, progress)` scans with `domain::zonefile::inplace::Zonefile`,
//!   follows `$INCLUDE` (relative to the including file's directory), converts every record to
//!   uncompressed wire RDATA, lowercases owners, builds `Zone::nodes` including empty
//!   non-terminals, then runs `validate::validate`.
//! - Errors are collected (not just the first), each naming file, line and reason;
//!   `Display` is `FILE:LINE: reason`.
//! - `progress` is called every 100,000 records with the count so far.
//!
//! How it works:
//! - The origin comes from [`ZoneSource::name`]; records without a class are IN, any other
//!   class is an error.
//! - `domain` does not say on which line a record was, so a small pre-scanner ([`Spans`])
//!   splits the original text into entries (honouring quotes, escapes, comments and
//!   parentheses) and the n-th record `domain` returns is matched with the n-th record entry.
//!   The same spans place `domain`'s own errors on the line of the failing entry and let the
//!   scan restart after it, so one bad record does not hide the next one.
//! - `$INCLUDE FILE [ORIGIN]`: FILE is relative to the including file's directory; without
//!   ORIGIN the included file starts with the includer's current origin (RFC 1035 §5.1).
//!   Include loops and nesting deeper than [`MAX_INCLUDE_DEPTH`] are errors.
//! - RDATA is composed uncompressed by `domain` (names keep their case); RFC 3597 `\#` data is
//!   kept as written, after checking that it parses for types `domain` knows.
//! - One TTL per RRset (RFC 2181 §5.2): the smallest wins, with a warning. Duplicate records
//!   are dropped (RFC 2181 §5).
//! - Each RRset's RDATA is packed into one buffer ([`crate::tree::Rdatas`]), shrunk to size at
//!   the end, so a record costs no allocation of its own.
//! - Two threads: the `Scanner` (reading the file in segments, `domain`'s scanner, each
//!   record's owner and RDATA in wire form, `$INCLUDE`) runs on a thread of its own,
//!   `xdns-scan`, and hands what it finds, in file order, to the `Builder` on the calling
//!   thread (the node map, duplicates, TTL warnings, progress reports, then validation) in
//!   batches of `BATCH_RECORDS` records through a queue of `BATCH_QUEUE` batches, so the
//!   scan runs at most a few hundred KiB ahead. Every finding is made where it was made on one
//!   thread and applied in the same order: records, errors, warnings and lines are those of
//!   the one-thread load (which the tests run beside it: `Sink` is the one place the two
//!   differ). A builder that gives up (too many errors) stops taking batches, and the scan
//!   ends at its next one.

use std::collections::HashSet as StdHashSet;
use std::hash::BuildHasher;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::str::FromStr;

use bytes::{Bytes, BytesMut};
use domain::base::iana::{Class, Rtype};
use domain::base::name::{Name, ToName};
use domain::base::rdata::ComposeRecordData;
use domain::rdata::ZoneRecordData;
use domain::zonefile::inplace::{Entry, Zonefile};
use hashbrown::HashMap;

use crate::tree::{NameKey, Node, Rdatas, Rrset, Zone};
use crate::validate::{self, ZoneView};

/// Deepest `$INCLUDE` nesting accepted.
pub const MAX_INCLUDE_DEPTH: usize = 16;
/// Errors collected before loading gives up.
pub const MAX_ERRORS: usize = 100;
/// Warnings kept (all are logged up to this count; the rest are counted).
pub const MAX_WARNINGS: usize = 100;
/// `progress` is called every this many records.
pub const PROGRESS_EVERY: u64 = 100_000;

/// Where a zone comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSource {
    /// The apex in presentation form, e.g. `example.com.`
    pub name: String,
    /// The master file.
    pub file: PathBuf,
}

/// A problem found while loading or validating a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    /// The file the problem is in (an included file for problems inside it).
    pub file: PathBuf,
    /// 1-based line, when the problem belongs to a line.
    pub line: Option<usize>,
    /// What is wrong.
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

/// A successfully loaded zone with the warnings found on the way.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The zone, ready for lookups.
    pub zone: Zone,
    /// Problems that did not stop the zone from loading (already logged through `tracing`).
    pub warnings: Vec<LoadError>,
    /// Number of records read (before duplicates were removed).
    pub records: u64,
}

/// Load and validate one zone.
pub fn load_zone(src: &ZoneSource, progress: Option<&dyn Fn(u64)>) -> Result<Zone, Vec<LoadError>> {
    load_zone_with_warnings(src, progress).map(|l| l.zone)
}

/// Load and validate one zone, also returning the warnings (for `xdns check`).
pub fn load_zone_with_warnings(
    src: &ZoneSource,
    progress: Option<&dyn Fn(u64)>,
) -> Result<Loaded, Vec<LoadError>> {
    load_with(src, progress, Plan::DEFAULT).0
}

/// Bytes of zone-file text one scanner is given at most, about: `domain`'s scanner works on
/// its own copy of its text, so a whole file in one scanner is held twice while it loads
/// (docs/perf/2026-11-29-zone-memory-1m.md). A scanner ends at the first entry past this many bytes that
/// may start afresh ([`chunk_starts`]); the next one starts there.
const SCAN_CHUNK: usize = 16 << 20;

/// Bytes of a zone file read at once, about: a file is read and scanned in segments, each
/// ending where a scanner may start afresh ([`segment_cut`]), so that a large zone's text is
/// never held whole beside the zone being built (docs/perf/2026-11-29-zone-file-segments.md).
/// A file without `$TTL` has no such place and is read whole.
const READ_SEGMENT: usize = 32 << 20;

/// How a load runs: scanners of about `scan_chunk` bytes, segments of about `read_segment`
/// bytes, and the scan on a thread of its own handing the building thread batches of about
/// `batch` records, or on the building thread (`batch` 0). Tests vary all three.
#[derive(Clone, Copy, Debug)]
struct Plan {
    scan_chunk: usize,
    read_segment: usize,
    batch: usize,
}

impl Plan {
    const DEFAULT: Plan = Plan {
        scan_chunk: SCAN_CHUNK,
        read_segment: READ_SEGMENT,
        batch: BATCH_RECORDS,
    };
}

/// Records the scanning thread hands the building thread at once, about (a batch also ends
/// at [`BATCH_BYTES`] of owners and RDATA).
const BATCH_RECORDS: usize = 4096;
/// Bytes of owners and RDATA in one batch, about.
const BATCH_BYTES: usize = 256 << 10;
/// Batches scanned ahead of the building thread at most: the scan runs ahead by a few
/// hundred KiB, never by a parsed copy of the zone.
const BATCH_QUEUE: usize = 4;

/// [`load_zone_with_warnings`] by `plan`. Also returns the largest read buffer held.
fn load_with(
    src: &ZoneSource,
    progress: Option<&dyn Fn(u64)>,
    plan: Plan,
) -> (Result<Loaded, Vec<LoadError>>, usize) {
    let origin = match Name::<Bytes>::from_str(&src.name) {
        Ok(n) => n,
        Err(e) => {
            let err = LoadError {
                file: src.file.clone(),
                line: None,
                reason: format!("bad zone name {:?}: {e}", src.name),
            };
            return (Err(vec![err]), 0);
        }
    };
    let mut b = Builder::new(name_key(&origin), src.file.clone(), progress);
    let mut stack = Vec::new();
    if let Ok(c) = std::fs::canonicalize(&src.file) {
        stack.push(c);
    }
    let start = Start { origin, ttl: None };
    let (scanned, peak) = if plan.batch == 0 {
        scan_here(&mut b, &src.file, start, stack, plan)
    } else {
        scan_beside(&mut b, &src.file, start, stack, plan)
    };
    if let Err(e) = scanned {
        let err = LoadError {
            file: src.file.clone(),
            line: None,
            reason: format!("cannot read zone file: {e}"),
        };
        return (Err(vec![err]), peak);
    }
    (b.finish(), peak)
}

/// Scans `file` on this thread straight into `b`. Returns the main file's read error, if
/// any, and the largest read buffer held.
fn scan_here(b: &mut Builder<'_>, file: &Path, start: Start, mut stack: Vec<PathBuf>, plan: Plan) -> (std::io::Result<()>, usize) {
    let mut sc = Scanner::new(b, plan.scan_chunk, plan.read_segment);
    let r = sc.scan_path(file, start, 0, &mut stack);
    (r, sc.read_buffer_peak)
}

/// Scans `file` on a thread of its own (`xdns-scan`: reading, `domain`'s scanner, each
/// record's RDATA and owner in wire form) while this thread builds `b` from the batches it
/// hands over, in file order; what `b` ends with is what [`scan_here`] gives. A scan that
/// cannot get its thread runs here.
fn scan_beside(b: &mut Builder<'_>, file: &Path, start: Start, stack: Vec<PathBuf>, plan: Plan) -> (std::io::Result<()>, usize) {
    std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Batch>(BATCH_QUEUE);
        let (back_tx, back_rx) = std::sync::mpsc::sync_channel::<Batch>(BATCH_QUEUE + 2);
        let fallback = (start.clone(), stack.clone());
        let scanning = std::thread::Builder::new().name("xdns-scan".into()).spawn_scoped(s, move || {
            let mut stack = stack;
            let sink = Batches {
                tx,
                back: back_rx,
                cur: Batch::default(),
                batch: plan.batch,
                closed: false,
            };
            let mut sc = Scanner::new(sink, plan.scan_chunk, plan.read_segment);
            let r = sc.scan_path(file, start, 0, &mut stack);
            sc.sink.flush();
            (r, sc.read_buffer_peak)
        });
        let Ok(scanning) = scanning else {
            drop(rx);
            let (start, stack) = fallback;
            return scan_here(b, file, start, stack, plan);
        };
        let mut stopped = false;
        while let Ok(mut batch) = rx.recv() {
            if !batch.apply(b) {
                stopped = true;
                break;
            }
            let _ = back_tx.try_send(batch);
        }
        // a builder that stopped (too many errors) ends the scan at its next batch
        drop(rx);
        let (r, peak) = match scanning.join() {
            Ok(v) => v,
            Err(p) => std::panic::resume_unwind(p),
        };
        // what the scan read after the builder stopped is not the zone's concern
        (if stopped { Ok(()) } else { r }, peak)
    })
}

/// What a zone file starts with: its origin and the `$TTL` in force (an included file inherits
/// the includer's).
#[derive(Clone)]
struct Start {
    origin: Name<Bytes>,
    ttl: Option<u32>,
}

/// The lowercased wire form of a name.
pub fn name_key(name: &impl ToName) -> NameKey {
    let mut v = Vec::with_capacity(name.compose_len() as usize);
    push_name_key(&mut v, name);
    v.into_boxed_slice()
}

/// Appends the lowercased wire form of `name` to `out`.
pub fn push_name_key(out: &mut Vec<u8>, name: &impl ToName) {
    for label in name.iter_labels() {
        let s = label.as_slice();
        out.push(s.len() as u8);
        out.extend(s.iter().map(u8::to_ascii_lowercase));
    }
}

/// Parses a presentation-form name (`www.Example.com.`; a missing final dot is implied) into
/// its lowercased wire form. `None` if it is not a valid name.
pub fn text_to_key(text: &str) -> Option<NameKey> {
    Name::<Vec<u8>>::from_str(text).ok().map(|n| name_key(&n))
}

/// Presentation form of a wire name (`www.example.com.`, root is `.`), escaping `.`, `\`,
/// `"`, `;`, `(`, `)`, `@`, `$`, space and non-printable bytes (`\DDD`). Malformed input is
/// shown up to the point where it goes wrong, followed by `<malformed>`.
pub fn key_to_text(key: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0usize;
    loop {
        let len = match key.get(pos) {
            Some(&l) => l as usize,
            None => {
                out.push_str("<malformed>");
                return out;
            }
        };
        if len == 0 {
            if out.is_empty() {
                out.push('.');
            }
            return out;
        }
        let label = match key.get(pos + 1..pos + 1 + len) {
            Some(l) if len <= 63 => l,
            _ => {
                out.push_str("<malformed>");
                return out;
            }
        };
        for &c in label {
            match c {
                b'.' | b'\\' | b'"' | b';' | b'(' | b')' | b'@' | b'$' | b' ' => {
                    out.push('\\');
                    out.push(c as char);
                }
                0x21..=0x7e => out.push(c as char),
                _ => out.push_str(&format!("\\{c:03}")),
            }
        }
        out.push('.');
        pos += 1 + len;
    }
}

//------------ Entry spans (lines of records) ----------------------------------

/// What kind of entry a span is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpanKind {
    /// A resource record.
    Record,
    /// `$ORIGIN` (consumed inside `domain`).
    Origin,
    /// `$TTL` (consumed inside `domain`).
    Ttl,
    /// `$INCLUDE` (returned by `domain`).
    Include,
    /// Any other `$` directive (an error in `domain`).
    Other,
}

/// One entry of a master file: its lines and byte range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    /// What the entry is.
    pub kind: SpanKind,
    /// Whether the entry starts with white space (inherits the previous owner).
    pub indented: bool,
    /// First line (1-based) of the entry.
    pub first_line: usize,
    /// Last line (1-based) of the entry.
    pub last_line: usize,
    /// Byte offset of the entry's first line start.
    pub start: usize,
    /// Byte offset of the text after its last line.
    pub end: usize,
}

/// The entries of master-file text, in order (the pre-scanner [`Spans`]). Public for its
/// fuzz target (`fuzz/fuzz_targets/zone_spans.rs`) and the replay of that target's corpus.
pub fn entry_spans(text: &[u8]) -> Spans<'_> {
    Spans::new(text, 0, 1)
}

/// Splits master-file text into entries the way `domain`'s scanner does. Reads any bytes
/// (master files are not trusted to be well formed) without panicking; every entry it returns
/// is non-empty and lies inside the text, after the previous one.
pub struct Spans<'a> {
    text: &'a [u8],
    pos: usize,
    line: usize,
}

impl<'a> Spans<'a> {
    fn new(text: &'a [u8], pos: usize, line: usize) -> Self {
        Spans { text, pos, line }
    }
}

impl Iterator for Spans<'_> {
    type Item = Span;

    fn next(&mut self) -> Option<Span> {
        let t = self.text;
        loop {
            if self.pos >= t.len() {
                return None;
            }
            let start = self.pos;
            let first_line = self.line;
            let indented = matches!(t[start], b' ' | b'\t' | b'\r');
            let mut parens = 0usize;
            let mut quoted = false;
            let mut first_tok: Option<usize> = None;
            let mut pos = start;
            let mut ended_by_newline = false;
            while pos < t.len() {
                let c = t[pos];
                if quoted {
                    match c {
                        b'\\' => {
                            if t.get(pos + 1) == Some(&b'\n') {
                                self.line += 1;
                            }
                            pos += 2;
                            continue;
                        }
                        b'"' => quoted = false,
                        b'\n' => self.line += 1,
                        _ => {}
                    }
                    pos += 1;
                    continue;
                }
                match c {
                    b'\\' => {
                        first_tok.get_or_insert(pos);
                        if t.get(pos + 1) == Some(&b'\n') {
                            self.line += 1;
                        }
                        pos += 2;
                        continue;
                    }
                    b'"' => {
                        first_tok.get_or_insert(pos);
                        quoted = true;
                    }
                    b';' => {
                        while pos < t.len() && t[pos] != b'\n' {
                            pos += 1;
                        }
                        continue;
                    }
                    b'(' => parens += 1,
                    b')' => parens = parens.saturating_sub(1),
                    b'\n' => {
                        self.line += 1;
                        if parens == 0 {
                            pos += 1;
                            ended_by_newline = true;
                            break;
                        }
                    }
                    b' ' | b'\t' | b'\r' => {}
                    _ => {
                        first_tok.get_or_insert(pos);
                    }
                }
                pos += 1;
            }
            let end = pos.min(t.len());
            self.pos = end;
            let last_line = if ended_by_newline {
                self.line - 1
            } else {
                self.line
            };
            let Some(tok) = first_tok else { continue };
            let kind = if !indented && tok == start && t[tok] == b'$' {
                let word_end = t[tok..]
                    .iter()
                    .position(|c| matches!(c, b' ' | b'\t' | b'\r' | b'\n' | b';' | b'('))
                    .map_or(t.len(), |p| tok + p);
                let word = &t[tok..word_end];
                if word.eq_ignore_ascii_case(b"$ORIGIN") {
                    SpanKind::Origin
                } else if word.eq_ignore_ascii_case(b"$TTL") {
                    SpanKind::Ttl
                } else if word.eq_ignore_ascii_case(b"$INCLUDE") {
                    SpanKind::Include
                } else {
                    SpanKind::Other
                }
            } else {
                SpanKind::Record
            };
            return Some(Span {
                kind,
                indented,
                first_line,
                last_line,
                start,
                end,
            });
        }
    }
}

/// The value of a `$TTL` span, if it is a plain number (all `domain` accepts).
pub fn dollar_ttl(text: &[u8], span: &Span) -> Option<u32> {
    let line = std::str::from_utf8(text.get(span.start..span.end)?).ok()?;
    let line = line.split(';').next()?;
    line.split_whitespace().nth(1)?.parse().ok()
}

//------------ Builder ----------------------------------------------------------

/// Where a record came from: index into `Builder::files` and 1-based line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Loc {
    file: u32,
    line: u32,
}

/// Where one record came from, found again by owner hash and type (for findings only): one
/// per record, so kept to 16 bytes (4-byte aligned: the hash in two halves; a file index past
/// `u16::MAX`, of a zone with that many includes, gives findings no line).
#[derive(Clone, Copy, Debug)]
struct RecLoc {
    /// Hash of the owner key with the node map's hasher.
    owner_hash: [u32; 2],
    line: u32,
    file: u16,
    rtype: u16,
}

impl RecLoc {
    fn new(owner_hash: u64, rtype: u16, loc: Loc) -> Self {
        RecLoc {
            owner_hash: [owner_hash as u32, (owner_hash >> 32) as u32],
            line: loc.line,
            file: u16::try_from(loc.file).unwrap_or(u16::MAX),
            rtype,
        }
    }

    fn is(&self, owner_hash: u64, rtype: u16) -> bool {
        self.owner_hash == [owner_hash as u32, (owner_hash >> 32) as u32] && self.rtype == rtype
    }
}

const _: () = assert!(std::mem::size_of::<RecLoc>() == 16);

/// RRsets above this size are deduplicated at the end instead of on insertion.
pub(crate) const LINEAR_DEDUP_MAX: usize = 32;

/// Accumulates a zone from the records a scan hands it ([`Sink`]), in file order: the node
/// map, where each record came from, the errors, warnings and progress reports.
struct Builder<'p> {
    apex: NameKey,
    main_file: PathBuf,
    nodes: HashMap<NameKey, Node>,
    /// Location of every record kept, in file order.
    locs: Vec<RecLoc>,
    files: Vec<PathBuf>,
    errors: Vec<LoadError>,
    warnings: Vec<LoadError>,
    warnings_dropped: u64,
    records: u64,
    progress: Option<&'p dyn Fn(u64)>,
    /// Whether the error cap was hit.
    gave_up: bool,
}

impl<'p> Builder<'p> {
    fn new(apex: NameKey, main_file: PathBuf, progress: Option<&'p dyn Fn(u64)>) -> Self {
        Builder {
            apex,
            main_file,
            nodes: HashMap::new(),
            locs: Vec::new(),
            files: Vec::new(),
            errors: Vec::new(),
            warnings: Vec::new(),
            warnings_dropped: 0,
            records: 0,
            progress,
            gave_up: false,
        }
    }

    fn error(&mut self, file: &Path, line: Option<usize>, reason: String) {
        if self.errors.len() >= MAX_ERRORS {
            if !self.gave_up {
                self.gave_up = true;
                self.errors.push(LoadError {
                    file: file.to_path_buf(),
                    line,
                    reason: format!("too many errors ({MAX_ERRORS}), giving up"),
                });
            }
            return;
        }
        self.errors.push(LoadError {
            file: file.to_path_buf(),
            line,
            reason,
        });
    }

    fn warning(&mut self, w: LoadError) {
        if self.warnings.len() >= MAX_WARNINGS {
            self.warnings_dropped += 1;
            return;
        }
        tracing::warn!("{w}");
        self.warnings.push(w);
    }

    /// The file of index `file_idx` (in the order [`Sink::file`] named them), for a finding.
    fn file_at(&self, file_idx: u32) -> PathBuf {
        self.files.get(file_idx as usize).cloned().unwrap_or_else(|| self.main_file.clone())
    }

    /// Adds one scanned record, or the reason the scan refused it.
    fn add_record(&mut self, file_idx: u32, line: Option<usize>, rr: Result<Rr<'_>, String>) {
        self.records += 1;
        if self.records.is_multiple_of(PROGRESS_EVERY) {
            if let Some(p) = self.progress {
                p(self.records);
            }
        }
        let Rr { owner: key, rtype, ttl, rdata } = match rr {
            Ok(rr) => rr,
            Err(reason) => {
                let path = self.file_at(file_idx);
                self.error(&path, line, reason);
                return;
            }
        };
        let loc = Loc {
            file: file_idx,
            line: line.unwrap_or(0) as u32,
        };
        let ok = if let Some(node) = self.nodes.get_mut(key) {
            Some(insert_rr(node, rtype, ttl, rdata))
        } else if !validate::in_zone(&self.apex, key) {
            let reason = validate::out_of_zone_reason(key, &self.apex);
            let path = self.file_at(file_idx);
            self.error(&path, line, reason);
            None
        } else {
            let mut node = Node {
                rrsets: Vec::with_capacity(1),
            };
            let r = insert_rr(&mut node, rtype, ttl, rdata);
            self.nodes.insert(key.into(), node);
            // Empty non-terminals up to the apex (ancestors of an existing node exist).
            let mut pos = 0usize;
            while key.len() - pos > self.apex.len() {
                pos += 1 + key[pos] as usize;
                if self.nodes.contains_key(&key[pos..]) {
                    break;
                }
                self.nodes.insert(key[pos..].into(), Node::default());
            }
            Some(r)
        };
        if matches!(ok, Some(Inserted::Added | Inserted::TtlDiffers { .. })) {
            let owner_hash = self.nodes.hasher().hash_one(key);
            self.locs.push(RecLoc::new(owner_hash, rtype, loc));
        }
        // RRSIGs take the TTL of the RRset each covers (RFC 4034 §3), so one node's signatures
        // differ by design: answers use the covered RRset's TTL (compile.rs), no warning.
        if let (Some(Inserted::TtlDiffers { old, new }), false) = (ok, rtype == xdns_wire::rtype::RRSIG) {
            let w = LoadError {
                file: self.file_at(file_idx),
                line,
                reason: format!(
                    "TTL {new} differs from TTL {old} of the {} RRset at {}; using {}",
                    validate::type_name(rtype),
                    key_to_text(key),
                    old.min(new)
                ),
            };
            self.warning(w);
        }
    }

    /// Deduplicates big RRsets, validates, and builds the [`Zone`].
    fn finish(mut self) -> Result<Loaded, Vec<LoadError>> {
        let records = settle_rrsets(&mut self.nodes);
        let findings = validate::validate(&self);
        for w in findings.warnings {
            self.warning(w);
        }
        if self.warnings_dropped > 0 {
            tracing::warn!(
                "{}: {} more warnings not shown",
                self.main_file.display(),
                self.warnings_dropped
            );
        }
        let mut errors = std::mem::take(&mut self.errors);
        if !self.gave_up {
            for e in findings.errors {
                if errors.len() >= MAX_ERRORS {
                    break;
                }
                errors.push(e);
            }
        }
        if !errors.is_empty() {
            // Scan errors come first, validation errors after; show them in file order.
            let gave_up = if self.gave_up { errors.pop() } else { None };
            errors.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
            errors.extend(gave_up);
            return Err(errors);
        }
        let serial = self
            .nodes
            .get(&self.apex)
            .and_then(|n| n.rrset(xdns_wire::rtype::SOA))
            .and_then(|s| s.rdata.first())
            .and_then(soa_serial)
            .unwrap_or(0);
        Ok(Loaded {
            zone: Zone::new(self.apex, self.nodes, self.main_file, serial).counted(records),
            warnings: self.warnings,
            records: self.records,
        })
    }
}

impl Sink for Builder<'_> {
    fn file(&mut self, path: &Path) {
        self.files.push(path.to_path_buf());
    }
    fn reserve(&mut self, nodes: usize) {
        self.nodes.reserve(nodes);
    }
    fn record(&mut self, file_idx: u32, line: Option<usize>, rr: Result<Rr<'_>, String>) {
        self.add_record(file_idx, line, rr);
    }
    fn error(&mut self, file: &Path, line: Option<usize>, reason: String) {
        Builder::error(self, file, line, reason);
    }
    fn full(&self) -> bool {
        self.errors.len() > MAX_ERRORS
    }
}

//------------ Scanner ----------------------------------------------------------

/// What a scan hands the zone being built, in file order: the [`Builder`] itself when one
/// thread loads, [`Batches`] for the building thread when two do.
trait Sink {
    /// A file is being read: the next file index (0 for the main file).
    fn file(&mut self, path: &Path);
    /// About this many nodes are coming (from the main file's first segment).
    fn reserve(&mut self, nodes: usize);
    /// One record of file `file_idx`, on `line`: its owner, type, TTL and RDATA in wire form,
    /// or why it is refused (its class, RDATA that does not encode).
    fn record(&mut self, file_idx: u32, line: Option<usize>, rr: Result<Rr<'_>, String>);
    /// A problem the scan found (syntax, `$INCLUDE`), where it was.
    fn error(&mut self, file: &Path, line: Option<usize>, reason: String);
    /// Whether the scan should stop (too many errors, or no one builds any more).
    fn full(&self) -> bool;
}

/// One record as a scan hands it on: the owner's lowercased wire form and the uncompressed
/// RDATA.
struct Rr<'a> {
    owner: &'a [u8],
    rtype: u16,
    ttl: u32,
    rdata: &'a [u8],
}

/// Reads zone files (following `$INCLUDE`), runs `domain`'s scanner over them and hands each
/// record in wire form, and each problem, to its [`Sink`].
struct Scanner<S> {
    sink: S,
    /// Files opened so far (the next one's index).
    files: u32,
    /// Scratch buffer each record's RDATA is composed into.
    scratch: BytesMut,
    key_buf: Vec<u8>,
    /// Bytes of text per scanner, about ([`SCAN_CHUNK`]).
    scan_chunk: usize,
    /// Bytes of a file read at once, about ([`READ_SEGMENT`]).
    read_segment: usize,
    /// The largest read buffer held (capacity), for the tests.
    read_buffer_peak: usize,
}

impl<S: Sink> Scanner<S> {
    fn new(sink: S, scan_chunk: usize, read_segment: usize) -> Self {
        Scanner {
            sink,
            files: 0,
            scratch: BytesMut::with_capacity(65_536),
            key_buf: Vec::with_capacity(256),
            scan_chunk,
            read_segment,
            read_buffer_peak: 0,
        }
    }

    /// Hands one scanned record on in wire form (or the reason it is refused).
    fn record(&mut self, file_idx: u32, line: Option<usize>, rec: &domain::zonefile::inplace::ScannedRecord) {
        let refused = |s: &mut Self, reason: String| s.sink.record(file_idx, line, Err(reason));
        if rec.class() != Class::IN {
            return refused(self, format!("class {} is not supported (only IN)", rec.class()));
        }
        let data = rec.data();
        if let ZoneRecordData::Unknown(u) = data {
            if let Err(reason) = check_generic(rec.rtype(), u.data().as_ref()) {
                return refused(self, reason);
            }
        }
        self.scratch.clear();
        if data.compose_rdata(&mut self.scratch).is_err() {
            return refused(self, "cannot encode RDATA".into());
        }
        if self.scratch.len() > 65_535 {
            return refused(self, "RDATA longer than 65535 octets".into());
        }
        self.key_buf.clear();
        push_name_key(&mut self.key_buf, rec.owner());
        let rr = Rr {
            owner: &self.key_buf,
            rtype: rec.rtype().to_int(),
            ttl: rec.ttl().as_secs(),
            rdata: &self.scratch,
        };
        self.sink.record(file_idx, line, Ok(rr));
    }

    /// Reads one file (the main file or an included one) in segments of about
    /// `read_segment` bytes and scans each from the state the one before left ([`Start`]):
    /// a segment ends where a scanner may start afresh ([`segment_cut`]), so the file is
    /// never held whole. An error opening or reading it is returned for the caller to name.
    fn scan_path(
        &mut self,
        path: &Path,
        start: Start,
        depth: usize,
        stack: &mut Vec<PathBuf>,
    ) -> std::io::Result<()> {
        use std::io::Read;
        let mut file = std::fs::File::open(path)?;
        let file_len = file.metadata().map_or(0, |m| m.len());
        let file_idx = self.files;
        self.files += 1;
        self.sink.file(path);
        let mut state = start;
        let (mut buf, mut read, mut first_line) = (Vec::new(), 0u64, 1usize);
        let mut want = self.read_segment.max(1);
        let mut sized = depth > 0;
        loop {
            let mut eof = false;
            if buf.len() < want {
                let need = want - buf.len();
                // room for what is left of the file (and a byte to see its end), not more
                let left = usize::try_from(file_len.saturating_sub(read)).unwrap_or(usize::MAX);
                buf.reserve_exact(need.min(left.saturating_add(1)));
                let n = (&mut file).take(need as u64).read_to_end(&mut buf)?;
                read += n as u64;
                eof = n < need;
                self.read_buffer_peak = self.read_buffer_peak.max(buf.capacity());
            }
            let cut = if eof {
                Some((buf.len(), first_line))
            } else {
                segment_cut(&buf, state.ttl.is_some(), first_line)
            };
            let Some((at, next_line)) = cut else {
                // No place to end this segment yet: an entry longer than a segment (read one
                // more), or no `$TTL` so far (a file without one is read whole: double).
                let more = if state.ttl.is_some() { self.read_segment } else { buf.len() };
                want = buf.len().saturating_add(more.max(1));
                continue;
            };
            if !sized {
                // Size the node map once: about one node per line that starts with an owner
                // name, in the first segment, scaled to the file's size.
                let lines = estimate_owner_lines(&buf[..at]);
                let scale = if eof || at == 0 { 1.0 } else { file_len as f64 / at as f64 };
                self.sink.reserve((lines as f64 * scale.max(1.0)) as usize);
                sized = true;
            }
            let go_on = self.scan_text(path, file_idx, &buf[..at], &mut state, first_line, depth, stack);
            if !go_on || eof {
                return Ok(());
            }
            buf.drain(..at);
            first_line = next_line;
            want = self.read_segment.max(buf.len() + 1);
        }
    }

    /// Scans one segment of a file's text (the whole file when it is small) from `state`,
    /// with `first_line` the file's line the segment starts on; leaves in `state` what the
    /// next segment starts with. Returns false when the file must not be read further (the
    /// scanner failed, an error could not be placed, too many errors).
    #[allow(clippy::too_many_arguments)]
    fn scan_text(
        &mut self,
        path: &Path,
        file_idx: u32,
        text: &[u8],
        state: &mut Start,
        first_line: usize,
        depth: usize,
        stack: &mut Vec<PathBuf>,
    ) -> bool {
        // Where the current scanner starts: byte offset into `text`, line offset, and the
        // number of synthetic lines prepended (a `$TTL` carried over after an error).
        let mut chunk_start = 0usize;
        let mut line_base = first_line - 1;
        let mut origin = state.origin.clone();
        let mut ttl = state.ttl;
        let mut spans = Spans::new(text, 0, first_line).peekable();
        let starts = chunk_starts(text, ttl.is_some(), self.scan_chunk, first_line);

        'chunks: loop {
            // this scanner's text ends where the next may start afresh
            let next = starts.iter().find(|(at, _)| *at > chunk_start).copied();
            let chunk_end = next.map_or(text.len(), |(at, _)| at);
            let mut zf = Zonefile::with_capacity(chunk_end - chunk_start + 32);
            let mut synthetic = 0usize;
            if let Some(t) = ttl {
                zf.extend_from_slice(format!("$TTL {t}\n").as_bytes());
                synthetic = 1;
            }
            zf.extend_from_slice(&text[chunk_start..chunk_end]);
            zf.set_origin(origin.clone());
            zf.set_default_class(Class::IN);

            loop {
                if self.sink.full() {
                    return false;
                }
                let res = catch_unwind(AssertUnwindSafe(|| zf.next_entry()));
                let res = match res {
                    Ok(r) => r,
                    Err(_) => {
                        // `domain` panicked on this input: report and stop this file.
                        let line = spans.peek().map(|s| s.first_line);
                        self.sink.error(path, line, "zone file scanner failed on this entry".into());
                        return false;
                    }
                };
                match res {
                    Ok(None) => {
                        let Some((at, first_line)) = next else {
                            // the segment's end: directives after its last record go on
                            for s in spans.by_ref() {
                                if s.kind == SpanKind::Ttl {
                                    ttl = dollar_ttl(text, &s).or(ttl);
                                }
                            }
                            if let Ok(o) = zf.origin() {
                                origin = o;
                            }
                            *state = Start { origin, ttl };
                            return true;
                        };
                        // directives after this scanner's last record: the next one starts
                        // with their `$TTL` and `$ORIGIN`
                        while let Some(s) = spans.next_if(|s| s.start < at) {
                            if s.kind == SpanKind::Ttl {
                                ttl = dollar_ttl(text, &s).or(ttl);
                            }
                        }
                        if let Ok(o) = zf.origin() {
                            origin = o;
                        }
                        chunk_start = at;
                        line_base = first_line - 1;
                        continue 'chunks;
                    }
                    Ok(Some(entry)) => {
                        // Match the entry with its span, noting $TTL directives on the way.
                        let mut span = None;
                        for s in spans.by_ref() {
                            match s.kind {
                                SpanKind::Origin => {}
                                SpanKind::Ttl => ttl = dollar_ttl(text, &s).or(ttl),
                                _ => {
                                    span = Some(s);
                                    break;
                                }
                            }
                        }
                        let line = span.map(|s| s.first_line);
                        match entry {
                            Entry::Record(rec) => {
                                self.record(file_idx, line, &rec);
                            }
                            Entry::Include {
                                path: inc,
                                origin: inc_origin,
                            } => {
                                let inc_origin = inc_origin
                                    .or_else(|| zf.origin().ok())
                                    .unwrap_or_else(|| origin.clone());
                                let start = Start { origin: inc_origin, ttl };
                                self.include(path, line, &inc, start, depth, stack);
                            }
                        }
                    }
                    Err(e) => {
                        // `domain` says `line:col: reason`; lines count from the chunk start.
                        let msg = e.to_string();
                        let (eline, col, reason) = split_scan_error(&msg);
                        let eline = eline.map(|l| (l + line_base).saturating_sub(synthetic));
                        // The failing entry: the last span starting at or before the error
                        // line; an error in column 1 just after an entry's last line belongs to
                        // that entry (the scanner read its line feed).
                        let mut failing: Option<Span> = None;
                        while let Some(s) = spans.peek().copied() {
                            let starts_before = match eline {
                                Some(l) => {
                                    s.first_line < l
                                        || (s.first_line == l
                                            && !(col == Some(1)
                                                && failing.is_some_and(|f| f.last_line + 1 == l)))
                                }
                                None => failing.is_none(),
                            };
                            if !starts_before {
                                break;
                            }
                            if s.kind == SpanKind::Ttl {
                                ttl = dollar_ttl(text, &s).or(ttl);
                            }
                            failing = Some(s);
                            spans.next();
                        }
                        let line = match (eline, failing) {
                            (Some(l), Some(f)) => Some(l.clamp(f.first_line, f.last_line)),
                            (l, f) => l.or(f.map(|f| f.first_line)),
                        };
                        // Columns past the first say where in the entry it went wrong;
                        // column 1 means the scanner had already left the token.
                        let reason = match col {
                            Some(c) if c > 1 && line == eline => format!("{reason} (column {c})"),
                            _ => reason,
                        };
                        self.sink.error(path, line, reason);
                        // Restart after the failing entry, skipping the indented entries that
                        // follow it (they would inherit a broken owner).
                        if let Ok(o) = zf.origin() {
                            origin = o;
                        }
                        if failing.is_none() {
                            return false;
                        }
                        while spans.peek().is_some_and(|s| s.indented) {
                            spans.next();
                        }
                        match spans.peek() {
                            Some(next) => {
                                chunk_start = next.start;
                                line_base = next.first_line - 1;
                            }
                            None => {
                                *state = Start { origin, ttl };
                                return true;
                            }
                        }
                        continue 'chunks;
                    }
                }
            }
        }
    }

    /// Follows `$INCLUDE`. The included file starts with the includer's `$TTL` (as BIND, Knot
    /// and NSD do); its own `$TTL` and `$ORIGIN` do not leak back (RFC 1035 §5.1).
    fn include(
        &mut self,
        from: &Path,
        line: Option<usize>,
        target: &str,
        start: Start,
        depth: usize,
        stack: &mut Vec<PathBuf>,
    ) {
        let path = match from.parent() {
            Some(dir) => dir.join(target),
            None => PathBuf::from(target),
        };
        if depth + 1 > MAX_INCLUDE_DEPTH {
            self.sink.error(
                from,
                line,
                format!("$INCLUDE {target}: nested deeper than {MAX_INCLUDE_DEPTH} levels"),
            );
            return;
        }
        let canon = match std::fs::canonicalize(&path) {
            Ok(c) => c,
            Err(e) => {
                self.sink.error(
                    from,
                    line,
                    format!("cannot open $INCLUDE file {}: {e}", path.display()),
                );
                return;
            }
        };
        if stack.contains(&canon) {
            self.sink.error(
                from,
                line,
                format!("$INCLUDE loop: {} is already being read", path.display()),
            );
            return;
        }
        stack.push(canon);
        if let Err(e) = self.scan_path(&path, start, depth + 1, stack) {
            self.sink.error(
                from,
                line,
                format!("cannot read $INCLUDE file {}: {e}", path.display()),
            );
        }
        stack.pop();
    }
}

impl<T: Sink + ?Sized> Sink for &mut T {
    fn file(&mut self, path: &Path) {
        (**self).file(path)
    }
    fn reserve(&mut self, nodes: usize) {
        (**self).reserve(nodes)
    }
    fn record(&mut self, file_idx: u32, line: Option<usize>, rr: Result<Rr<'_>, String>) {
        (**self).record(file_idx, line, rr)
    }
    fn error(&mut self, file: &Path, line: Option<usize>, reason: String) {
        (**self).error(file, line, reason)
    }
    fn full(&self) -> bool {
        (**self).full()
    }
}

//------------ Scanning beside the builder -------------------------------------

/// What the scanning thread hands the building thread at once: [`Sink`] calls in order, each
/// record's owner and RDATA one after the other in `bytes`.
#[derive(Default)]
struct Batch {
    events: Vec<Event>,
    bytes: Vec<u8>,
}

/// One [`Sink`] call.
enum Event {
    File(PathBuf),
    Reserve(usize),
    /// A record: its owner (`owner` bytes) and RDATA (`rdata` bytes) are next in `bytes`.
    Record {
        file_idx: u32,
        line: Option<usize>,
        rtype: u16,
        ttl: u32,
        owner: u32,
        rdata: u32,
    },
    Refused(u32, Option<usize>, String),
    Error(Box<(PathBuf, Option<usize>, String)>),
}

impl Batch {
    /// Makes every call of the batch on `b`, in order. False when `b` wants no more (too
    /// many errors: the one-thread scan would have stopped there).
    fn apply(&mut self, b: &mut Builder<'_>) -> bool {
        let mut at = 0usize;
        for ev in self.events.drain(..) {
            if b.full() {
                return false;
            }
            match ev {
                Event::File(path) => b.files.push(path),
                Event::Reserve(n) => b.nodes.reserve(n),
                Event::Record {
                    file_idx,
                    line,
                    rtype,
                    ttl,
                    owner,
                    rdata,
                } => {
                    let (o, r) = (owner as usize, rdata as usize);
                    let rr = Rr {
                        owner: &self.bytes[at..at + o],
                        rtype,
                        ttl,
                        rdata: &self.bytes[at + o..at + o + r],
                    };
                    at += o + r;
                    b.add_record(file_idx, line, Ok(rr));
                }
                Event::Refused(file_idx, line, reason) => b.add_record(file_idx, line, Err(reason)),
                Event::Error(e) => {
                    let (file, line, reason) = *e;
                    b.error(&file, line, reason);
                }
            }
        }
        self.bytes.clear();
        true
    }
}

/// The scanning thread's [`Sink`]: fills a batch and sends it when it holds `batch` records
/// (or [`BATCH_BYTES`]) on a queue of [`BATCH_QUEUE`] batches; the building thread sends the
/// emptied ones back to be filled again.
struct Batches {
    tx: std::sync::mpsc::SyncSender<Batch>,
    back: std::sync::mpsc::Receiver<Batch>,
    cur: Batch,
    batch: usize,
    /// The building thread stopped taking batches.
    closed: bool,
}

impl Batches {
    fn push(&mut self, ev: Event) {
        if self.closed {
            return;
        }
        self.cur.events.push(ev);
        if self.cur.events.len() >= self.batch || self.cur.bytes.len() >= BATCH_BYTES {
            self.flush();
        }
    }

    /// Sends what the batch holds.
    fn flush(&mut self) {
        if self.closed || self.cur.events.is_empty() {
            return;
        }
        let next = self.back.try_recv().unwrap_or_default();
        let full = std::mem::replace(&mut self.cur, next);
        if self.tx.send(full).is_err() {
            self.closed = true;
        }
    }
}

impl Sink for Batches {
    fn file(&mut self, path: &Path) {
        self.push(Event::File(path.to_path_buf()));
    }
    fn reserve(&mut self, nodes: usize) {
        self.push(Event::Reserve(nodes));
    }
    fn record(&mut self, file_idx: u32, line: Option<usize>, rr: Result<Rr<'_>, String>) {
        let ev = match rr {
            Ok(rr) => {
                if !self.closed {
                    self.cur.bytes.extend_from_slice(rr.owner);
                    self.cur.bytes.extend_from_slice(rr.rdata);
                }
                Event::Record {
                    file_idx,
                    line,
                    rtype: rr.rtype,
                    ttl: rr.ttl,
                    // an owner is at most 255 bytes, RDATA at most 65,535 (checked before)
                    owner: rr.owner.len() as u32,
                    rdata: rr.rdata.len() as u32,
                }
            }
            Err(reason) => Event::Refused(file_idx, line, reason),
        };
        self.push(ev);
    }
    fn error(&mut self, file: &Path, line: Option<usize>, reason: String) {
        self.push(Event::Error(Box::new((file.to_path_buf(), line, reason))));
    }
    fn full(&self) -> bool {
        self.closed
    }
}

impl ZoneView for Builder<'_> {
    fn apex(&self) -> &[u8] {
        &self.apex
    }
    fn node(&self, name: &[u8]) -> Option<&Node> {
        self.nodes.get(name)
    }
    fn for_each_node(&self, f: &mut dyn FnMut(&[u8], &Node)) {
        for (k, n) in &self.nodes {
            f(k, n)
        }
    }
    fn file(&self) -> &Path {
        &self.main_file
    }
    fn locate(&self, name: &[u8], rtype: u16, nth: usize) -> Option<(PathBuf, usize)> {
        let h = self.nodes.hasher().hash_one(name);
        let loc = self.locs.iter().filter(|l| l.is(h, rtype)).nth(nth)?;
        let file = self.files.get(usize::from(loc.file)).filter(|_| loc.file != u16::MAX)?.clone();
        (loc.line > 0).then_some((file, loc.line as usize))
    }
}

/// Where in `text` a scanner may start afresh, with the line it starts on: an entry at least
/// `every` bytes after the previous such start that is a record naming its owner (not
/// indented: it inherits nothing from the entries before it), once the file's default TTL is
/// known (`ttl_known`: the includer's, or a `$TTL` before it). Without a `$TTL`, a record
/// without a TTL takes the previous record's (RFC 1035 §5.1), which a new scanner would not
/// know: such a file is scanned whole. The origin is carried from scanner to scanner; the
/// class is IN throughout (records of other classes are refused).
fn chunk_starts(text: &[u8], ttl_known: bool, every: usize, first_line: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let (mut ttl, mut last) = (ttl_known, 0);
    for s in Spans::new(text, 0, first_line) {
        match s.kind {
            SpanKind::Ttl => ttl = true,
            SpanKind::Record if ttl && !s.indented && s.start >= last + every => {
                out.push((s.start, s.first_line));
                last = s.start;
            }
            _ => {}
        }
    }
    out
}

/// Where a segment of a file read so far (`text`, starting on line `first_line`) may end so
/// that the next one starts a scanner afresh, by [`chunk_starts`]'s rule: the start of the
/// last record past the segment's start that names its owner once a `$TTL` is known, and is
/// followed by another entry (so its first line was read whole and is what it seems), with
/// its line. `None`: no such place yet.
fn segment_cut(text: &[u8], ttl_known: bool, first_line: usize) -> Option<(usize, usize)> {
    let (mut ttl, mut cut) = (ttl_known, None);
    let mut last: Option<(Span, bool)> = None;
    for s in Spans::new(text, 0, first_line) {
        if let Some((p, known)) = last {
            if known && p.kind == SpanKind::Record && !p.indented && p.start > 0 {
                cut = Some((p.start, p.first_line));
            }
        }
        last = Some((s, ttl));
        ttl |= s.kind == SpanKind::Ttl;
    }
    cut
}

/// Drops the duplicates of RRsets too big to deduplicate on insertion ([`insert_rr`]) and
/// gives back the spare capacity of sets grown one record at a time. Returns the records
/// left (what [`Zone::record_count`] counts).
pub(crate) fn settle_rrsets(nodes: &mut HashMap<NameKey, Node>) -> u64 {
    let mut records = 0u64;
    for node in nodes.values_mut() {
        for rr in node.rrsets.iter_mut() {
            if rr.rdata.len() > LINEAR_DEDUP_MAX {
                let old = std::mem::take(&mut rr.rdata);
                let mut seen: StdHashSet<&[u8]> = StdHashSet::with_capacity(old.len());
                rr.rdata = old.iter().filter(|d| seen.insert(*d)).collect();
            }
            rr.rdata.shrink_to_fit();
            records += rr.rdata.len() as u64;
        }
        node.rrsets.shrink_to_fit();
    }
    records
}

/// What inserting a record did.
pub(crate) enum Inserted {
    /// Added.
    Added,
    /// Dropped as a duplicate.
    Duplicate,
    /// Added, with a TTL unlike the RRset's.
    TtlDiffers { old: u32, new: u32 },
}

/// Inserts one record into a node, keeping RRsets sorted by type.
pub(crate) fn insert_rr(node: &mut Node, rtype: u16, ttl: u32, rdata: &[u8]) -> Inserted {
    let rrsets = &mut node.rrsets;
    match rrsets.binary_search_by_key(&rtype, |r| r.rtype) {
        Err(i) => {
            rrsets.insert(
                i,
                Rrset {
                    rtype,
                    ttl,
                    rdata: Rdatas::one(rdata),
                },
            );
            Inserted::Added
        }
        Ok(i) => {
            let rr = &mut rrsets[i];
            if rr.rdata.iter().take(LINEAR_DEDUP_MAX + 1).count() <= LINEAR_DEDUP_MAX && rr.rdata.contains(rdata) {
                return Inserted::Duplicate;
            }
            rr.rdata.push(rdata);
            if rr.ttl != ttl {
                let old = rr.ttl;
                rr.ttl = old.min(ttl);
                return Inserted::TtlDiffers { old, new: ttl };
            }
            Inserted::Added
        }
    }
}

/// Counts lines that start with an owner name (not blank, indented, comment or directive).
fn estimate_owner_lines(text: &[u8]) -> usize {
    let starts_owner = |c: u8| !matches!(c, b' ' | b'\t' | b';' | b'$' | b'\n' | b'\r');
    let first = text.first().is_some_and(|&c| starts_owner(c));
    let rest = text
        .windows(2)
        .filter(|w| w[0] == b'\n' && starts_owner(w[1]))
        .count();
    usize::from(first) + rest
}

/// Checks RFC 3597 generic RDATA of a type `domain` knows by parsing it.
fn check_generic(rtype: Rtype, data: &[u8]) -> Result<(), String> {
    use domain::base::rdata::ParseRecordData;
    let mut parser = domain::dep::octseq::Parser::from_ref(data);
    match ZoneRecordData::<&[u8], domain::base::name::ParsedName<&[u8]>>::parse_rdata(
        rtype,
        &mut parser,
    ) {
        Ok(Some(_)) if parser.remaining() == 0 => Ok(()),
        Ok(None) => Ok(()),
        _ => Err(format!("RFC 3597 data is not valid {rtype} RDATA")),
    }
}

/// The serial from SOA RDATA (two uncompressed names, then five 32-bit numbers).
fn soa_serial(rdata: &[u8]) -> Option<u32> {
    let mut pos = 0usize;
    for _ in 0..2 {
        loop {
            let l = *rdata.get(pos)? as usize;
            pos += 1 + l;
            if l == 0 {
                break;
            }
        }
    }
    let b = rdata.get(pos..pos + 4)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Splits `domain`'s `line:col: reason` into its parts.
fn split_scan_error(msg: &str) -> (Option<usize>, Option<usize>, String) {
    let mut it = msg.splitn(3, ':');
    match (it.next(), it.next(), it.next()) {
        (Some(l), Some(c), Some(r)) => match (l.parse(), c.parse()) {
            (Ok(l), Ok(c)) => (Some(l), Some(c), r.trim_start().to_string()),
            _ => (None, None, msg.to_string()),
        },
        _ => (None, None, msg.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(scan_chunk: usize, read_segment: usize, batch: usize) -> Plan {
        Plan {
            scan_chunk,
            read_segment,
            batch,
        }
    }

    /// Two loads gave the same: the same nodes, records and warnings (files, lines, reasons,
    /// order), or the same errors.
    fn same(a: &Result<Loaded, Vec<LoadError>>, b: &Result<Loaded, Vec<LoadError>>, what: &str) {
        match (a, b) {
            (Ok(a), Ok(b)) => {
                assert_eq!(a.zone.nodes, b.zone.nodes, "{what}");
                assert_eq!((a.records, a.zone.serial, &a.warnings), (b.records, b.zone.serial, &b.warnings), "{what}");
            }
            (Err(a), Err(b)) => assert_eq!(a, b, "{what}"),
            (a, b) => panic!("{what}: {:?} against {:?}", a.as_ref().err(), b.as_ref().err()),
        }
    }

    /// A zone loaded by scanners of one entry each (every record naming its owner after the
    /// first `$TTL` starts a new one), or read in segments of one entry each, is the zone
    /// loaded by one scanner from the whole text: same nodes, same errors at the same lines,
    /// same warnings; for the repository's zone files, good and bad, and for a text that
    /// changes `$TTL` and `$ORIGIN` just before a scanner ends, continues owners on indented
    /// lines, spans entries over lines, has an error in the middle and includes a file. Read
    /// in segments, a file with places to end one is never held whole.
    #[test]
    fn small_scanners_load_what_one_scanner_loads() {
        let dir = std::env::temp_dir().join(format!("xdns-scan-chunks-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("inc.zone"), "inc1 A 198.18.0.21\n  AAAA 2001:db8::21\n").unwrap();
        let text = "\
$TTL 300
$ORIGIN chunks.test.
@ SOA ns hostmaster ( 1 7200 3600
        1209600 60 )
  NS ns
ns A 198.18.0.1
a A 198.18.0.2
  TXT \"x ( y\"
$TTL 900
b A 198.18.0.3
$ORIGIN sub.chunks.test.
c A 198.18.0.4
d 60 A 198.18.0.5
  MX 10 c
e A 999.1.1.1
  A 198.18.0.6
f A 198.18.0.7
$INCLUDE inc.zone
$ORIGIN chunks.test.
g CNAME a
h A 198.18.0.8
";
        std::fs::write(dir.join("chunks.zone"), text).unwrap();
        let good = text.replace("e A 999.1.1.1\n  A 198.18.0.6\n", "");
        std::fs::write(dir.join("good.zone"), good).unwrap();
        let zones = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/zones");
        let mut files: Vec<(String, PathBuf)> = vec![
            ("chunks.test.".into(), dir.join("chunks.zone")),
            ("chunks.test.".into(), dir.join("good.zone")),
            ("example.com.".into(), zones.join("example.com.zone")),
            ("example.net.".into(), zones.join("example.net.zone")),
            ("sec.test.".into(), zones.join("sec.test.zone")),
        ];
        for e in std::fs::read_dir(zones.join("bad")).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "zone") {
                files.push(("example.com.".into(), p));
            }
        }
        let (mut loaded, mut failed, mut several) = (0, 0, 0);
        for (name, file) in files {
            let src = ZoneSource { name, file: file.clone() };
            let text = std::fs::read(&file).unwrap();
            if chunk_starts(&text, false, 1, 1).len() > 1 {
                several += 1;
            }
            let (one, whole) = load_with(&src, None, plan(usize::MAX, usize::MAX, 0));
            assert!(whole > text.len(), "{}: read whole ({whole} bytes held)", file.display());
            // small scanners in one segment; one scanner per tiny segment; both tiny; each
            // on the building thread and beside it in batches of 1, 3 and the default records
            for (chunk, segment) in [(usize::MAX, usize::MAX), (1, usize::MAX), (usize::MAX, 1), (1, 1)] {
                for batch in [0, 1, 3, BATCH_RECORDS] {
                    let (small, held) = load_with(&src, None, plan(chunk, segment, batch));
                    same(&one, &small, &format!("{} {chunk} {segment} {batch}", file.display()));
                    let _ = held;
                }
            }
            match one {
                Ok(_) => loaded += 1,
                Err(_) => failed += 1,
            }
        }
        assert!(loaded >= 4 && failed >= 10 && several >= 15, "{loaded} {failed} {several}");
        // A larger file read in segments of 4 KiB is never held whole, and loads the same.
        let mut big = String::from("$TTL 300\n@ SOA ns hostmaster 1 7200 3600 1209600 60\n  NS ns\nns A 198.18.0.1\n");
        for i in 0..4000 {
            big.push_str(&format!("h{i} A 198.18.{}.{}\n  TXT \"h{i}\"\n", i / 250, i % 250));
        }
        std::fs::write(dir.join("big.zone"), &big).unwrap();
        let src = ZoneSource { name: "chunks.test.".into(), file: dir.join("big.zone") };
        let ((whole, _), (parts, held)) = (load_with(&src, None, plan(usize::MAX, usize::MAX, 0)), load_with(&src, None, plan(1 << 10, 4 << 10, 0)));
        let (beside, held_beside) = load_with(&src, None, plan(1 << 10, 4 << 10, 3));
        let (whole, parts, beside) = (whole.unwrap(), parts.unwrap(), beside.unwrap());
        assert_eq!((&whole.zone.nodes, whole.records), (&parts.zone.nodes, parts.records));
        assert_eq!((&whole.zone.nodes, whole.records), (&beside.zone.nodes, beside.records));
        assert!(held <= 8 << 10 && big.len() > 64 << 10, "{held} bytes held of {}", big.len());
        assert_eq!(held_beside, held, "the scanning thread reads as the building one does");
        // the error's line is the file's, whichever scanner read it
        for segment in [1, usize::MAX] {
            let errs = load_with(&ZoneSource { name: "chunks.test.".into(), file: dir.join("chunks.zone") }, None, plan(1, segment, 0))
                .0
                .expect_err("a bad address");
            assert_eq!(errs.iter().map(|e| e.line).collect::<Vec<_>>(), vec![Some(15)], "{errs:?}");
        }
        let good = load_with(&ZoneSource { name: "chunks.test.".into(), file: dir.join("good.zone") }, None, plan(1, 1, 0)).0.unwrap();
        let ttl = |n: &str, t| {
            let k = text_to_key(n).unwrap();
            good.zone.nodes[&k].rrset(t).map(|r| r.ttl)
        };
        assert_eq!(ttl("a.chunks.test.", xdns_wire::rtype::A), Some(300));
        assert_eq!(ttl("b.chunks.test.", xdns_wire::rtype::A), Some(900), "a $TTL just before a scanner ends");
        assert_eq!(ttl("c.sub.chunks.test.", xdns_wire::rtype::A), Some(900), "an $ORIGIN just before");
        assert_eq!(ttl("d.sub.chunks.test.", xdns_wire::rtype::MX), Some(900), "an indented record keeps its owner");
        assert_eq!(ttl("inc1.sub.chunks.test.", xdns_wire::rtype::AAAA), Some(900));
        assert_eq!(ttl("h.chunks.test.", xdns_wire::rtype::A), Some(900));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The zone built beside a scanning thread is the zone built by the thread that scans:
    /// for files with an error in the first and in the last record, `$TTL`, `$ORIGIN` and
    /// `$INCLUDE` changes where a scanner and a batch end, includes that are missing or loop,
    /// more errors than are kept (the scan runs ahead of a builder that gave up), more
    /// warnings than are kept, a file smaller than one scanner's text, and the progress
    /// reports of a file of 250,000 records; with scanners of one entry and of the default
    /// size, segments of one entry and whole, batches of 1, 2, 7 records and the default.
    #[test]
    fn scanned_beside_the_builder_as_on_it() {
        let dir = std::env::temp_dir().join(format!("xdns-scan-beside-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let head = "$TTL 300\n@ SOA ns hostmaster 1 7200 3600 1209600 60\n  NS ns\nns A 198.18.0.1\n";
        std::fs::write(dir.join("inc.zone"), "$TTL 60\ni1 A 198.18.1.1\n  120 A 198.18.1.2\n$ORIGIN deeper.beside.test.\ni2 TXT \"x\"\n").unwrap();
        std::fs::write(dir.join("loop.zone"), "l1 A 198.18.2.1\n$INCLUDE loop.zone\n").unwrap();
        let mut files = vec![
            ("first-last", "$TTL 300\nbad A 198.18.0.256\n@ SOA ns hostmaster 1 7200 3600 1209600 60\n  NS ns\nns A 198.18.0.1\na A 198.18.0.2\nz A 198.18.0.300\n".to_string()),
            ("directives", format!("{head}$ORIGIN sub.beside.test.\na A 198.18.0.2\n$TTL 900\nb A 198.18.0.3\n  AAAA 2001:db8::3\n$INCLUDE inc.zone\nc A 198.18.0.4\n$ORIGIN beside.test.\n$INCLUDE inc.zone other.beside.test.\nd ( A\n 198.18.0.5 )\ne 30 A 198.18.0.6\n")),
            ("includes", format!("{head}$INCLUDE missing.zone\nm A 198.18.0.7\n$INCLUDE loop.zone\nn CH A 198.18.0.8\no A 198.18.0.9\n")),
            ("small", format!("{head}www A 198.18.0.10\n")),
            ("cname", format!("{head}c CNAME www\nc A 198.18.0.11\nout.of.zone. A 198.18.0.12\nwww A 198.18.0.10\n")),
        ];
        // 150 errors, then records, an include and more errors the builder never sees
        let mut many = String::from(head);
        for i in 0..150 {
            many.push_str(&format!("e{i} A 198.18.0.{}\nok{i} A 198.18.1.{}\n", 256 + i, i % 250));
        }
        many.push_str("$INCLUDE missing.zone\nlast A 1.2.3.999\n");
        files.push(("errors", many));
        // 150 TTL warnings, 100 kept
        let mut warned = String::from(head);
        for i in 0..150 {
            warned.push_str(&format!("w{i} 60 A 198.18.0.1\nw{i} 120 A 198.18.0.2\n"));
        }
        files.push(("warnings", warned));
        let mut several = 0;
        for (name, text) in &files {
            let file = dir.join(format!("{name}.zone"));
            std::fs::write(&file, text).unwrap();
            if chunk_starts(text.as_bytes(), false, 1, 1).len() > 2 {
                several += 1;
            }
            let src = ZoneSource { name: "beside.test.".into(), file };
            let (one, _) = load_with(&src, None, plan(usize::MAX, usize::MAX, 0));
            for (chunk, segment) in [(SCAN_CHUNK, READ_SEGMENT), (1, usize::MAX), (usize::MAX, 1), (1, 1)] {
                for batch in [1, 2, 7, BATCH_RECORDS] {
                    let (two, _) = load_with(&src, None, plan(chunk, segment, batch));
                    same(&one, &two, &format!("{name} {chunk} {segment} {batch}"));
                }
            }
            // what each file is for
            match *name {
                "first-last" => {
                    let lines: Vec<_> = one.as_ref().unwrap_err().iter().map(|e| e.line).collect();
                    assert_eq!(lines, vec![Some(2), Some(7)], "{one:?}");
                }
                "errors" => {
                    let errs = one.as_ref().unwrap_err();
                    assert_eq!(errs.len(), MAX_ERRORS + 1);
                    assert!(errs[MAX_ERRORS].reason.contains("giving up"), "{errs:?}");
                }
                "includes" => assert_eq!(one.as_ref().unwrap_err().len(), 3, "{one:?}"),
                "warnings" => {
                    let l = one.as_ref().unwrap();
                    assert_eq!(l.warnings.len(), MAX_WARNINGS);
                    assert_eq!(l.warnings.last().and_then(|w| w.line), Some(4 + 2 * MAX_WARNINGS));
                }
                "directives" => {
                    let l = one.as_ref().unwrap();
                    let ttl = |n: &str, t| l.zone.nodes[&text_to_key(n).unwrap()].rrset(t).map(|r| r.ttl);
                    assert_eq!(ttl("b.sub.beside.test.", xdns_wire::rtype::AAAA), Some(900));
                    assert_eq!(ttl("i1.sub.beside.test.", xdns_wire::rtype::A), Some(60));
                    assert_eq!(ttl("i2.deeper.beside.test.", xdns_wire::rtype::TXT), Some(60));
                    assert_eq!(ttl("c.sub.beside.test.", xdns_wire::rtype::A), Some(900), "the include's $TTL stays in it");
                    assert_eq!(ttl("i1.other.beside.test.", xdns_wire::rtype::A), Some(60));
                    assert_eq!(ttl("d.beside.test.", xdns_wire::rtype::A), Some(900));
                    let w: Vec<_> = l.warnings.iter().map(|w| (w.file.file_name().unwrap().to_str().unwrap(), w.line)).collect();
                    assert_eq!(w, vec![("inc.zone", Some(3)), ("inc.zone", Some(3))], "a finding in an included file names it");
                }
                _ => assert!(one.is_ok() || *name == "cname", "{name}: {one:?}"),
            }
        }
        assert!(several >= 6, "{several}");
        // progress every 100,000 records, from the building thread, the same either way
        let mut text = String::from(head);
        for i in 0..250_000u32 {
            text.push_str(&format!("h{i} A 198.18.{}.{}\n", (i >> 8) & 255, i & 255));
        }
        let file = dir.join("progress.zone");
        std::fs::write(&file, &text).unwrap();
        let src = ZoneSource { name: "beside.test.".into(), file };
        let calls = |p: Plan| {
            let seen = std::cell::RefCell::new(Vec::new());
            let report = |n: u64| seen.borrow_mut().push(n);
            let (l, _) = load_with(&src, Some(&report), p);
            (l, seen.into_inner())
        };
        let (one, one_calls) = calls(plan(SCAN_CHUNK, READ_SEGMENT, 0));
        let (two, two_calls) = calls(plan(64 << 10, 256 << 10, BATCH_RECORDS));
        same(&one, &two, "progress");
        assert_eq!(one_calls, vec![100_000, 200_000]);
        assert_eq!(one_calls, two_calls);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn spans_table() {
        // (text, expected (kind, indented, first_line, last_line))
        type Want = (SpanKind, bool, usize, usize);
        let cases: &[(&str, &[Want])] = &[
            ("a A 1.2.3.4\n", &[(SpanKind::Record, false, 1, 1)]),
            ("\n; c\n  \na A 1.2.3.4", &[(SpanKind::Record, false, 4, 4)]),
            (
                "$TTL 5\n$ORIGIN x.\n$include f\n$foo\n",
                &[
                    (SpanKind::Ttl, false, 1, 1),
                    (SpanKind::Origin, false, 2, 2),
                    (SpanKind::Include, false, 3, 3),
                    (SpanKind::Other, false, 4, 4),
                ],
            ),
            (
                "@ SOA a b ( 1 ; (\n 2\n 3 4 5 )\n  NS a\n",
                &[
                    (SpanKind::Record, false, 1, 3),
                    (SpanKind::Record, true, 4, 4),
                ],
            ),
            (
                "t TXT \"a ( ; \nb\" \\(\nu A 1.2.3.4\n",
                &[
                    (SpanKind::Record, false, 1, 2),
                    (SpanKind::Record, false, 3, 3),
                ],
            ),
            (
                "x TXT a\\\nb\ny A 1\n",
                &[
                    (SpanKind::Record, false, 1, 2),
                    (SpanKind::Record, false, 3, 3),
                ],
            ),
        ];
        for (text, want) in cases {
            let got: Vec<_> = Spans::new(text.as_bytes(), 0, 1)
                .map(|s| (s.kind, s.indented, s.first_line, s.last_line))
                .collect();
            assert_eq!(&got[..], *want, "{text:?}");
        }
    }

    #[test]
    fn spans_never_panic_on_odd_input() {
        for text in ["\\", "\"", "(", ")", "\"\\", "$", "a\\\n", ";"] {
            let n = Spans::new(text.as_bytes(), 0, 1).count();
            assert!(n <= 1, "{text:?}");
        }
    }

    #[test]
    fn key_text_round_trip() {
        let cases = [
            ("www.Example.COM.", "www.example.com."),
            (".", "."),
            ("a\\.b.c.", "a\\.b.c."),
            ("x\\032y.", "x\\ y."),
            ("\\000.", "\\000."),
        ];
        for (input, shown) in cases {
            let k = text_to_key(input).expect(input);
            assert_eq!(key_to_text(&k), shown, "{input}");
            assert_eq!(text_to_key(shown).as_deref(), Some(&k[..]), "{input}");
        }
        assert_eq!(&*text_to_key("A.b").unwrap(), b"\x01a\x01b\x00");
        assert_eq!(key_to_text(&[3, b'a']), "<malformed>");
        assert_eq!(key_to_text(&[]), "<malformed>");
        assert!(text_to_key("a..b").is_none());
    }

    #[test]
    fn scan_error_split() {
        assert_eq!(
            split_scan_error("7:12: bad symbol: x"),
            (Some(7), Some(12), "bad symbol: x".to_string())
        );
        assert_eq!(split_scan_error("weird"), (None, None, "weird".to_string()));
    }

    #[test]
    fn soa_serial_parse() {
        let mut d = b"\x02ns\x00\x01h\x00".to_vec();
        d.extend_from_slice(&7u32.to_be_bytes());
        d.extend_from_slice(&[0; 16]);
        assert_eq!(soa_serial(&d), Some(7));
        assert_eq!(soa_serial(b"\x02ns"), None);
    }

    #[test]
    fn generic_checked_for_known_types() {
        assert!(check_generic(Rtype::A, &[1, 2, 3, 4]).is_ok());
        assert!(check_generic(Rtype::A, &[1, 2, 3]).is_err());
        assert!(check_generic(Rtype::from_int(65400), &[1]).is_ok());
    }
}
