//! Access to the kernel maps behind a small trait, and the generation loader.
//!
//! Atomic reload (also described in `bpf/xdns.bpf.c`): every key carries a generation number.
//! [`Loader::install`] writes the whole new generation (bodies before the answers that point at
//! them), then flips `xdns_gen[0]` in one map update, then deletes the previous generation.
//! A packet reads the active generation once, so it sees the old data or the new, never a mix,
//! and never a missing entry. If writing fails, the partial generation is removed and the old
//! one stays active.
//!
//! Entries are encoded and written a chunk at a time ([`CHUNK`]; the real maps write each
//! chunk with one `BPF_MAP_UPDATE_BATCH` per hash map, and the answer table's records in place
//! through a mapping of its page array), so the ABI form of a whole generation never
//! sits in memory; only the keys are kept, to delete the generation later (batched too).
//! The entries come from a [`Stream`]: a [`KernelData`] held whole, or the zones compiled one
//! key at a time as the chunks are written ([`Stream::compile`]), so that the compiled bodies
//! of a whole zone set are never held at once either (issue 30). Answers are written first,
//! then the nodes: a node's `XDNS_NODE_NODATA_APEX` flag depends on whether an `Other` body of
//! its own was among the answers. Nodes go to the answer table too (after the answers, pseudo
//! kind [`TABLE_NODE`], their `xdns_node` as the record), and to `xdns_nodes` only when their
//! bucket is full or the table's bytes ran out: the fill inserts few hash-map elements.

use std::collections::HashMap;

use anyhow::Result;

use std::borrow::Cow;
use std::collections::HashSet;

use crate::data::{encode_answer, encode_node_hashed, name_shape, record_len, AnswerEntry, BodyValue, Kind, KernelData, NodeEntry, BODY_INLINE};
use crate::data::{NODE_APEX, NODE_CUT, NODE_WILDCARD};
use crate::hash::{filter_pos, table_bucket, table_meta, FILTER_APEX_NX, FILTER_CUT, FILTER_NODE, FILTER_WILDCARD, TABLE_NODE, TABLE_SPILLED};
use crate::types::{xdns_answer, xdns_answer_key, xdns_body_kind, xdns_bucket, xdns_node, xdns_node_key};

/// The operations the loader needs; implemented by the real maps and by [`MemMaps`].
pub trait KernelMaps {
    fn put_node(&mut self, key: &xdns_node_key, node: &xdns_node) -> Result<()>;
    fn delete_node(&mut self, key: &xdns_node_key) -> Result<()>;
    /// Store the body bytes (in their class map, under [`body_key`]), then the answer entry
    /// (`key`, whose `_pad` is 0).
    fn put_body(&mut self, key: &xdns_answer_key, answer: &xdns_answer, body: &BodyValue) -> Result<()>;
    /// Delete the answer entry (at `key` with `_pad` 0), then the body bytes of class `class`
    /// (at `key`: its `_pad` is the bytes' version). So are the `(key, class)` lists below.
    fn delete_body(&mut self, key: &xdns_answer_key, class: u8) -> Result<()>;
    /// Delete only the class M or L bytes at each key (`_pad`: their version), ignoring
    /// missing ones and other classes: the old bytes of a body changed in place.
    fn delete_body_bytes(&mut self, keys: &[(xdns_answer_key, u8)]);
    /// Write nodes placed in the answer table: their records at their addresses (bytes / 4,
    /// [`Table::place_node`]) into generation `gen`'s half. Default: [`Self::put_nodes`], as
    /// the in-memory maps do: their `nodes` is every node, of the table or of the hash map.
    fn put_table_nodes(&mut self, _gen: u32, nodes: &[(u32, xdns_node_key, xdns_node)]) -> Result<()> {
        let entries: Vec<_> = nodes.iter().map(|(_, k, v)| (*k, *v)).collect();
        self.put_nodes(&entries)
    }
    /// Write many nodes; the default writes them one by one.
    fn put_nodes(&mut self, entries: &[(xdns_node_key, xdns_node)]) -> Result<()> {
        entries.iter().try_for_each(|(k, v)| self.put_node(k, v))
    }
    /// Write many bodies (all body bytes before any answer entry); default: one by one.
    fn put_bodies(&mut self, entries: &[(xdns_answer_key, xdns_answer, BodyValue)]) -> Result<()> {
        entries.iter().try_for_each(|(k, a, b)| self.put_body(k, a, b))
    }
    /// Delete many nodes, ignoring missing ones; default: one by one.
    fn delete_nodes(&mut self, keys: &[xdns_node_key]) {
        for k in keys {
            let _ = self.delete_node(k);
        }
    }
    /// Delete many bodies `(key, class)`, ignoring missing ones; default: one by one.
    fn delete_bodies(&mut self, keys: &[(xdns_answer_key, u8)]) {
        for (k, c) in keys {
            let _ = self.delete_body(k, *c);
        }
    }
    /// Write the bodies of answers placed in the answer table: the table's value holds the
    /// header and the class S and M bytes (class M: `body_ver` [`BODY_INLINE`]), so only
    /// class L bytes go to their map and no
    /// `xdns_answers` entry is written (the kernel asks the hash map only for keys of a
    /// spilled bucket that the table lacks). Default: [`Self::put_bodies`], as the in-memory
    /// maps do: their `answers` is every answer, what the table and the hash map hold together.
    fn put_table_bodies(&mut self, entries: &[(xdns_answer_key, xdns_answer, BodyValue)]) -> Result<()> {
        self.put_bodies(entries)
    }
    /// Delete what [`Self::put_table_bodies`] wrote for generation `gen`: `keys` are its
    /// answers placed in the table whose bytes are of class L (the real maps: those bytes;
    /// class S and M answers have nothing outside the table, and the loader does not keep
    /// their keys), ignoring missing entries.
    fn delete_table_bodies(&mut self, gen: u32, keys: &[(xdns_answer_key, u8)]);
    /// Words in each half of the presence filter (a power of two).
    fn filter_words(&self) -> usize;
    /// Write `filter` as generation `gen`'s half (`gen & 1`) of the presence filter.
    fn put_filter(&mut self, gen: u32, filter: &Filter) -> Result<()>;
    /// Make generation `gen`'s page array of the answer table (`xdns_vals`, maps.h), empty,
    /// before its records are written; default: nothing to make.
    fn new_table_half(&mut self, _gen: u32) -> Result<()> {
        Ok(())
    }
    /// Drop generation `gen`'s page array (the generation is gone, or never became active);
    /// default: nothing to drop.
    fn free_table_half(&mut self, _gen: u32) {}
    /// Buckets and record bytes in each half of the answer table (`(0, 0)`: no table).
    fn table_shape(&self) -> (usize, usize);
    /// Write answer records at their addresses (bytes / 4, [`Table::place`]) into generation
    /// `gen`'s half of the table.
    fn put_table_values(&mut self, gen: u32, values: &[(u32, &xdns_answer, &BodyValue)]) -> Result<()>;
    /// Write generation `gen`'s half of the table index, whole.
    fn put_table_index(&mut self, gen: u32, index: &[xdns_bucket]) -> Result<()>;
    /// Write bucket `bucket` of generation `gen`'s half of the table index (in-place updates).
    fn put_table_bucket(&mut self, gen: u32, bucket: usize, value: &xdns_bucket) -> Result<()>;
    /// Write these words (index in the half, value) of generation `gen`'s half of the
    /// presence filter (in-place updates: bits are only added).
    fn put_filter_words(&mut self, gen: u32, words: &[(usize, u64)]) -> Result<()>;
    /// Bucket `bucket` of generation `gen`'s half of the table index, read back (in-place
    /// updates: the loader keeps no copy of the index).
    fn table_bucket(&self, gen: u32, bucket: usize) -> Result<xdns_bucket>;
    /// Word `word` of generation `gen`'s half of the presence filter, read back (in-place
    /// updates: the loader keeps no copy of the filter).
    fn filter_word(&self, gen: u32, word: usize) -> Result<u64>;
    /// Set the question memo's epoch (`xdns_gen[2]`): memo entries learnt under another
    /// epoch are never matched again (after an in-place update of the active generation).
    fn set_memo_epoch(&mut self, epoch: u32) -> Result<()>;
    /// Make `gen` the generation packets read (0 = none).
    fn flip_generation(&mut self, gen: u32) -> Result<()>;
    /// Set the label floor (`xdns_gen[1]`): no node of any generation packets may read has
    /// fewer labels, so the kernel does not look shorter suffixes up.
    fn set_label_floor(&mut self, floor: u32) -> Result<()>;
    fn active_generation(&self) -> Result<u32>;
    /// The owner is stopping: an install under way gives up at its next chunk
    /// ([`Abandoned`]) and leaves what it wrote, which goes with the maps.
    fn abandoned(&self) -> bool {
        false
    }
    /// An install has written `written` of the generation's `total` entries (nodes and
    /// answers), after each chunk; default: nobody watches.
    fn progress(&self, _written: usize, _total: usize) {}
}

