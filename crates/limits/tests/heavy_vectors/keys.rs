//! Keys as JavaScript callers pass them (strings as UTF-16, bytes, integers), their stored form
//! (§6.1), and their JSON form in the vectors; and the edge keys whose stored form the vectors pin
//! down.

use std::fmt::Write as _;

/// Tags of the stored form (§6.1).
pub(crate) const TAG_STR: u8 = 0;
pub(crate) const TAG_BYTES: u8 = 1;
pub(crate) const TAG_INT: u8 = 2;

/// A key as a JavaScript caller passes it: a string as UTF-16 code units (so lone surrogates can
/// be written), bytes, or an integer.
#[derive(Clone, Debug)]
pub(crate) enum Key {
    Str(Vec<u16>),
    Bytes(Vec<u8>),
    Int(i64),
}

pub(crate) fn s(text: &str) -> Key {
    Key::Str(text.encode_utf16().collect())
}

impl Key {
    /// The stored form: the tag, then UTF-8 (lone surrogates as U+FFFD, as `TextEncoder`), the
    /// bytes, or the i64 little endian.
    pub(crate) fn stored(&self) -> Vec<u8> {
        match self {
            Key::Str(units) => {
                let mut out = vec![TAG_STR];
                out.extend_from_slice(String::from_utf16_lossy(units).as_bytes());
                out
            }
            Key::Bytes(bytes) => {
                let mut out = vec![TAG_BYTES];
                out.extend_from_slice(bytes);
                out
            }
            Key::Int(i) => {
                let mut out = vec![TAG_INT];
                out.extend_from_slice(&i.to_le_bytes());
                out
            }
        }
    }

    /// `"type", key` for the JSON: strings as JSON strings (non-ASCII as `\u` escapes of their
    /// UTF-16 units), bytes as hex, integers as decimal strings.
    pub(crate) fn json(&self) -> String {
        match self {
            Key::Str(units) => format!("\"string\", {}", json_units(units)),
            Key::Bytes(bytes) => format!("\"bytes\", \"{}\"", hex(bytes)),
            Key::Int(i) => format!("\"i64\", \"{i}\""),
        }
    }
}

/// A stored key as `top` gives it back in Node (a string decoded from UTF-8, bytes, an integer),
/// in the JSON form of [`Key::json`].
pub(crate) fn decoded_json(stored: &[u8]) -> String {
    let (&tag, payload) = stored.split_first().expect("stored keys have a tag");
    match tag {
        TAG_STR => {
            let text = std::str::from_utf8(payload).expect("stored strings are UTF-8");
            Key::Str(text.encode_utf16().collect()).json()
        }
        TAG_BYTES => Key::Bytes(payload.to_vec()).json(),
        TAG_INT => Key::Int(i64::from_le_bytes(payload.try_into().expect("8 bytes"))).json(),
        _ => panic!("no key has tag {tag}"),
    }
}

fn json_units(units: &[u16]) -> String {
    let mut out = String::from("\"");
    for &u in units {
        match u {
            0x20..=0x7e if u != u16::from(b'"') && u != u16::from(b'\\') => {
                out.push(char::from(u as u8));
            }
            _ => {
                let _ = write!(out, "\\u{u:04x}");
            }
        }
    }
    out.push('"');
    out
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The keys whose stored form is worth pinning down: empty ones, multi-byte and lone-surrogate
/// strings (which become U+FFFD, so `"\u{d800}"` and `"\u{fffd}"` are one key), a leading BOM
/// (which a UTF-8 decoder must keep), bytes equal to a string's UTF-8 or stored form, and the
/// integers at the edges of safe numbers and of i64.
pub(crate) fn edge_keys() -> Vec<Key> {
    vec![
        s(""),
        s("a"),
        s("10.0.0.1"),
        s("żółw 🐢"),
        Key::Str(vec![0xd800]),
        Key::Str(vec![u16::from(b'x'), 0xdc00, u16::from(b'y')]),
        Key::Str(vec![u16::from(b'z'), 0xd83d]),
        s("\u{fffd}"),
        s("\u{feff}bom"),
        s("\u{0}nul\"\\"),
        Key::Bytes(vec![]),
        Key::Bytes(vec![0x61]),
        Key::Bytes(vec![TAG_STR, 0x61]),
        Key::Bytes(vec![0xff, 0xfe, 0x00]),
        Key::Int(0),
        Key::Int(1),
        Key::Int(-1),
        Key::Int((1 << 53) - 1),
        Key::Int(-((1 << 53) - 1)),
        Key::Int(1 << 53),
        Key::Int(i64::MIN),
        Key::Int(i64::MAX),
    ]
}

/// Whether `bytes` is a stored form some JavaScript key has (§6.1).
pub(crate) fn is_stored_form(bytes: &[u8]) -> bool {
    match bytes.split_first() {
        Some((&TAG_STR, payload)) => std::str::from_utf8(payload).is_ok(),
        Some((&TAG_BYTES, _)) => true,
        Some((&TAG_INT, payload)) => payload.len() == 8,
        _ => false,
    }
}
