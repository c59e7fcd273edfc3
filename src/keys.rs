//! JavaScript keys to hashed keys, in one place (docs/format.md §1).
//!
//! A key is a `string` (hashed as Rust's `&str`: its UTF-8 bytes, lone surrogates replaced by
//! U+FFFD as V8's UTF-8 writer does, then `0xff`), a `Uint8Array` (as `&[u8]`: length as u64,
//! then the bytes), or a safe-integer `number` or an i64 `bigint` (as `i64`). Anything else is a
//! `TypeError`, a number or bigint out of range a `RangeError`.
//!
//! # Performance
//! Strings are the common key and are copied once, as UTF-16 into a stack buffer, by a single
//! `napi_get_value_string_utf16` call, then converted to UTF-8 on the stack (see [`with_str`]);
//! only strings longer than the buffer take a second call and a heap buffer. napi-rs' `String`
//! conversion always takes two calls and a heap allocation.
//! Byte keys are hashed in place, without a copy.

use crate::error::{Failure, Result};
use keepcount_limits::hash::KeyHash;
use napi::sys;
use std::hash::{Hash, Hasher};
use std::mem::MaybeUninit;
use std::ptr;

/// Stack buffer for string keys, in UTF-16 units: covers IP addresses, ids and most URLs in one
/// napi call.
const STACK_KEY_UNITS: usize = 256;
/// The largest integer a `number` represents exactly (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_INTEGER: f64 = 9_007_199_254_740_991.0;

/// A key as Rust sees it, hashing exactly like the Rust type it stands for.
#[derive(Clone, Copy)]
pub(crate) enum Key<'a> {
    /// A JavaScript string: hashes as `&str`.
    Str(&'a str),
    /// A `Uint8Array`: hashes as `&[u8]`.
    Bytes(&'a [u8]),
    /// A safe-integer number or an i64 bigint: hashes as `i64`.
    Int(i64),
}

/// Tag bytes of the stored form ([`Key::with_stored`], docs/format.md §6.1).
const TAG_STR: u8 = 0;
const TAG_BYTES: u8 = 1;
const TAG_INT: u8 = 2;

/// Keys whose stored form is at most this many bytes are built on the stack ([`Key::with_stored`]).
const STACK_KEY_BYTES: usize = 128;

impl Key<'_> {
    /// Calls `f` with the key's stored form (docs/format.md §6.1): a tag byte (0 string, 1 bytes,
    /// 2 integer) then the UTF-8 bytes, the bytes, or the i64 little endian; on the stack when it
    /// is short. `Limiter` tables and heavy-hitter tables keep keys in this form, so keys that are
    /// one key to JavaScript (`1` and `1n`) are one entry, and tables can give keys back typed.
    pub(crate) fn with_stored<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        let int;
        let (tag, body): (u8, &[u8]) = match self {
            Self::Str(s) => (TAG_STR, s.as_bytes()),
            Self::Bytes(b) => (TAG_BYTES, b),
            Self::Int(i) => {
                int = i.to_le_bytes();
                (TAG_INT, &int)
            }
        };
        let mut stack = [0u8; STACK_KEY_BYTES];
        match stack.get_mut(..=body.len()) {
            Some(buf) => {
                buf[0] = tag;
                buf[1..].copy_from_slice(body);
                f(buf)
            }
            None => {
                let mut heap = Vec::with_capacity(body.len() + 1);
                heap.push(tag);
                heap.extend_from_slice(body);
                f(&heap)
            }
        }
    }
}

/// A key decoded from its stored form ([`Key::with_stored`]).
pub(crate) enum Stored<'a> {
    Str(&'a str),
    Bytes(&'a [u8]),
    Int(i64),
}

impl<'a> Stored<'a> {
    /// Decodes `bytes`; `None` for bytes that are no stored form (a corrupt or foreign summary).
    pub(crate) fn decode(bytes: &'a [u8]) -> Option<Self> {
        let (&tag, payload) = bytes.split_first()?;
        match tag {
            TAG_STR => std::str::from_utf8(payload).ok().map(Self::Str),
            TAG_BYTES => Some(Self::Bytes(payload)),
            TAG_INT => payload
                .try_into()
                .ok()
                .map(|b| Self::Int(i64::from_le_bytes(b))),
            _ => None,
        }
    }
}

impl Hash for Key<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Delegate, with no discriminant: the byte stream is exactly the Rust type's.
        match self {
            Self::Str(s) => s.hash(state),
            Self::Bytes(b) => b.hash(state),
            Self::Int(i) => i.hash(state),
        }
    }
}