/// How far the install under way (or the last one) has got: entries (nodes and answers)
/// written of the generation's total. Written by the installing thread after each chunk,
/// read by any other (`xdns stats`, the fill's progress log lines).
#[derive(Debug, Default)]
pub struct FillProgress {
    written: std::sync::atomic::AtomicU64,
    total: std::sync::atomic::AtomicU64,
}

impl FillProgress {
    /// `(written, total)` entries; `total` 0 before any install.
    pub fn get(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.written.load(Relaxed), self.total.load(Relaxed))
    }

    pub fn set(&self, written: usize, total: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.total.store(total as u64, Relaxed);
        self.written.store(written as u64, Relaxed);
    }
}

/// An install given up because its owner is stopping ([`KernelMaps::abandoned`]). Unlike a
/// failed install, what it wrote is not deleted: deleting takes as long as writing, and the
/// maps go with the process. The active generation is untouched.
#[derive(Debug)]
pub struct Abandoned;

impl std::fmt::Display for Abandoned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("stopping: the kernel data being written was abandoned")
    }
}

impl std::error::Error for Abandoned {}

/// Keys of one installed generation, kept to delete it later.
#[derive(Clone, Debug, Default)]
struct Installed {
    gen: u32,
    /// Fewest labels of any node of this generation ([`NO_NODES_FLOOR`] when it has none).
    floor: u32,
    /// Nodes written to `xdns_nodes` (left out of the answer table: the table's go with it).
    nodes: Vec<xdns_node_key>,
    /// Answers written to `xdns_answers` (with their body class).
    answers: Vec<(xdns_answer_key, u8)>,
    /// Answers placed in the answer table whose bytes are of class L (in their own map),
    /// for [`KernelMaps::delete_table_bodies`]; class S and M answers live in the table
    /// alone (their records hold the bytes), and their keys are not kept.
    table_bodies: Vec<(xdns_answer_key, u8)>,
    /// Answers in the answer table, and answers left out of it (found in the hash map).
    table: (usize, usize),
    /// The same for nodes (left out: in `xdns_nodes`).
    node_table: (usize, usize),
    /// Node and hash-map answer keys that in-place updates ([`Loader::apply`]) added to this
    /// generation. Kept apart from `nodes` and `answers`, which an install sizes exactly: one
    /// more key there would copy the whole list (16 MiB of node keys for a 1M-record zone:
    /// tens of milliseconds, the first in-place update after every full install).
    added_nodes: Vec<xdns_node_key>,
    /// (With the body's version in `_pad`, [`body_key`].)
    added_answers: Vec<(xdns_answer_key, u8)>,
    /// Answers whose class M or L bytes an in-place update wrote under version 1 (their
    /// `answer_key`s, `_pad` 0); every other body of the generation is at version 0.
    ver1: HashSet<[u8; std::mem::size_of::<xdns_answer_key>()]>,
}

/// The key of `answer`'s class M or L bytes in `xdns_bodies_{m,l}`: its answer key with
/// `_pad` = the answer's `body_ver` (bpf/xdns_abi.h).
pub fn body_key(key: &xdns_answer_key, answer: &xdns_answer) -> xdns_answer_key {
    xdns_answer_key { _pad: answer.body_ver, ..*key }
}

/// `key` with `_pad` 0: the key of its answer in `xdns_answers`.
pub fn answer_key_of(key: &xdns_answer_key) -> xdns_answer_key {
    xdns_answer_key { _pad: 0, ..*key }
}

/// The presence filter of one generation (`xdns_filter`, maps.h): one bit per node and per
/// `Type(qtype)` answer, and one more per node of the kinds [`node_filter_tag`] names (their
/// bodies are looked up without the node). The kernel looks a key up only when its bit is
/// set, so a missing name or type costs no hash-map lookup; a bit set by another key (a false
/// positive) costs the lookup it would have cost anyway. Never a false negative: every key
/// of the generation is inserted before it becomes active.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Filter {
    words: Vec<u64>,
}

impl Filter {
    /// An empty filter of `words` words (a power of two).
    pub fn new(words: usize) -> Self {
        Self::from_words(vec![0; words])
    }

    fn at(&self, hash: u64, tag: u32) -> (usize, u64) {
        filter_bit(self.words.len(), hash, tag)
    }

    pub fn insert(&mut self, hash: u64, tag: u32) {
        let (w, bit) = self.at(hash, tag);
        self.words[w] |= bit;
    }

    /// Is the bit of (`hash`, `tag`) set?
    pub fn maybe(&self, hash: u64, tag: u32) -> bool {
        let (w, bit) = self.at(hash, tag);
        self.words[w] & bit != 0
    }

    /// A filter of these words (their count a power of two), e.g. read back from the map.
    pub fn from_words(words: Vec<u64>) -> Self {
        assert!(words.len().is_power_of_two(), "filter words must be a power of two, not {}", words.len());
        Self { words }
    }

    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Share of bits set: about the false-positive rate of a lookup.
    pub fn load(&self) -> f64 {
        let set: u32 = self.words.iter().map(|w| w.count_ones()).sum();
        f64::from(set) / (self.words.len() * 64) as f64
    }
}

/// Word and bit of (`hash`, `tag`) in a presence-filter half of `words` words (a power of two).
fn filter_bit(words: usize, hash: u64, tag: u32) -> (usize, u64) {
    let x = filter_pos(hash, tag);
    ((x >> 6) as usize & (words - 1), 1 << (x & 63))
}

/// The answer table of one generation as it is written (`xdns_index`/`xdns_vals`, maps.h):
/// each key goes to a free entry of its bucket (four per bucket) and its record to the next
/// free bytes of the half (packed, each as long as it needs: [`record_len`]). A key whose
/// bucket is full, or whose record no longer fits, is not in the table (the kernel finds it
/// in `xdns_answers`, which holds these only), and its bucket is marked [`TABLE_SPILLED`]: a
/// miss in any other bucket means the key does not exist.
#[derive(Clone, Debug, Default)]
pub struct Table {
    buckets: Vec<xdns_bucket>,
    /// Bytes of records per half, and bytes used.
    bytes: usize,
    used: usize,
    placed: usize,
    left_out: usize,
    /// Nodes placed and left out.
    nodes: (usize, usize),
    /// A record found no room: no later one is placed (whichever its size), so the keys in
    /// the table are the first ones written.
    full: bool,
}

impl Table {
    /// An empty table of `buckets` buckets (0: no table) and `bytes` bytes of records.
    pub fn new(buckets: usize, bytes: usize) -> Self {
        Self { buckets: vec![xdns_bucket::default(); buckets], bytes, used: 0, placed: 0, left_out: 0, nodes: (0, 0), full: false }
    }

    fn bucket_of(&self, key: &xdns_answer_key) -> usize {
        table_bucket(key.hash, key.kind, key.qtype, self.buckets.len() as u32) as usize
    }

    /// Place `key`, whose record takes `len` bytes (a multiple of four); its record's address
    /// (bytes / 4 into the half), or `None` when there is no room for it.
    pub fn place(&mut self, key: &xdns_answer_key, len: usize) -> Option<u32> {
        let at = self.place_at(key, len, 4);
        let n = if at.is_some() { &mut self.placed } else { &mut self.left_out };
        *n += 1;
        at
    }

    /// Place node `key` (after every answer: [`node_table_key`]), its record an `xdns_node`
    /// on an eight-byte boundary; its address, or `None` (the node goes to `xdns_nodes`).
    pub fn place_node(&mut self, key: &xdns_node_key) -> Option<u32> {
        let at = self.place_at(&node_table_key(key), std::mem::size_of::<xdns_node>(), 8);
        let n = if at.is_some() { &mut self.nodes.0 } else { &mut self.nodes.1 };
        *n += 1;
        at
    }

