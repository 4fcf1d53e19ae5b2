//! Frame Streams, the framing dnstap travels in.
//!
//! A data frame is a 32-bit big-endian length (never 0) and the payload. A control frame
//! starts with an escape (a zero length), then its own length, its type, and fields (a
//! type, a length, the value; only CONTENT_TYPE is used). A file is unidirectional:
//! START (with the content type), data frames, STOP. A socket is bidirectional: the writer
//! sends READY with the content types it offers, the reader answers ACCEPT with the one it
//! takes, the writer sends START and data frames; at the end STOP, and the reader answers
//! FINISH.

use std::io::{self, Read};

/// The content type of dnstap.
pub const CONTENT_TYPE: &[u8] = b"protobuf:dnstap.Dnstap";

/// Control frame types.
pub const ACCEPT: u32 = 0x01;
pub const START: u32 = 0x02;
pub const STOP: u32 = 0x03;
pub const READY: u32 = 0x04;
pub const FINISH: u32 = 0x05;
/// The control field holding a content type.
const FIELD_CONTENT_TYPE: u32 = 0x01;
/// Largest control frame accepted from a reader.
const MAX_CONTROL: usize = 512;

/// A control frame of `kind`, with `content_type` as its one field when given.
pub fn control(kind: u32, content_type: Option<&[u8]>) -> Vec<u8> {
    let mut body = kind.to_be_bytes().to_vec();
    if let Some(ct) = content_type {
        body.extend_from_slice(&FIELD_CONTENT_TYPE.to_be_bytes());
        body.extend_from_slice(&(ct.len() as u32).to_be_bytes());
        body.extend_from_slice(ct);
    }
    let mut f = vec![0, 0, 0, 0];
    f.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f.extend_from_slice(&body);
    f
}

/// Start a data frame in `out` (cleared): its length is filled in by [`finish_data`].
pub fn begin_data(out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0; 4]);
}

/// Write the length of the data frame begun by [`begin_data`].
pub fn finish_data(out: &mut [u8]) {
    let len = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&len.to_be_bytes());
}

/// One control frame read from `r`: its type and content types.
pub fn read_control(r: &mut impl Read) -> io::Result<(u32, Vec<Vec<u8>>)> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("Frame Streams: {what}"));
    let mut word = [0u8; 4];
    r.read_exact(&mut word)?;
    if word != [0; 4] {
        return Err(bad("a data frame where a control frame was expected"));
    }
    r.read_exact(&mut word)?;
    let len = u32::from_be_bytes(word) as usize;
    if !(4..=MAX_CONTROL).contains(&len) {
        return Err(bad("control frame length out of range"));
    }
    let mut body = vec![0; len];
    r.read_exact(&mut body)?;
    parse_control(&body).ok_or_else(|| bad("malformed control frame"))
}

/// A control frame's body (after the escape and length): its type and content types.
pub fn parse_control(body: &[u8]) -> Option<(u32, Vec<Vec<u8>>)> {
    let (kind, mut rest) = body.split_first_chunk::<4>()?;
    let mut types = Vec::new();
    while !rest.is_empty() {
        let (field, r) = rest.split_first_chunk::<4>()?;
        let (len, r) = r.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        if len > r.len() {
            return None;
        }
        if u32::from_be_bytes(*field) == FIELD_CONTENT_TYPE {
            types.push(r[..len].to_vec());
        }
        rest = &r[len..];
    }
    Some((u32::from_be_bytes(*kind), types))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_frames_are_escaped_and_sized() {
        let f = control(START, Some(CONTENT_TYPE));
        assert_eq!(&f[..4], &[0; 4], "escape");
        assert_eq!(u32::from_be_bytes(f[4..8].try_into().unwrap()) as usize, f.len() - 8);
        assert_eq!(&f[8..12], &START.to_be_bytes());
        assert_eq!(&f[12..16], &1u32.to_be_bytes(), "CONTENT_TYPE field");
        assert_eq!(&f[16..20], &22u32.to_be_bytes());
        assert_eq!(&f[20..], CONTENT_TYPE);
        let (kind, types) = read_control(&mut &f[..]).unwrap();
        assert_eq!((kind, types), (START, vec![CONTENT_TYPE.to_vec()]));
        // STOP has no field: 12 bytes
        assert_eq!(control(STOP, None), [0, 0, 0, 0, 0, 0, 0, 4, 0, 0, 0, 3]);
    }

    #[test]
    fn data_frames_carry_their_length() {
        let mut out = vec![9; 3];
        begin_data(&mut out);
        out.extend_from_slice(b"hello");
        finish_data(&mut out);
        assert_eq!(out, [0, 0, 0, 5, b'h', b'e', b'l', b'l', b'o']);
    }

    #[test]
    fn bad_control_frames_are_errors_not_panics() {
        let cases: [&[u8]; 5] = [
            &[0, 0, 0, 5, 1, 2, 3, 4, 5],            // a data frame
            &[0, 0, 0, 0, 0, 0, 0, 2, 0, 1],         // shorter than a type
            &[0, 0, 0, 0, 0, 0, 16, 0],              // too long
            &[0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 9], // field past the end
            &[0, 0, 0, 0, 0, 0],                     // truncated
        ];
        for c in cases {
            assert!(read_control(&mut &c[..]).is_err(), "{c:?}");
        }
    }
}