/// Converts the JavaScript key `value` and hashes it with `hash` (a sketch's seeded hasher).
///
/// # Safety
/// `env` and `value` must be the live handles of the current napi call.
pub(crate) unsafe fn hash_key(
    env: sys::napi_env,
    value: sys::napi_value,
    hash: impl FnOnce(Key<'_>) -> KeyHash,
) -> Result<KeyHash> {
    // SAFETY: caller contract.
    unsafe { with_key(env, value, hash) }
}

/// Converts the JavaScript key `value` and calls `f` with it (the same conversions and errors as
/// [`hash_key`]).
///
/// # Safety
/// `env` and `value` must be the live handles of the current napi call.
pub(crate) unsafe fn with_key<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(Key<'_>) -> R,
) -> Result<R> {
    let mut kind = 0;
    // SAFETY: live handles (caller contract); `kind` is a valid out-pointer.
    if unsafe { sys::napi_typeof(env, value, &mut kind) } != sys::Status::napi_ok {
        return Err(Failure::invalid_key_type());
    }
    match kind {
        sys::ValueType::napi_string => unsafe { with_str(env, value, |s| f(Key::Str(s))) },
        sys::ValueType::napi_number => {
            let mut number = 0.0;
            // SAFETY: live handles; `value` is a number, so this cannot fail.
            unsafe { sys::napi_get_value_double(env, value, &mut number) };
            Ok(f(Key::Int(safe_integer(number)?)))
        }
        sys::ValueType::napi_bigint => {
            let mut int = 0;
            let mut lossless = false;
            // SAFETY: live handles; `value` is a bigint.
            unsafe { sys::napi_get_value_bigint_int64(env, value, &mut int, &mut lossless) };
            if !lossless {
                return Err(Failure::out_of_range(
                    "The \"key\" argument",
                    "in the i64 range when it is a bigint",
                ));
            }
            Ok(f(Key::Int(int)))
        }
        sys::ValueType::napi_object => match unsafe { uint8_array(env, value) } {
            Some(bytes) => Ok(f(Key::Bytes(bytes))),
            None => Err(Failure::invalid_key_type()),
        },
        _ => Err(Failure::invalid_key_type()),
    }
}

/// [`with_key`] for a key the caller knows is a string: one napi call fewer (no `napi_typeof`).
/// Anything else is the same `TypeError`.
///
/// # Safety
/// `env` and `value` must be the live handles of the current napi call.
#[inline(always)]
pub(crate) unsafe fn with_str_key<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(Key<'_>) -> R,
) -> Result<R> {
    // SAFETY: live handles (caller contract); a non-string fails `napi_get_value_string_utf8`.
    unsafe { with_str(env, value, |s| f(Key::Str(s))) }
}

/// [`with_key`] for a key the caller knows is a number: a safe integer, hashed as i64.
/// A non-number is the same `TypeError`, a number that is no safe integer the same `RangeError`.
///
/// # Safety
/// `env` and `value` must be the live handles of the current napi call.
#[inline(always)]
pub(crate) unsafe fn with_number_key<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(Key<'_>) -> R,
) -> Result<R> {
    let mut number = 0.0;
    // SAFETY: live handles (caller contract); a non-number returns `napi_number_expected`.
    if unsafe { sys::napi_get_value_double(env, value, &mut number) } != sys::Status::napi_ok {
        return Err(Failure::invalid_key_type());
    }
    Ok(f(Key::Int(safe_integer(number)?)))
}

/// The bytes of a `Uint8Array` (Buffer included), or `None` for any other value.
///
/// # Safety
/// `env` and `value` must be live handles, and the returned slice must be dropped before any
/// JavaScript runs (which could detach or resize its buffer).
pub(crate) unsafe fn uint8_array<'a>(
    env: sys::napi_env,
    value: sys::napi_value,
) -> Option<&'a [u8]> {
    let mut kind = -1;
    let mut len = 0usize;
    let mut data = ptr::null_mut();
    // SAFETY: live handles; every out-pointer is valid or null where napi allows null. A value
    // that is not a typed array returns an error status, never aborts.
    let status = unsafe {
        sys::napi_get_typedarray_info(
            env,
            value,
            &mut kind,
            &mut len,
            &mut data,
            ptr::null_mut(),
            ptr::null_mut(),
        )
    };
    if status != sys::Status::napi_ok || kind != sys::TypedarrayType::uint8_array {
        return None;
    }
    if data.is_null() || len == 0 {
        // An empty or detached array: `from_raw_parts` needs a non-null pointer.
        return Some(&[]);
    }
    // SAFETY: napi reports `len` elements of one byte at `data` (already offset into the
    // buffer), alive while `value` is and nothing runs JavaScript (caller contract).
    Some(unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) })
}