    /// Place a record of `len` bytes starting on a multiple of `align` bytes.
    fn place_at(&mut self, key: &xdns_answer_key, len: usize, align: usize) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let b = self.bucket_of(key);
        let free = self.buckets[b].e.iter().position(|e| e.meta == 0);
        let start = self.used.next_multiple_of(align);
        self.full |= start + len > self.bytes;
        let (Some(i), false) = (free, self.full) else {
            self.buckets[b].e[0].idx |= TABLE_SPILLED;
            return None;
        };
        let at = (start / 4) as u32;
        let e = &mut self.buckets[b].e[i];
        e.hash = key.hash;
        e.meta = table_meta(key.kind, key.qtype, key.gen);
        // plain: the spilled bit lives in e[0], set only once the bucket is full or the bytes
        // ran out, so never before an entry of it is written here
        e.idx = at;
        self.used = start + len;
        Some(at)
    }

    /// The value index of `key`, as the kernel finds it (`xdns_answer_get`).
    pub fn get(&self, key: &xdns_answer_key) -> Option<u32> {
        if self.buckets.is_empty() {
            return None;
        }
        let meta = table_meta(key.kind, key.qtype, key.gen);
        let bucket = &self.buckets[self.bucket_of(key)];
        bucket.e.iter().find(|e| e.hash == key.hash && e.meta == meta).map(|e| e.idx & !TABLE_SPILLED)
    }

    /// Was a key of `key`'s bucket left out (so a miss there must ask the hash map)?
    pub fn spilled(&self, key: &xdns_answer_key) -> bool {
        self.buckets.is_empty() || self.buckets[self.bucket_of(key)].e[0].idx & TABLE_SPILLED != 0
    }

    /// Answer keys placed and left out.
    pub fn counts(&self) -> (usize, usize) {
        (self.placed, self.left_out)
    }

    /// Nodes placed and left out.
    pub fn node_counts(&self) -> (usize, usize) {
        self.nodes
    }

    /// Record bytes used in the half.
    pub fn bytes_used(&self) -> usize {
        self.used
    }

    pub fn buckets(&self) -> &[xdns_bucket] {
        &self.buckets
    }
}

/// Buckets of the active generation's table index as an in-place update reads them back from
/// the map ([`KernelMaps::table_bucket`]), each once, with the changes made to them so far.
struct BucketsRead {
    count: usize,
    read: HashMap<usize, xdns_bucket>,
}

impl BucketsRead {
    fn new(count: usize) -> Self {
        Self { count, read: HashMap::new() }
    }

    fn bucket_of(&self, key: &xdns_answer_key) -> Option<usize> {
        (self.count > 0).then(|| table_bucket(key.hash, key.kind, key.qtype, self.count as u32) as usize)
    }

    fn get(&mut self, maps: &dyn KernelMaps, gen: u32, b: usize) -> Result<&mut xdns_bucket> {
        if let std::collections::hash_map::Entry::Vacant(v) = self.read.entry(b) {
            v.insert(maps.table_bucket(gen, b)?);
        }
        Ok(self.read.get_mut(&b).expect("read above"))
    }

    /// Bucket and entry of `key`, if it is in the table.
    fn entry_of(&mut self, maps: &dyn KernelMaps, key: &xdns_answer_key) -> Result<Option<(usize, usize)>> {
        let Some(b) = self.bucket_of(key) else { return Ok(None) };
        let meta = table_meta(key.kind, key.qtype, key.gen);
        let bk = self.get(maps, key.gen, b)?;
        Ok(bk.e.iter().position(|e| e.hash == key.hash && e.meta == meta).map(|i| (b, i)))
    }

    /// Mark `key`'s bucket spilled (its misses ask the hash map); `Some(bucket)` if it was not.
    fn spill(&mut self, maps: &dyn KernelMaps, key: &xdns_answer_key) -> Result<Option<usize>> {
        let Some(b) = self.bucket_of(key) else { return Ok(None) };
        let e0 = &mut self.get(maps, key.gen, b)?.e[0].idx;
        Ok((*e0 & TABLE_SPILLED == 0).then(|| {
            *e0 |= TABLE_SPILLED;
            b
        }))
    }

    /// Take `key`, entry `i` of bucket `b`, out of the table, writing the bucket to the map: a
    /// changed key's bucket spilled first (the kernel then finds its new value in the hash
    /// map), then the entry emptied. The bucket writes made.
    fn give_up(&mut self, maps: &mut dyn KernelMaps, key: &xdns_answer_key, (b, i): (usize, usize), changed: bool) -> Result<usize> {
        let mut writes = 0;
        if changed && self.spill(&*maps, key)?.is_some() {
            maps.put_table_bucket(key.gen, b, &self.read[&b])?;
            writes += 1;
        }
        let v = self.clear(b, i);
        maps.put_table_bucket(key.gen, b, &v)?;
        Ok(writes + 1)
    }

    /// Empty entry `i` of bucket `b` (read before; keeping the bucket's spilled mark).
    fn clear(&mut self, b: usize, i: usize) -> xdns_bucket {
        let bk = self.read.get_mut(&b).expect("bucket read by entry_of");
        let e = &mut bk.e[i];
        let spilled = e.idx & TABLE_SPILLED;
        e.hash = 0;
        e.meta = 0;
        e.idx = if i == 0 { spilled } else { 0 };
        *bk
    }
}

/// The answer-table key of node `key` (pseudo kind [`TABLE_NODE`], qtype 0): its bucket and
/// meta are this key's (`xdns_node_find`, lookup.h).
pub fn node_table_key(key: &xdns_node_key) -> xdns_answer_key {
    xdns_answer_key { hash: key.hash, r#gen: key.r#gen, qtype: 0, kind: TABLE_NODE, _pad: 0 }
}

/// The presence-filter tag of an answer key, if the kernel consults the filter for it
/// (`Type(qtype)`, the exact-name fast path: `1 + qtype`).
pub fn answer_filter_tag(key: &xdns_answer_key) -> Option<u32> {
    (u32::from(key.kind) == xdns_body_kind::XDNS_KIND_TYPE.0).then(|| 1 + u32::from(key.qtype))
}

/// The second presence-filter tag of a node (hash `hash`) whose answers need no node lookup
/// (lookup.h): a zone cut itself (`FILTER_CUT`), an apex without a wildcard child, not at a
/// cut (`FILTER_APEX_NX`), or a node with a wildcard child, not at a cut (`FILTER_WILDCARD`).
pub fn node_filter_tag(hash: u64, n: &xdns_node) -> Option<u32> {
    if n.flags & NODE_CUT != 0 {
        (n.cut_hash == hash).then_some(FILTER_CUT)
    } else if n.flags & NODE_WILDCARD != 0 {
        Some(FILTER_WILDCARD)
    } else if n.flags & NODE_APEX != 0 {
        Some(FILTER_APEX_NX)
    } else {
        None
    }
}

/// Label floor of a generation without nodes: every name is under no zone.
pub const NO_NODES_FLOOR: u32 = 255;

/// Writes generations into a [`KernelMaps`].
#[derive(Debug)]
pub struct Loader {
    seed: u64,
    current: Option<Installed>,
    /// The last generation retired ([`Self::retire`]): the next one continues from it, so
    /// parities still alternate for packets that read it just before the retirement.
    retired: u32,
    /// The question memo's epoch, bumped by every in-place update ([`Self::apply`]).
    epoch: u32,
}

impl Loader {
    pub fn new(seed: u64) -> Self {
        Self { seed, current: None, retired: 0, epoch: 0 }
    }

    /// A loader whose first install writes the generation after `gen`: for a program that
    /// takes over from one whose active generation is `gen` (maps grown in process,
    /// `XdpProgram::install_grown`), so that generation numbers go on rising.
    pub fn after(seed: u64, gen: u32) -> Self {
        Self { seed, current: None, retired: gen, epoch: 0 }
    }

    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The active generation (0 before the first install).
    pub fn generation(&self) -> u32 {
        self.current.as_ref().map_or(0, |c| c.gen)
    }

    /// Of the active generation's answers: how many are in the answer table, and how many
    /// found no room there (each of those costs the kernel a hash-map lookup).
    pub fn table_counts(&self) -> (usize, usize) {
        self.current.as_ref().map_or((0, 0), |c| c.table)
    }

    /// Of the active generation's nodes: how many are in the answer table, and how many are
    /// in `xdns_nodes` (left out of the table, or added or changed in place).
    pub fn node_counts(&self) -> (usize, usize) {
        self.current.as_ref().map_or((0, 0), |c| c.node_table)
    }

    /// The generation the next install will write. Never 0 (nothing loaded), and always of
    /// the other parity than the active one: generations alternate between the two halves of
    /// the presence filter (after u32::MAX comes 2).
    pub fn next_generation(&self) -> u32 {
        let last = self.current.as_ref().map_or(self.retired, |c| c.gen);
        match last.wrapping_add(1) {
            0 => 2,
            g => g,
        }
    }

    /// Write `data` as a new generation without activating it.
    pub fn stage(&self, maps: &mut dyn KernelMaps, data: &KernelData) -> Result<Staged> {
        self.stage_stream(maps, Stream::of(data))
    }

    /// Write the entries of `src` as a new generation without activating it.
    pub fn stage_stream(&self, maps: &mut dyn KernelMaps, src: Stream<'_>) -> Result<Staged> {
        let gen = self.next_generation();
        let mut done = Installed { gen, floor: NO_NODES_FLOOR, ..Default::default() };
        if let Err(e) = write(maps, src, self.seed, &mut done) {
            if !e.is::<Abandoned>() {
                remove(maps, &done);
            }
            return Err(e);
        }
        // Lower the floor before any new node is visible (the flip, in `commit`); it is raised
        // only there, once the old generation is gone, so it never exceeds a readable
        // generation's own.
        if let Err(e) = maps.set_label_floor(self.current.as_ref().map_or(done.floor, |c| c.floor.min(done.floor))) {
            remove(maps, &done);
            return Err(e);
        }
        Ok(Staged(done))
    }

    /// Activate a staged generation and delete the previous one.
    pub fn commit(&mut self, maps: &mut dyn KernelMaps, staged: Staged) -> Result<()> {
        if let Err(e) = maps.flip_generation(staged.0.gen) {
            remove(maps, &staged.0);
            return Err(e);
        }
        let floor = staged.0.floor;
        if let Some(old) = self.current.replace(staged.0) {
            remove(maps, &old);
        }
        // Only the new generation is readable now. If this write fails the floor stays lower:
        // slower lookups, same answers.
        let _ = maps.set_label_floor(floor);
        Ok(())
    }

    /// Stop packets reading any generation (generation 0: the kernel passes every query to
    /// userspace, which answers from its own copy of the zones) and delete the active one.
    /// For a failed install: the old data must not keep answering in the kernel once
    /// userspace serves newer zones, and its entries free room for the next attempt.
    pub fn retire(&mut self, maps: &mut dyn KernelMaps) -> Result<()> {
        maps.flip_generation(0)?;
        if let Some(old) = self.current.take() {
            self.retired = old.gen;
            remove(maps, &old);
        }
        Ok(())
    }

    /// Stage and commit.
    pub fn install(&mut self, maps: &mut dyn KernelMaps, data: &KernelData) -> Result<()> {
        self.install_stream(maps, Stream::of(data))
    }

    /// Stage and commit the entries of `src`.
    pub fn install_stream(&mut self, maps: &mut dyn KernelMaps, src: Stream<'_>) -> Result<()> {
        let staged = self.stage_stream(maps, src)?;
        self.commit(maps, staged)
    }
}

/// What [`Loader::apply`] changed in place.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    pub nodes: usize,
    pub answers: usize,
    /// Bucket and filter-word writes.
    pub table_writes: usize,
    pub filter_words: usize,
}

