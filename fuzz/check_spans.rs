//! The checks every input of the `zone_spans` fuzz target must pass, shared by the cargo-fuzz
//! target (`fuzz/fuzz_targets/zone_spans.rs`) and the corpus replay test
//! (`crates/xdns-zone/tests/spans_fuzz_corpus.rs`, plain `cargo test`).
//!
//! The zone loader's pre-scanner (`xdns_zone::load::entry_spans`) splits master-file text into
//! entries so that records and errors get their line numbers. It reads whatever bytes the file
//! holds, so it must not panic and must keep its spans consistent with the text.

use xdns_zone::load::{dollar_ttl, entry_spans, SpanKind};

/// Runs the pre-scanner over `text` and checks every span: inside the text, non-empty, in
/// order and not overlapping; its first line is the line of its first byte and its last line
/// that of its last byte (an entry ended by a newline ends on the line of that newline);
/// `indented` is whether it starts with white space; directives start with `$` at the start
/// of a line; a record holds a token. `$TTL` values are read without panicking.
/// Panics (with a reason) on any violation.
pub fn check(text: &[u8]) {
    // newlines[i]: newlines in text[..i].
    let mut newlines = Vec::with_capacity(text.len() + 1);
    newlines.push(0usize);
    for &c in text {
        newlines.push(newlines.last().unwrap() + usize::from(c == b'\n'));
    }
    let lines_before = |at: usize| 1 + newlines[at];
    let mut prev_end = 0usize;
    let mut count = 0usize;
    for s in entry_spans(text) {
        count += 1;
        assert!(count <= text.len(), "more spans than bytes");
        assert!(s.start < s.end, "empty span {s:?}");
        assert!(s.end <= text.len(), "span {s:?} past the end ({})", text.len());
        assert!(s.start >= prev_end, "span {s:?} overlaps the previous one (end {prev_end})");
        prev_end = s.end;
        assert_eq!(s.first_line, lines_before(s.start), "first line of {s:?}");
        assert!(s.last_line >= s.first_line, "{s:?}");
        let after = lines_before(s.end);
        if s.end < text.len() {
            assert_eq!(text[s.end - 1], b'\n', "{s:?} ends inside a line");
            assert_eq!(s.last_line, after - 1, "last line of {s:?}");
        } else {
            assert!(s.last_line == after || s.last_line + 1 == after, "last line of {s:?}");
        }
        let first = text[s.start];
        assert_eq!(s.indented, matches!(first, b' ' | b'\t' | b'\r'), "indented of {s:?}");
        let body = &text[s.start..s.end];
        match s.kind {
            SpanKind::Record => assert!(
                body.iter().any(|c| !matches!(c, b' ' | b'\t' | b'\r' | b'\n')),
                "record span {s:?} without a token"
            ),
            SpanKind::Origin | SpanKind::Ttl | SpanKind::Include | SpanKind::Other => {
                assert!(!s.indented && first == b'$', "directive {s:?} not at a line start");
                assert!(s.start == 0 || text[s.start - 1] == b'\n', "directive {s:?} mid-line");
            }
        }
        if s.kind == SpanKind::Ttl {
            if let Some(v) = dollar_ttl(text, &s) {
                let digits = v.to_string();
                assert!(
                    body.windows(digits.len()).any(|w| w == digits.as_bytes()),
                    "$TTL {v} not in {s:?}"
                );
            }
        }
    }
}