/// Calls `f` with the string `value` as UTF-8, lone surrogates replaced by U+FFFD.
///
/// The string is read as UTF-16 (`napi_get_value_string_utf16`, V8's `String::Write`: a plain
/// copy, widening for one-byte strings) and converted here, not read as UTF-8 (`WriteUtf8`, which
/// measures and encodes in V8): ~250 instead of ~520 instructions for a 12-character key
/// (callgrind, with the `from_utf8` check V8's output needed). The conversion replaces each
/// unpaired surrogate with U+FFFD exactly as V8's UTF-8 writer does (docs/format.md §1).
///
/// # Safety
/// `env` and `value` must be live handles; a `value` that is not a string is a `TypeError`.
#[inline(always)]
unsafe fn with_str<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(&str) -> R,
) -> Result<R> {
    let mut stack = MaybeUninit::<[u16; STACK_KEY_UNITS]>::uninit();
    let mut written = 0usize;
    // SAFETY: the buffer has STACK_KEY_UNITS writable units; napi writes at most bufsize - 1
    // units plus a NUL we do not read. A non-string returns `napi_string_expected`.
    let status = unsafe {
        sys::napi_get_value_string_utf16(
            env,
            value,
            stack.as_mut_ptr().cast(),
            STACK_KEY_UNITS,
            &mut written,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(Failure::invalid_key_type());
    }
    if written + 1 < STACK_KEY_UNITS {
        // Fewer units than fit: the whole string. SAFETY: napi initialised `written` units.
        let units = unsafe { std::slice::from_raw_parts(stack.as_ptr().cast::<u16>(), written) };
        return Ok(utf16_as_str(units, f));
    }
    Ok(unsafe { with_long_str(env, value, f) })
}

/// [`with_str`] for a string of `STACK_KEY_UNITS - 1` units or more: copied to the heap.
///
/// # Safety
/// `env` and `value` must be live handles and `value` a string.
#[cold]
unsafe fn with_long_str<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(&str) -> R,
) -> R {
    let mut len = 0usize;
    // SAFETY: a null buffer asks for the length in units, without the NUL.
    unsafe { sys::napi_get_value_string_utf16(env, value, ptr::null_mut(), 0, &mut len) };
    let mut heap = vec![0u16; len + 1];
    let mut written = 0usize;
    // SAFETY: `heap` has len + 1 writable units.
    unsafe {
        sys::napi_get_value_string_utf16(env, value, heap.as_mut_ptr(), len + 1, &mut written)
    };
    heap.truncate(written);
    let utf8: String = char::decode_utf16(heap)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect();
    f(&utf8)
}