impl Loader {
    /// Update the active generation in place with `delta` (one zone's change, [`crate::delta`]),
    /// so that every packet meanwhile is answered from the old data or the new, entry by
    /// entry (bpf/README.md "Generations"):
    /// 1. new and changed bodies into the hash maps (a changed body in the answer table is
    ///    still served from there);
    /// 2. new and changed nodes into `xdns_nodes` (their bodies are in);
    /// 3. buckets of new keys (answers and nodes) marked spilled (the table has no room kept
    ///    for them: they live in the hash maps, as keys left out of the table do), then the
    ///    presence bits of new nodes and `Type` keys: now they are found;
    /// 4. removed nodes deleted from `xdns_nodes`;
    /// 5. the table entries of changed keys, answers and nodes, given up (bucket spilled
    ///    first, then the entry emptied: the kernel finds the new body or node in the hash
    ///    map) and of removed keys emptied;
    /// 6. the question memo's epoch bumped: no memo entry learnt before (whose answer index
    ///    may name an old body) matches again; entries learnt after can only come from the
    ///    table, which now holds no changed key;
    /// 7. removed bodies deleted.
    ///
    /// A class M or L body that changes is written under the other version of its key
    /// ([`body_key`]) in step 1, and its old bytes deleted in step 7: a packet holding the old
    /// answer (from the table, the hash map or the spill slot) reads the old bytes, or finds
    /// none and passes.
    ///
    /// `Err` before anything is written when there is no active generation. An error while
    /// writing leaves the generation partly updated: the caller must write a full generation
    /// then.
    pub fn apply(&mut self, maps: &mut dyn KernelMaps, delta: &crate::delta::Delta) -> Result<Applied> {
        use crate::data::{encode_body, encode_node, answer_key};
        use crate::types::xdns_body_class;
        let seed = self.seed;
        let cur = self.current.as_mut().ok_or_else(|| anyhow::anyhow!("no active generation to update"))?;
        let gen = cur.gen;
        let has_bytes = |c: u8| c == xdns_body_class::XDNS_CLASS_M.0 as u8 || c == xdns_body_class::XDNS_CLASS_L.0 as u8;
        let raw = |k: &xdns_answer_key| -> [u8; std::mem::size_of::<xdns_answer_key>()] {
            bytes_of(k).try_into().expect("the key's size")
        };
        let m_class = xdns_body_class::XDNS_CLASS_M.0 as u8;
        // keys whose old answer was an inline class M record of the table (step 5)
        let mut inline = HashSet::new();
        let mut done = Applied::default();
        // 1. bodies (a changed M or L body under its other version); the old bytes of changed
        // bodies, for step 7
        let mut puts = Vec::new();
        let mut old_bytes = Vec::new();
        for a in delta.answers.iter().filter(|a| a.new.is_some()) {
            let body = a.new.as_ref().expect("filtered");
            let (mut v, b) = encode_body(body);
            let k = answer_key(seed, gen, &a.base, a.kind);
            let was_ver1 = cur.ver1.contains(&raw(&k));
            let old_class = a.old.as_ref().map(|o| encode_body(o).0.class).filter(|c| has_bytes(*c));
            if let Some(c) = old_class {
                old_bytes.push((xdns_answer_key { _pad: u8::from(was_ver1), ..k }, c));
            }
            let ver1 = has_bytes(v.class) && old_class.is_some() && !was_ver1;
            v.body_ver = u8::from(ver1);
            if ver1 {
                cur.ver1.insert(raw(&k));
            } else if was_ver1 {
                cur.ver1.remove(&raw(&k));
            }
            puts.push((k, v, b));
        }
        maps.put_bodies(&puts)?;
        cur.added_answers.extend(puts.iter().map(|(k, a, _)| (body_key(k, a), a.class)));
        done.answers += puts.len();
        // 2. nodes
        let nodes: Vec<_> = delta
            .nodes
            .iter()
            .filter_map(|n| n.new.as_ref().map(|(e, own)| encode_node(e, *own, seed, gen)))
            .collect();
        maps.put_nodes(&nodes)?;
        cur.added_nodes.extend(nodes.iter().map(|(k, _)| *k));
        done.nodes += nodes.len();
        // 3. new keys reachable: spilled buckets, then presence bits
        // the buckets and filter words touched are read back from the maps (no copy is kept)
        let mut table = BucketsRead::new(maps.table_shape().0);
        let result = (|| -> Result<()> {
            let new_nodes = delta.nodes.iter().filter(|n| n.old.is_none()).filter_map(|n| n.new.as_ref());
            let node_keys = new_nodes.map(|(e, own)| node_table_key(&encode_node(e, *own, seed, gen).0));
            for k in delta.answers.iter().filter(|a| a.old.is_none()).map(|a| answer_key(seed, gen, &a.base, a.kind)).chain(node_keys) {
                if let Some(b) = table.spill(&*maps, &k)? {
                    let v = table.read[&b];
                    maps.put_table_bucket(gen, b, &v)?;
                    done.table_writes += 1;
                }
            }
            // only the words these keys touch are written (the filter is large)
            let nwords = maps.filter_words();
            let mut touched: HashMap<usize, u64> = HashMap::new();
            let mut set = |hash: u64, tag: u32| {
                let (w, bit) = filter_bit(nwords, hash, tag);
                *touched.entry(w).or_default() |= bit;
            };
            for (k, n) in &nodes {
                set(k.hash, FILTER_NODE);
                if let Some(tag) = node_filter_tag(k.hash, n) {
                    set(k.hash, tag);
                }
            }
            for (k, _, _) in &puts {
                if let Some(tag) = answer_filter_tag(k) {
                    set(k.hash, tag);
                }
            }
            let mut words = Vec::with_capacity(touched.len());
            for (i, bits) in touched {
                words.push((i, maps.filter_word(gen, i)? | bits));
            }
            words.sort_unstable();
            maps.put_filter_words(gen, &words)?;
            done.filter_words += words.len();
            // 4. removed nodes
            let gone: Vec<_> = delta
                .nodes
                .iter()
                .filter(|n| n.new.is_none())
                .filter_map(|n| n.old.as_ref().map(|(e, own)| encode_node(e, *own, seed, gen).0))
                .collect();
            maps.delete_nodes(&gone);
            // 5. the table gives up changed and removed keys
            for a in delta.answers.iter().filter(|a| a.old.is_some()) {
                let k = answer_key(seed, gen, &a.base, a.kind);
                let Some((b, i)) = table.entry_of(&*maps, &k)? else {
                    if a.new.is_none() {
                        cur.table.1 = cur.table.1.saturating_sub(1);
                    }
                    continue;
                };
                // a class M answer of the table has its bytes in its record (`BODY_INLINE`),
                // which stays as it is for the packets holding it: no bytes of version 0
                if a.old.as_ref().is_some_and(|o| encode_body(o).0.class == m_class) {
                    inline.insert(raw(&k));
                }
                cur.table.0 = cur.table.0.saturating_sub(1);
                cur.table.1 += usize::from(a.new.is_some());
                done.table_writes += table.give_up(maps, &k, (b, i), a.new.is_some())?;
            }
            cur.table.1 += delta.answers.iter().filter(|a| a.old.is_none() && a.new.is_some()).count();
            // and changed and removed nodes (a changed one is in xdns_nodes since step 2)
            for n in &delta.nodes {
                let Some((e, own)) = &n.old else {
                    cur.node_table.1 += usize::from(n.new.is_some());
                    continue;
                };
                let k = node_table_key(&encode_node(e, *own, seed, gen).0);
                let Some((b, i)) = table.entry_of(&*maps, &k)? else {
                    if n.new.is_none() {
                        cur.node_table.1 = cur.node_table.1.saturating_sub(1);
                    }
                    continue;
                };
                cur.node_table.0 = cur.node_table.0.saturating_sub(1);
                cur.node_table.1 += usize::from(n.new.is_some());
                done.table_writes += table.give_up(maps, &k, (b, i), n.new.is_some())?;
            }
            Ok(())
        })();
        result?;
        // 6. the memo forgets
        self.epoch = self.epoch.wrapping_add(1);
        maps.set_memo_epoch(self.epoch)?;
        // 7. removed bodies, and the old bytes of changed ones (an inline record's: at
        // `BODY_INLINE`, where the in-memory maps keep them; the real maps have none)
        let at_ver = |k: &xdns_answer_key, ver1: bool| {
            let v = if inline.contains(&raw(&answer_key_of(k))) { BODY_INLINE } else { u8::from(ver1) };
            xdns_answer_key { _pad: v, ..*k }
        };
        let mut gone = Vec::new();
        for a in delta.answers.iter().filter(|a| a.new.is_none()) {
            let Some(b) = &a.old else { continue };
            let k = answer_key(seed, gen, &a.base, a.kind);
            let ver1 = cur.ver1.remove(&raw(&k));
            gone.push((at_ver(&k, ver1), encode_body(b).0.class));
        }
        for (k, _) in &mut old_bytes {
            *k = at_ver(k, k._pad == 1);
        }
        maps.delete_bodies(&gone);
        maps.delete_body_bytes(&old_bytes);
        done.answers += gone.len();
        done.nodes += delta.nodes.iter().filter(|n| n.new.is_none()).count();
        Ok(done)
    }
}

