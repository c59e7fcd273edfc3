//! JavaScript keys to hashed keys, in one place (docs/format.md §1).
//!
//! A key is a `string` (hashed as Rust's `&str`: its UTF-8 bytes, lone surrogates replaced by
//! U+FFFD as V8's UTF-8 writer does, then `0xff`), a `Uint8Array` (as `&[u8]`: length as u64,
//! then the bytes), or a safe-integer `number` or an i64 `bigint` (as `i64`). Anything else is a
//! `TypeError`, a number or bigint out of range a `RangeError`.
//!
//! # Performance
//! Strings are the common key and are copied once, into a stack buffer, by a single
//! `napi_get_value_string_utf8` call; only strings longer than the buffer take a second call
//! and a heap buffer. napi-rs' `String` conversion always takes two calls and a heap allocation.
//! Byte keys are hashed in place, without a copy.

use crate::error::{Failure, Result};
use keepcount_limits::hash::KeyHash;
use napi::sys;
use std::hash::{Hash, Hasher};
use std::mem::MaybeUninit;
use std::ptr;

/// Stack buffer for string keys: covers IP addresses, ids and most URLs in one napi call.
const STACK_KEY_BYTES: usize = 256;
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
    let mut kind = 0;
    // SAFETY: live handles (caller contract); `kind` is a valid out-pointer.
    if unsafe { sys::napi_typeof(env, value, &mut kind) } != sys::Status::napi_ok {
        return Err(Failure::invalid_key_type());
    }
    match kind {
        sys::ValueType::napi_string => unsafe { with_str(env, value, |s| hash(Key::Str(s))) },
        sys::ValueType::napi_number => {
            let mut number = 0.0;
            // SAFETY: live handles; `value` is a number, so this cannot fail.
            unsafe { sys::napi_get_value_double(env, value, &mut number) };
            Ok(hash(Key::Int(safe_integer(number)?)))
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
            Ok(hash(Key::Int(int)))
        }
        sys::ValueType::napi_object => match unsafe { uint8_array(env, value) } {
            Some(bytes) => Ok(hash(Key::Bytes(bytes))),
            None => Err(Failure::invalid_key_type()),
        },
        _ => Err(Failure::invalid_key_type()),
    }
}

/// [`hash_key`] for a key the caller knows is a string: one napi call fewer (no `napi_typeof`).
/// Anything else is the same `TypeError`.
///
/// # Safety
/// `env` and `value` must be the live handles of the current napi call.
#[inline(always)]
pub(crate) unsafe fn hash_str(
    env: sys::napi_env,
    value: sys::napi_value,
    hash: impl FnOnce(Key<'_>) -> KeyHash,
) -> Result<KeyHash> {
    // SAFETY: live handles (caller contract); a non-string fails `napi_get_value_string_utf8`.
    unsafe { with_str(env, value, |s| hash(Key::Str(s))) }
}

/// [`hash_key`] for a key the caller knows is a number: a safe integer, hashed as i64.
/// A non-number is the same `TypeError`, a number that is no safe integer the same `RangeError`.
///
/// # Safety
/// `env` and `value` must be the live handles of the current napi call.
#[inline(always)]
pub(crate) unsafe fn hash_number(
    env: sys::napi_env,
    value: sys::napi_value,
    hash: impl FnOnce(Key<'_>) -> KeyHash,
) -> Result<KeyHash> {
    let mut number = 0.0;
    // SAFETY: live handles (caller contract); a non-number returns `napi_number_expected`.
    if unsafe { sys::napi_get_value_double(env, value, &mut number) } != sys::Status::napi_ok {
        return Err(Failure::invalid_key_type());
    }
    Ok(hash(Key::Int(safe_integer(number)?)))
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

/// Calls `f` with the string `value` as UTF-8.
///
/// # Safety
/// `env` and `value` must be live handles; a `value` that is not a string is a `TypeError`.
#[inline(always)]
unsafe fn with_str<R>(
    env: sys::napi_env,
    value: sys::napi_value,
    f: impl FnOnce(&str) -> R,
) -> Result<R> {
    let mut stack = MaybeUninit::<[u8; STACK_KEY_BYTES]>::uninit();
    let mut written = 0usize;
    // SAFETY: the buffer has STACK_KEY_BYTES writable bytes; napi writes at most bufsize - 1
    // bytes (plus a NUL we do not read) and whole characters only.
    let status = unsafe {
        sys::napi_get_value_string_utf8(
            env,
            value,
            stack.as_mut_ptr().cast(),
            STACK_KEY_BYTES,
            &mut written,
        )
    };
    if status != sys::Status::napi_ok {
        return Err(Failure::invalid_key_type());
    }
    // At least 4 bytes to spare (a character is at most 4): nothing was cut off.
    if written + 4 < STACK_KEY_BYTES {
        // SAFETY: napi initialised the first `written` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(stack.as_ptr().cast::<u8>(), written) };
        return Ok(f(utf8(bytes)?));
    }
    let mut len = 0usize;
    // SAFETY: a null buffer asks for the length in bytes, without the NUL.
    unsafe { sys::napi_get_value_string_utf8(env, value, ptr::null_mut(), 0, &mut len) };
    let mut heap = vec![0u8; len + 1];
    // SAFETY: `heap` has len + 1 writable bytes.
    unsafe {
        sys::napi_get_value_string_utf8(env, value, heap.as_mut_ptr().cast(), len + 1, &mut written)
    };
    heap.truncate(written);
    Ok(f(utf8(&heap)?))
}

/// V8 writes well-formed UTF-8 (lone surrogates as U+FFFD); checked anyway rather than trusted.
fn utf8(bytes: &[u8]) -> Result<&str> {
    std::str::from_utf8(bytes).map_err(|_| Failure::invalid_key_type())
}

/// A number key as the i64 it stands for, if it is a safe integer.
fn safe_integer(number: f64) -> Result<i64> {
    // NaN fails both comparisons; fract() is 0 only for integers (and infinities, excluded).
    if number.abs() <= MAX_SAFE_INTEGER && number.fract() == 0.0 {
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
    use keepcount_limits::hash::KeyHasher;

    #[test]
    fn keys_hash_like_the_rust_types_they_stand_for() {
        let hasher = KeyHasher::with_seed(42);
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
    fn number_keys_must_be_safe_integers() {
        assert_eq!(safe_integer(-3.0).ok(), Some(-3));
        assert_eq!(
            safe_integer(MAX_SAFE_INTEGER).ok(),
            Some(9_007_199_254_740_991)
        );
        for bad in [0.5, f64::NAN, f64::INFINITY, MAX_SAFE_INTEGER + 1.0] {
            assert!(safe_integer(bad).is_err());
        }
    }
}