/// Calls `f` with `units` (at most `STACK_KEY_UNITS`) as UTF-8, on the stack.
#[inline(always)]
fn utf16_as_str<R>(units: &[u16], f: impl FnOnce(&str) -> R) -> R {
    if !units.iter().all(|&unit| unit < 0x80) {
        return non_ascii_as_str(units, f);
    }
    // Not zeroed: only the bytes written below are read.
    let mut bytes = MaybeUninit::<[u8; STACK_KEY_UNITS]>::uninit();
    let out = bytes.as_mut_ptr().cast::<u8>();
    for (i, &unit) in units.iter().enumerate() {
        // SAFETY: i < units.len() <= STACK_KEY_UNITS.
        unsafe { out.add(i).write(unit as u8) };
    }
    // SAFETY: the first units.len() bytes were written just above, and all are below 0x80:
    // ASCII, which is UTF-8 (`from_utf8` would repeat the scan just done).
    f(unsafe { std::str::from_utf8_unchecked(std::slice::from_raw_parts(out, units.len())) })
}

/// [`utf16_as_str`] for units that are not all ASCII.
#[inline(never)]
fn non_ascii_as_str<R>(units: &[u16], f: impl FnOnce(&str) -> R) -> R {
    // At most 3 bytes per unit: a pair of surrogates (2 units) takes 4 bytes.
    let mut bytes = [0u8; 3 * STACK_KEY_UNITS];
    let mut len = 0;
    for c in char::decode_utf16(units.iter().copied()) {
        len += c
            .unwrap_or(char::REPLACEMENT_CHARACTER)
            .encode_utf8(&mut bytes[len..])
            .len();
    }
    // Whole characters were encoded: UTF-8 by construction, and checked here, off the hot path.
    f(std::str::from_utf8(&bytes[..len]).unwrap_or_default())
}

/// A number key as the i64 it stands for, if it is a safe integer.
fn safe_integer(number: f64) -> Result<i64> {
    // NaN fails both comparisons. Within ±2^53 a double is an integer exactly when truncating it
    // to i64 and back gives it again (one instruction each way; `fract()` calls libm's `trunc`).
    if number.abs() <= MAX_SAFE_INTEGER && number as i64 as f64 == number {
        // Exact: |number| <= 2^53 - 1 and integral.
        Ok(number as i64)
    } else {
        Err(Failure::out_of_range(
            "The \"key\" argument",
            "a safe integer when it is a number",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keepcount_limits::hash::SeededState;

    #[test]
    fn keys_hash_like_the_rust_types_they_stand_for() {
        let hasher = SeededState::new(42);
        assert_eq!(
            hasher.hash_one_key(Key::Str("1.2.3.4")),
            hasher.hash_one_key("1.2.3.4")
        );
        assert_eq!(
            hasher.hash_one_key(Key::Bytes(b"ab")),
            hasher.hash_one_key(&b"ab"[..])
        );
        assert_eq!(
            hasher.hash_one_key(Key::Int(-7)),
            hasher.hash_one_key(-7i64)
        );
    }

    #[test]
    fn utf16_converts_like_v8s_utf8_writer() {
        let cases: [&[u16]; 6] = [
            &[],
            &[0x31, 0x2e, 0x32],
            &[0xe9, 0x20ac],
            &[0xd83d, 0xde00],
            &[0xd800, 0xdfff, 0xdc00],
            &[0xdc00, 0x41, 0xd800],
        ];
        for units in cases {
            let expected = String::from_utf16_lossy(units);
            assert_eq!(utf16_as_str(units, str::to_owned), expected);
        }
        let long: Vec<u16> = (0..STACK_KEY_UNITS as u16).map(|i| 0x800 + i).collect();
        assert_eq!(
            utf16_as_str(&long, str::to_owned),
            String::from_utf16_lossy(&long)
        );
    }

    #[test]
    fn number_keys_must_be_safe_integers() {
        assert_eq!(safe_integer(-3.0).ok(), Some(-3));
        assert_eq!(
            safe_integer(MAX_SAFE_INTEGER).ok(),
            Some(9_007_199_254_740_991)
        );
        for bad in [
            0.5,
            -0.5,
            1e-300,
            f64::NAN,
            f64::INFINITY,
            MAX_SAFE_INTEGER + 1.0,
        ] {
            assert!(safe_integer(bad).is_err());
        }
    }
}