/// A generation written to the maps but not active yet.
#[derive(Debug)]
pub struct Staged(Installed);

/// Entries encoded and written per step (one batch syscall per map and chunk).
pub const CHUNK: usize = 4096;

/// The entries of one generation, in the order they are written: answers (in the order
/// given: the first ones get the answer table's room), then nodes.
pub struct Stream<'a> {
    pub answers: Box<dyn Iterator<Item = Cow<'a, AnswerEntry>> + 'a>,
    pub nodes: Box<dyn Iterator<Item = Cow<'a, NodeEntry>> + 'a>,
    /// Entries (nodes and answers) expected, for the progress reports; may be an estimate
    /// (the total reported grows if more come).
    pub expected: usize,
}

impl<'a> Stream<'a> {
    /// The entries of `data`, held whole.
    pub fn of(data: &'a KernelData) -> Self {
        Self {
            answers: Box::new(data.answers.iter().map(Cow::Borrowed)),
            nodes: Box::new(data.nodes.iter().map(Cow::Borrowed)),
            expected: data.nodes.len() + data.answers.len(),
        }
    }

    /// The entries of `compile_kernel_data(zones)`, in its order, compiled as they are written
    /// ([`crate::data::answers_then_nodes`]: the entries of [`crate::data::answers`], then of
    /// [`crate::data::nodes`]); `expected` entries (an estimate, e.g. from
    /// [`crate::data::Shape::estimate`]).
    pub fn compile(zones: &'a xdns_zone::ZoneSet, expected: usize) -> Self {
        let (answers, nodes) = crate::data::answers_then_nodes(zones);
        Self { answers: Box::new(answers.map(Cow::Owned)), nodes: Box::new(nodes.map(Cow::Owned)), expected }
    }
}

/// Hashes the `u64` name hashes of the loader's own-`Other` set by themselves: they are
/// seeded hashes already.
#[derive(Default)]
struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

fn write(maps: &mut dyn KernelMaps, mut src: Stream<'_>, seed: u64, done: &mut Installed) -> Result<()> {
    let gen = done.gen;
    let mut total = src.expected;
    maps.progress(0, total);
    let mut filter = Filter::new(maps.filter_words());
    let (buckets, bytes) = maps.table_shape();
    let mut table = Table::new(buckets, bytes);
    maps.new_table_half(gen)?;
    // Names with an `Other` body of their own, by name hash (the node key's: the kernel
    // tells names apart by it too): their nodes are not `XDNS_NODE_NODATA_APEX`.
    let mut own: HashSet<u64, std::hash::BuildHasherDefault<IdHasher>> = HashSet::default();
    let other = Kind::Other.abi();
    let mut written = 0;
    let m_class = crate::types::xdns_body_class::XDNS_CLASS_M.0 as u8;
    let l_class = crate::types::xdns_body_class::XDNS_CLASS_L.0 as u8;
    let mut chunk: Vec<Cow<'_, AnswerEntry>> = Vec::with_capacity(CHUNK);
    loop {
        if maps.abandoned() {
            return Err(Abandoned.into());
        }
        chunk.clear();
        chunk.extend(src.answers.by_ref().take(CHUNK));
        if chunk.is_empty() {
            break;
        }
        // Answers placed in the table are written there only (class S and M bytes in their
        // record, `BODY_INLINE`; class L bytes in their map); the hash map gets the ones
        // left out.
        let (mut in_table, mut left_out, mut idx) = (Vec::new(), Vec::new(), Vec::new());
        for (k, mut a, b) in chunk.iter().map(|a| encode_answer(a, seed, gen)) {
            if (k.kind, k.qtype) == other {
                own.insert(k.hash);
            }
            if let Some(tag) = answer_filter_tag(&k) {
                filter.insert(k.hash, tag);
            }
            match table.place(&k, record_len(&a, &b)) {
                Some(i) => {
                    if a.class == m_class {
                        a.body_ver = BODY_INLINE;
                    }
                    idx.push(i);
                    in_table.push((k, a, b));
                }
                None => left_out.push((k, a, b)),
            }
        }
        // Keys are recorded before writing: after a failure, cleanup deletes whatever got in.
        done.answers.extend(left_out.iter().map(|(k, a, _)| (*k, a.class)));
        done.table_bodies.extend(in_table.iter().filter(|(_, a, _)| a.class == l_class).map(|(k, a, _)| (*k, a.class)));
        maps.put_bodies(&left_out)?;
        maps.put_table_bodies(&in_table)?;
        let placed: Vec<_> = idx.iter().zip(&in_table).map(|(i, (_, a, b))| (*i, a, b)).collect();
        maps.put_table_values(gen, &placed)?;
        written += chunk.len();
        total = total.max(written);
        maps.progress(written, total);
    }
    drop(chunk);
    let mut chunk: Vec<Cow<'_, NodeEntry>> = Vec::with_capacity(CHUNK);
    // the last apex seen and its hash (nodes come zone by zone)
    let mut apex: (Vec<u8>, u64) = (Vec::new(), 0);
    loop {
        if maps.abandoned() {
            return Err(Abandoned.into());
        }
        chunk.clear();
        chunk.extend(src.nodes.by_ref().take(CHUNK));
        if chunk.is_empty() {
            break;
        }
        // each name hashed once (the own-`Other` set's key is the node key's hash), each
        // zone's apex once
        let enc: Vec<_> = chunk
            .iter()
            .map(|n| {
                let hash = crate::hash::name_hash(seed, &n.name);
                if apex.0 != n.apex {
                    apex = (n.apex.clone(), crate::hash::name_hash(seed, &n.apex));
                }
                encode_node_hashed(n, own.contains(&hash), hash, apex.1, seed, gen)
            })
            .collect();
        done.floor = chunk.iter().map(|n| name_shape(&n.name).1 as u32).fold(done.floor, u32::min);
        let (mut in_table, mut left_out) = (Vec::new(), Vec::new());
        for (k, n) in enc {
            filter.insert(k.hash, FILTER_NODE);
            if let Some(tag) = node_filter_tag(k.hash, &n) {
                filter.insert(k.hash, tag);
            }
            match table.place_node(&k) {
                Some(at) => in_table.push((at, k, n)),
                None => left_out.push((k, n)),
            }
        }
        // Keys are recorded before writing: after a failure, cleanup deletes whatever got in
        // (the table's nodes go with the table).
        done.nodes.extend(left_out.iter().map(|(k, _)| *k));
        maps.put_nodes(&left_out)?;
        maps.put_table_nodes(gen, &in_table)?;
        written += chunk.len();
        total = total.max(written);
        maps.progress(written, total);
    }
    // The other halves are the active generation's: these are read only after the flip.
    maps.put_table_index(gen, table.buckets())?;
    done.table = table.counts();
    done.node_table = table.node_counts();
    maps.put_filter(gen, &filter)?;
    maps.progress(written, written);
    Ok(())
}

fn remove(maps: &mut dyn KernelMaps, gen: &Installed) {
    maps.delete_bodies(&gen.answers);
    maps.delete_bodies(&gen.added_answers);
    maps.delete_table_bodies(gen.gen, &gen.table_bodies);
    maps.free_table_half(gen.gen);
    maps.delete_nodes(&gen.nodes);
    maps.delete_nodes(&gen.added_nodes);
}

/// View a plain ABI struct as bytes.
pub(crate) fn bytes_of<T: Copy>(v: &T) -> &[u8] {
    // SAFETY: only used with the `#[repr(C)]` ABI structs generated from `bpf/xdns_abi.h`,
    // whose padding is explicit (named `_pad` fields), so every byte is initialised; the slice
    // borrows `v` and has exactly its size.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), std::mem::size_of::<T>()) }
}

/// In-memory maps: the same keys and values as the kernel, for tests without root.
#[derive(Default)]
pub struct MemMaps {
    /// Every node, of the answer table or of `xdns_nodes` (as `answers` below).
    pub nodes: HashMap<Vec<u8>, xdns_node>,
    pub answers: HashMap<Vec<u8>, xdns_answer>,
    /// Body bytes by answer key (class `XDNS_CLASS_USERSPACE` has none).
    pub bodies: HashMap<Vec<u8>, (u8, Vec<u8>, Vec<u16>)>,
    pub gen: u32,
    /// `xdns_gen[1]`, the label floor.
    pub floor: u32,
    /// `xdns_gen[2]`, the question memo's epoch.
    pub epoch: u32,
    /// The presence filter's halves (`None`: never written, every key may exist).
    pub filter: [Option<Filter>; 2],
    /// Words per filter half (0: 64).
    pub filter_words: usize,
    /// Answer-table shape per half (buckets, record bytes); (0, 0): no table.
    pub table_shape: (usize, usize),
    /// The answer table's halves as written.
    pub table: [MemTable; 2],
    /// Fail the n-th `put_*` call (tests of the failure path).
    pub fail_after: Option<usize>,
    /// Report the owner as stopping after this many `put_*` calls ([`KernelMaps::abandoned`]).
    pub abandon_after: Option<usize>,
    /// What installs reported ([`KernelMaps::progress`]).
    pub progress: FillProgress,
    puts: usize,
}

/// One half of the answer table in [`MemMaps`].
#[derive(Default)]
pub struct MemTable {
    pub index: Vec<xdns_bucket>,
    /// Answer records (their headers) by address.
    pub vals: HashMap<u32, xdns_answer>,
}

impl MemMaps {
    fn tick(&mut self) -> Result<()> {
        self.puts += 1;
        match self.fail_after {
            Some(n) if self.puts > n => anyhow::bail!("injected failure"),
            _ => Ok(()),
        }
    }

    pub fn node(&self, key: &xdns_node_key) -> Option<&xdns_node> {
        self.nodes.get(bytes_of(key))
    }

    pub fn answer(&self, key: &xdns_answer_key) -> Option<&xdns_answer> {
        self.answers.get(bytes_of(key))
    }

    /// The kernel's filter test (`xdns_filter_maybe`): may (`hash`, `tag`) exist in `gen`?
    pub fn maybe(&self, gen: u32, hash: u64, tag: u32) -> bool {
        self.filter[(gen & 1) as usize].as_ref().is_none_or(|f| f.maybe(hash, tag))
    }
}

impl KernelMaps for MemMaps {
    fn progress(&self, written: usize, total: usize) {
        self.progress.set(written, total);
    }

    fn abandoned(&self) -> bool {
        self.abandon_after.is_some_and(|n| self.puts >= n)
    }

    fn put_node(&mut self, key: &xdns_node_key, node: &xdns_node) -> Result<()> {
        self.tick()?;
        self.nodes.insert(bytes_of(key).to_vec(), *node);
        Ok(())
    }

    fn delete_node(&mut self, key: &xdns_node_key) -> Result<()> {
        self.nodes.remove(bytes_of(key));
        Ok(())
    }

    fn put_body(&mut self, key: &xdns_answer_key, answer: &xdns_answer, body: &BodyValue) -> Result<()> {
        self.tick()?;
        let n = usize::from(answer.len);
        let nf = usize::from(answer.nfixups).min(crate::data::MAX_FIXUPS);
        let stored = match body {
            BodyValue::S { bytes, fixups } => Some((bytes[..n].to_vec(), fixups[..nf].to_vec())),
            BodyValue::M(b) => Some((b.bytes[..n].to_vec(), b.fixups[..nf].to_vec())),
            BodyValue::L(b) => Some((b.bytes[..n].to_vec(), b.fixups[..nf].to_vec())),
            BodyValue::Userspace => None,
        };
        if let Some((bytes, fixups)) = stored {
            // class S bytes are the record's own: kept at version 0 (the test reads them so)
            let at = if matches!(body, BodyValue::S { .. }) { *key } else { body_key(key, answer) };
            self.bodies.insert(bytes_of(&at).to_vec(), (answer.class, bytes, fixups));
        }
        self.answers.insert(bytes_of(key).to_vec(), *answer);
        Ok(())
    }

    fn delete_body(&mut self, key: &xdns_answer_key, _class: u8) -> Result<()> {
        self.answers.remove(bytes_of(&answer_key_of(key)));
        self.bodies.remove(bytes_of(key));
        Ok(())
    }

    fn delete_body_bytes(&mut self, keys: &[(xdns_answer_key, u8)]) {
        // class S bytes share the key of version 0 here (the real maps have none outside
        // the record): only bytes of class M or L go
        let s = crate::types::xdns_body_class::XDNS_CLASS_S.0 as u8;
        for (k, c) in keys {
            if *c != s && self.bodies.get(bytes_of(k)).is_some_and(|b| b.0 != s) {
                self.bodies.remove(bytes_of(k));
            }
        }
    }

    fn filter_words(&self) -> usize {
        if self.filter_words == 0 { 64 } else { self.filter_words }
    }

    fn put_filter(&mut self, gen: u32, filter: &Filter) -> Result<()> {
        self.tick()?;
        self.filter[(gen & 1) as usize] = Some(filter.clone());
        Ok(())
    }

    fn table_shape(&self) -> (usize, usize) {
        self.table_shape
    }

    fn put_table_values(&mut self, gen: u32, values: &[(u32, &xdns_answer, &BodyValue)]) -> Result<()> {
        self.tick()?;
        let half = &mut self.table[(gen & 1) as usize].vals;
        half.extend(values.iter().map(|(i, a, _)| (*i, **a)));
        Ok(())
    }

    fn put_table_index(&mut self, gen: u32, index: &[xdns_bucket]) -> Result<()> {
        self.tick()?;
        self.table[(gen & 1) as usize].index = index.to_vec();
        Ok(())
    }

    fn put_table_bucket(&mut self, gen: u32, bucket: usize, value: &xdns_bucket) -> Result<()> {
        self.tick()?;
        let half = &mut self.table[(gen & 1) as usize].index;
        *half.get_mut(bucket).ok_or_else(|| anyhow::anyhow!("bucket {bucket} outside the table"))? = *value;
        Ok(())
    }

    fn delete_table_bodies(&mut self, gen: u32, keys: &[(xdns_answer_key, u8)]) {
        // `answers` and `bodies` hold every answer, of the table or not: the generation's
        // class S answers of the table, whose keys the loader does not keep, go by their gen
        self.delete_bodies(keys);
        let other = |k: &Vec<u8>| k[8..12] != gen.to_ne_bytes();
        self.answers.retain(|k, _| other(k));
        self.bodies.retain(|k, _| other(k));
    }

    fn new_table_half(&mut self, gen: u32) -> Result<()> {
        self.table[(gen & 1) as usize].vals.clear();
        Ok(())
    }

    fn free_table_half(&mut self, gen: u32) {
        self.table[(gen & 1) as usize] = MemTable::default();
        // `nodes` holds every node, of the table or not: the generation's nodes of the table,
        // whose keys the loader does not keep, go by their gen
        self.nodes.retain(|k, _| k[8..12] != gen.to_ne_bytes());
    }

    fn table_bucket(&self, gen: u32, bucket: usize) -> Result<xdns_bucket> {
        let half = &self.table[(gen & 1) as usize].index;
        half.get(bucket).copied().ok_or_else(|| anyhow::anyhow!("bucket {bucket} outside the table"))
    }

    fn filter_word(&self, gen: u32, word: usize) -> Result<u64> {
        Ok(self.filter[(gen & 1) as usize].as_ref().map_or(0, |f| f.words()[word]))
    }

    fn put_filter_words(&mut self, gen: u32, words: &[(usize, u64)]) -> Result<()> {
        self.tick()?;
        let half = (gen & 1) as usize;
        let mut w = self.filter[half].as_ref().map(|f| f.words().to_vec()).unwrap_or_else(|| vec![0; self.filter_words()]);
        for &(i, v) in words {
            w[i] = v;
        }
        self.filter[half] = Some(Filter::from_words(w));
        Ok(())
    }

    fn set_memo_epoch(&mut self, epoch: u32) -> Result<()> {
        self.epoch = epoch;
        Ok(())
    }

    fn flip_generation(&mut self, gen: u32) -> Result<()> {
        self.gen = gen;
        Ok(())
    }

    fn set_label_floor(&mut self, floor: u32) -> Result<()> {
        self.floor = floor;
        Ok(())
    }

    fn active_generation(&self) -> Result<u32> {
        Ok(self.gen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::{AnswerEntry, Kind, NodeEntry};
    use crate::select::select;
    use xdns_wire::Body;

    const WWW: &[u8] = b"\x03www\x07example\x03com\x00";
    const APEX: &[u8] = b"\x07example\x03com\x00";

    fn data(tag: u8) -> KernelData {
        let node = |n: &[u8]| NodeEntry { name: n.to_vec(), apex: APEX.to_vec(), cut: None, wildcard: false };
        let body = Body { flags: 0x0400, ancount: 1, bytes: vec![tag; 16], an_ns_len: 16, base_len: WWW.len() as u16, ..Default::default() };
        KernelData {
            nodes: vec![node(APEX), node(WWW)],
            answers: vec![AnswerEntry { base: WWW.to_vec(), kind: Kind::Type(1), body }],
        }
    }

    fn tag(maps: &MemMaps, seed: u64) -> Option<u8> {
        let c = select(maps, seed, maps.gen, WWW, 1).ok()?;
        maps.bodies.get(bytes_of(&c.key)).map(|b| b.1[0])
    }

    /// Staging writes the new generation beside the old one without changing what packets see;
    /// commit flips in one step and removes every old entry.
    #[test]
    fn stage_commit_flip() {
        let mut maps = MemMaps::default();
        let mut l = Loader::new(42);
        l.install(&mut maps, &data(0xA)).unwrap();
        assert_eq!((maps.gen, tag(&maps, 42)), (1, Some(0xA)));
        let staged = l.stage(&mut maps, &data(0xB)).unwrap();
        assert_eq!((maps.gen, tag(&maps, 42)), (1, Some(0xA)), "staged data is invisible");
        assert_eq!(maps.nodes.len(), 4, "both generations present while staged");
        l.commit(&mut maps, staged).unwrap();
        assert_eq!((maps.gen, tag(&maps, 42)), (2, Some(0xB)));
        assert_eq!((maps.nodes.len(), maps.answers.len(), maps.bodies.len()), (2, 1, 1), "old generation deleted");
    }

    /// The label floor never exceeds the fewest labels of a generation packets may read: it
    /// drops before a shallower generation is staged and rises only after the commit.
    #[test]
    fn label_floor_follows_generations() {
        const ROOT: &[u8] = b"\x00";
        let mut maps = MemMaps::default();
        let mut l = Loader::new(5);
        l.install(&mut maps, &data(0xA)).unwrap();
        assert_eq!(maps.floor, 2, "example.com");
        let mut root_zone = data(0xB);
        root_zone.nodes.push(NodeEntry { name: ROOT.to_vec(), apex: ROOT.to_vec(), cut: None, wildcard: false });
        let staged = l.stage(&mut maps, &root_zone).unwrap();
        assert_eq!((maps.gen, maps.floor), (1, 0), "lowered while the old generation is active");
        l.commit(&mut maps, staged).unwrap();
        assert_eq!(maps.floor, 0);
        let staged = l.stage(&mut maps, &data(0xC)).unwrap();
        assert_eq!(maps.floor, 0, "not raised while the root zone is readable");
        l.commit(&mut maps, staged).unwrap();
        assert_eq!((maps.floor, tag(&maps, 5)), (2, Some(0xC)), "raised after the commit");
        l.install(&mut maps, &KernelData::default()).unwrap();
        assert_eq!(maps.floor, NO_NODES_FLOOR, "no nodes: every name is under no zone");
    }

    /// `data(tag)` with 2 * CHUNK + 7 more names, each with an A answer: three chunks each.
    fn big(tag: u8) -> KernelData {
        let mut d = data(tag);
        for i in 0..(2 * CHUNK + 7) {
            let name = [&[6u8][..], format!("n{i:05}").as_bytes(), APEX].concat();
            d.nodes.push(NodeEntry { name: name.clone(), apex: APEX.to_vec(), cut: None, wildcard: false });
            let body = Body { flags: 0x0400, bytes: vec![tag; 4], an_ns_len: 4, base_len: name.len() as u16, ..Default::default() };
            d.answers.push(AnswerEntry { base: name, kind: Kind::Type(1), body });
        }
        d
    }

    /// A generation larger than one chunk is written completely, and a failure in a later
    /// chunk removes the earlier chunks too; the old generation stays active throughout.
    #[test]
    fn chunked_write_and_cleanup() {
        let mut maps = MemMaps::default();
        let mut l = Loader::new(9);
        l.install(&mut maps, &big(0xA)).unwrap();
        let n = 2 * CHUNK + 9;
        assert_eq!((maps.nodes.len(), maps.answers.len()), (n, n - 1));
        assert_eq!(maps.progress.get(), ((2 * n - 1) as u64, (2 * n - 1) as u64), "progress: all written");
        maps.fail_after = Some(maps.puts + n + CHUNK + 3); // in the second node chunk (answers come first)
        assert!(l.install(&mut maps, &big(0xB)).is_err());
        let (written, total) = maps.progress.get();
        assert!(written >= n as u64 && written < total, "progress stops where the write failed: {written}/{total}");
        maps.fail_after = None;
        assert_eq!((maps.gen, tag(&maps, 9)), (1, Some(0xA)));
        assert_eq!((maps.nodes.len(), maps.answers.len()), (n, n - 1), "every chunk of the failed generation removed");
        l.install(&mut maps, &big(0xC)).unwrap();
        assert_eq!((maps.gen, tag(&maps, 9), maps.nodes.len()), (2, Some(0xC), n), "old generation deleted");
    }

    /// An install whose owner stops gives up at the next chunk: the old generation stays
    /// active, and the chunk written stays too (deleting would take as long as writing; the
    /// maps go with the process). So does a first install, with no generation active.
    #[test]
    fn abandoned_install_stops_between_chunks() {
        let n = 2 * CHUNK + 9;
        let mut maps = MemMaps { abandon_after: Some(1), ..Default::default() };
        let e = Loader::new(9).install(&mut maps, &big(0xA)).unwrap_err();
        assert!(e.is::<Abandoned>(), "{e:#}");
        assert_eq!((maps.gen, maps.nodes.len(), maps.answers.len()), (0, 0, CHUNK), "nothing active, one chunk (of answers) left");

        let mut maps = MemMaps::default();
        let mut l = Loader::new(9);
        l.install(&mut maps, &big(0xA)).unwrap();
        maps.abandon_after = Some(maps.puts + 1);
        let e = l.install(&mut maps, &big(0xB)).unwrap_err();
        assert!(e.is::<Abandoned>(), "{e:#}");
        assert_eq!((maps.gen, tag(&maps, 9)), (1, Some(0xA)), "the old generation answers");
        assert_eq!((maps.nodes.len(), maps.answers.len()), (n, n - 1 + CHUNK), "one chunk of answers, kept");
        assert_eq!(l.generation(), 1);
    }

    /// A failed write leaves the old generation active and removes the partial new one.
    #[test]
    fn failed_stage_keeps_old() {
        let mut maps = MemMaps::default();
        let mut l = Loader::new(7);
        l.install(&mut maps, &data(0xA)).unwrap();
        maps.fail_after = Some(4);
        assert!(l.install(&mut maps, &data(0xB)).is_err());
        maps.fail_after = None;
        assert_eq!((maps.gen, tag(&maps, 7)), (1, Some(0xA)));
        assert_eq!((maps.nodes.len(), maps.answers.len()), (2, 1), "partial generation removed");
        l.install(&mut maps, &data(0xC)).unwrap();
        assert_eq!(tag(&maps, 7), Some(0xC));
    }

    /// Retiring the active generation makes packets read none (every query passes), deletes
    /// its entries, and the next install continues the generations (the other parity).
    #[test]
    fn retire_stops_answers_and_frees_room() {
        let mut maps = MemMaps::default();
        let mut l = Loader::new(7);
        l.install(&mut maps, &data(0xA)).unwrap();
        l.install(&mut maps, &data(0xB)).unwrap();
        assert_eq!(maps.gen, 2);
        l.retire(&mut maps).unwrap();
        assert_eq!((maps.gen, l.generation(), tag(&maps, 7)), (0, 0, None), "nothing readable");
        assert_eq!((maps.nodes.len(), maps.answers.len()), (0, 0), "entries deleted");
        assert_eq!(l.next_generation(), 3, "parity goes on from the retired generation");
        l.install(&mut maps, &data(0xC)).unwrap();
        assert_eq!((maps.gen, tag(&maps, 7)), (3, Some(0xC)));
        let mut fresh = Loader::new(7);
        fresh.retire(&mut MemMaps::default()).unwrap();
        assert_eq!(fresh.next_generation(), 1, "retiring nothing changes nothing");
    }

    /// An in-place update adds its keys beside the install's key lists, never to them: those
    /// lists are sized exactly for the generation, and one more key copied them whole (16 MiB
    /// for a 1M-name zone, tens of milliseconds on the first IXFR after a full install). What
    /// the update added still goes with its generation: the next install deletes it.
    #[test]
    fn in_place_additions_kept_apart_and_deleted_with_their_generation() {
        let mut maps = MemMaps::default();
        (maps.table_shape, maps.filter_words) = ((64, 512 * 128), 256);
        let mut l = Loader::new(9);
        l.install(&mut maps, &big(0xA)).unwrap();
        let lists = |l: &Loader| {
            let c = l.current.as_ref().unwrap();
            (c.nodes.len(), c.nodes.capacity(), c.answers.len(), c.answers.capacity())
        };
        let installed = lists(&l);
        let (nodes, answers) = (maps.nodes.len(), maps.answers.len());
        let name = [&b"\x03new"[..], APEX].concat();
        let body = Body { flags: 0x0400, ancount: 1, bytes: vec![0xD; 16], an_ns_len: 16, base_len: name.len() as u16, ..Default::default() };
        let node = NodeEntry { name: name.clone(), apex: APEX.to_vec(), cut: None, wildcard: false };
        let delta = crate::delta::Delta {
            nodes: vec![crate::delta::NodeChange { name: name.clone(), old: None, new: Some((node, false)) }],
            answers: vec![crate::delta::AnswerChange { base: name.clone(), kind: Kind::Type(1), old: None, new: Some(body) }],
            names: 1,
            soa_bound: Vec::new(),
            scanned: false,
        };
        let applied = l.apply(&mut maps, &delta).unwrap();
        assert_eq!((applied.nodes, applied.answers), (1, 1));
        assert_eq!((maps.nodes.len(), maps.answers.len()), (nodes + 1, answers + 1), "the new name is in the maps");
        assert_eq!(lists(&l), installed, "the install's key lists are neither grown nor copied");
        l.install(&mut maps, &big(0xB)).unwrap();
        let gen_of = |k: &Vec<u8>| u32::from_ne_bytes(k[8..12].try_into().unwrap());
        assert_eq!(maps.gen, 2);
        assert!(maps.nodes.keys().all(|k| gen_of(k) == 2), "every node of generation 1 deleted, the added one too");
        assert!(maps.answers.keys().chain(maps.bodies.keys()).all(|k| gen_of(k) == 2), "every answer of generation 1 deleted");
        assert_eq!(maps.nodes.len(), nodes);
    }

    /// Each generation's presence filter goes to the half of its parity: staging never touches
    /// the active generation's half, the new half holds the new keys, and the lookup twin
    /// (select.rs, like the kernel) finds nothing once a half is emptied. After u32::MAX
    /// comes 2, so parities still alternate.
    #[test]
    fn filter_halves_alternate() {
        let mut maps = MemMaps::default();
        let mut l = Loader::new(3);
        l.install(&mut maps, &data(0xA)).unwrap();
        let active = maps.filter[1].clone().expect("generation 1 writes half 1");
        assert!(maps.filter[0].is_none());
        let staged = l.stage(&mut maps, &data(0xB)).unwrap();
        assert_eq!(maps.filter[1].as_ref(), Some(&active), "staging leaves the active half alone");
        l.commit(&mut maps, staged).unwrap();
        assert_eq!(tag(&maps, 3), Some(0xB));
        let www = crate::hash::name_hash(3, WWW);
        assert!(maps.maybe(2, www, FILTER_NODE) && maps.maybe(2, www, 1 + 1), "node and Type(A) of www");
        assert!(maps.filter[0].as_ref().unwrap().load() < 0.1);
        maps.filter[0] = Some(Filter::new(64));
        assert_eq!(select(&maps, 3, maps.gen, WWW, 1).err(), Some(crate::select::Miss::NoZone));
        let wrapped = Loader { seed: 3, current: Some(Installed { gen: u32::MAX, ..Default::default() }), retired: 0, epoch: 0 };
        assert_eq!(wrapped.next_generation(), 2);
    }

    fn akey(hash: u64, qtype: u16, gen: u32) -> xdns_answer_key {
        xdns_answer_key { hash, gen, qtype, kind: xdns_body_kind::XDNS_KIND_TYPE.0 as u8, ..Default::default() }
    }

    /// The answer table finds what it placed, for that generation only; a key whose bucket
    /// has no free entry, or that comes after the last value, is left out and marks its
    /// bucket spilled (only there does a miss ask the hash map); other buckets stay clean.
    #[test]
    fn table_places_until_full() {
        // six records of 32 bytes (addresses in words of four bytes), then none: the bytes ran out
        let mut t = Table::new(4, 6 * 32 + 16);
        let keys: Vec<_> = (0..6u64).map(|i| akey(i.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, 7)).collect();
        let idx: Vec<_> = keys.iter().map(|k| t.place(k, 32)).collect();
        assert_eq!(idx, (0..6).map(|i| Some(i * 8)).collect::<Vec<_>>());
        for (k, i) in keys.iter().zip(&idx) {
            assert_eq!(t.get(k), *i);
            assert_eq!(t.get(&akey(k.hash, 1, 9)), None, "another generation");
            assert_eq!(t.get(&akey(k.hash, 28, 7)), None, "another type");
            assert!(!t.spilled(k));
        }
        let late = akey(99, 1, 7);
        assert_eq!(t.place(&late, 32), None, "no bytes left");
        assert!(t.spilled(&late));
        assert_eq!(t.counts(), (6, 1));
        for (k, i) in keys.iter().zip(&idx) {
            assert_eq!(t.get(k), *i, "the spilled mark keeps the indices");
        }

        // five keys of one bucket: the fifth finds no entry, and only that bucket is spilled
        let mut t = Table::new(2, 4000);
        let in_bucket = |t: &Table, b: usize| {
            (0..1000u64).map(|h| akey(h.wrapping_mul(0x9e37_79b9_7f4a_7c15), 1, 1)).filter(|k| t.bucket_of(k) == b).take(5).collect::<Vec<_>>()
        };
        let (same, other) = (in_bucket(&t, 0), in_bucket(&t, 1));
        assert_eq!((same.len(), other.len()), (5, 5));
        let placed: Vec<_> = same.iter().map(|k| t.place(k, 40)).collect();
        assert_eq!(placed, vec![Some(0), Some(10), Some(20), Some(30), None]);
        assert_eq!(t.get(&same[4]), None);
        assert_eq!(t.get(&same[3]), Some(30));
        assert!(t.spilled(&same[4]) && !t.spilled(&other[0]));
    }

    /// Installs write the staged generation's half of the table (values, then the index);
    /// the active half is left alone.
    #[test]
    fn table_halves_follow_generations() {
        let mut maps = MemMaps { table_shape: (8, 4096), ..Default::default() };
        let mut l = Loader::new(3);
        l.install(&mut maps, &data(0xA)).unwrap();
        let www = crate::hash::name_hash(3, WWW);
        let table = |maps: &MemMaps, gen: u32| Table {
            buckets: maps.table[(gen & 1) as usize].index.clone(),
            ..Default::default()
        };
        let find = |maps: &MemMaps, gen: u32| {
            let i = table(maps, gen).get(&akey(www, 1, gen))?;
            maps.table[(gen & 1) as usize].vals.get(&i).copied()
        };
        assert_eq!(find(&maps, 1).map(|a| a.len), Some(16));
        assert!(!table(&maps, 1).spilled(&akey(www, 1, 1)));
        let raw = |b: &[xdns_bucket]| b.iter().flat_map(|b| bytes_of(b).to_vec()).collect::<Vec<u8>>();
        let before = raw(&maps.table[1].index);
        let staged = l.stage(&mut maps, &data(0xB)).unwrap();
        assert_eq!(raw(&maps.table[1].index), before, "staging leaves the active half alone");
        l.commit(&mut maps, staged).unwrap();
        assert!(find(&maps, 2).is_some());

        // no room: the answer is left out and its bucket spilled
        let mut maps = MemMaps { table_shape: (1, 0), ..Default::default() };
        let mut l = Loader::new(3);
        l.install(&mut maps, &data(0xA)).unwrap();
        assert!(table(&maps, 1).spilled(&akey(www, 1, 1)));
        assert_eq!(l.table_counts(), (0, 1));
    }
}
