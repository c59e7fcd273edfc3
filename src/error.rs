//! Rust errors to JavaScript errors, in one place ([`map_error`]).
//!
//! Every failure becomes the error class and `code` that `lib/errors.ts` documents for the same
//! problem: `TypeError` `ERR_INVALID_ARG_TYPE`, `RangeError` `ERR_OUT_OF_RANGE`, `Error`
//! `ERR_KEEPCOUNT_MISMATCH`, `Error` `ERR_KEEPCOUNT_CORRUPT`, and for shared segments `Error`
//! `ERR_KEEPCOUNT_IO`, `ERR_KEEPCOUNT_FULL` and `ERR_KEEPCOUNT_UNSUPPORTED`. `lib/` validates arguments before
//! they get here, so these are the errors of direct callers of the binding.

use keepcount_limits::DecodeError;
use keepcount_limits::ShapeError;
use keepcount_limits::estimator::MergeError;
use keepcount_limits::rate::RateError;
use keepcount_limits::shared::SharedError;
use napi::{Env, Status, sys};
use std::ffi::CString;

/// The binding's result: a [`Failure`] until [`map_error`] throws it.
pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// Which JavaScript error class a failure is thrown as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    Error,
    TypeError,
    RangeError,
}

/// A failure to report to JavaScript: its class, stable `code` and message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) class: Class,
    pub(crate) code: &'static str,
    pub(crate) message: String,
}

impl Failure {
    /// `TypeError` `ERR_INVALID_ARG_TYPE`: `what` (e.g. `The "key" argument`) must be `expected`.
    #[cold]
    pub(crate) fn invalid_type(what: &str, expected: &str) -> Self {
        Self {
            class: Class::TypeError,
            code: "ERR_INVALID_ARG_TYPE",
            message: format!("{what} must be {expected}"),
        }
    }

    /// The `TypeError` for a key of a type keys cannot have.
    pub(crate) fn invalid_key_type() -> Self {
        Self::invalid_type(
            "The \"key\" argument",
            "of type string, number, bigint or Uint8Array",
        )
    }

    /// `Error` `ERR_KEEPCOUNT_INTERNAL`: a broken invariant of the binding (a failed N-API call, a
    /// panic), never expected to reach a user.
    pub(crate) fn internal(what: &str) -> Self {
        Self {
            class: Class::Error,
            code: "ERR_KEEPCOUNT_INTERNAL",
            message: format!("keepcount binding: {what}"),
        }
    }

    /// `RangeError` `ERR_OUT_OF_RANGE`: `what` must be `expected`.
    #[cold]
    pub(crate) fn out_of_range(what: &str, expected: &str) -> Self {
        Self {
            class: Class::RangeError,
            code: "ERR_OUT_OF_RANGE",
            message: format!("{what} must be {expected}"),
        }
    }
}

impl From<ShapeError> for Failure {
    fn from(err: ShapeError) -> Self {
        Self {
            class: Class::RangeError,
            code: "ERR_OUT_OF_RANGE",
            message: format!("Invalid sketch shape: {err}"),
        }
    }
}

impl From<RateError> for Failure {
    fn from(err: RateError) -> Self {
        Self {
            class: Class::RangeError,
            code: "ERR_OUT_OF_RANGE",
            message: format!("Invalid rate: {err}"),
        }
    }
}

impl From<MergeError> for Failure {
    fn from(err: MergeError) -> Self {
        Self {
            class: Class::Error,
            code: "ERR_KEEPCOUNT_MISMATCH",
            message: format!("Cannot merge: {err}"),
        }
    }
}

impl From<SharedError> for Failure {
    fn from(err: SharedError) -> Self {
        let (class, code) = match &err {
            SharedError::Mismatch { .. } => (Class::Error, "ERR_KEEPCOUNT_MISMATCH"),
            SharedError::Corrupt { .. } => (Class::Error, "ERR_KEEPCOUNT_CORRUPT"),
            SharedError::Unsupported | SharedError::NoWideAtomics => {
                (Class::Error, "ERR_KEEPCOUNT_UNSUPPORTED")
            }
            SharedError::Io { .. } | SharedError::Create { .. } => {
                (Class::Error, "ERR_KEEPCOUNT_IO")
            }
            SharedError::Full { .. } => (Class::Error, "ERR_KEEPCOUNT_FULL"),
            // Name, shape, interval and mode: `lib/` checks them first.
            _ => (Class::RangeError, "ERR_OUT_OF_RANGE"),
        };
        Self {
            class,
            code,
            message: format!("Cannot open the shared segment: {err}"),
        }
    }
}

/// The `CorruptReason` (`lib/core.ts`) naming the check of docs/format.md §5 that `err`
/// failed, or, for a decode error this binding does not know yet, the failure to throw instead.
pub(crate) fn corrupt_reason(err: DecodeError) -> Result<&'static str> {
    Ok(match err {
        DecodeError::Truncated { .. } => "short",
        DecodeError::BadMagic(_) => "magic",
        DecodeError::UnsupportedVersion(_) => "version",
        DecodeError::ReservedFlags(_) => "flags",
        DecodeError::Shape(_) => "shape",
        DecodeError::Length { .. } => "length",
        DecodeError::Checksum { .. } => "checksum",
        other => {
            return Err(Failure {
                class: Class::Error,
                code: "ERR_KEEPCOUNT_CORRUPT",
                message: format!("Serialized sketch is invalid: {other}"),
            });
        }
    })
}

/// Throws `failure` as its JavaScript error and returns the error napi-rs expects for a pending
/// exception (it then throws nothing more).
pub(crate) fn map_error(env: &Env, failure: Failure) -> napi::Error {
    // SAFETY: `env` is the live env of the current call, on its own thread.
    unsafe { throw(env.raw(), failure) };
    napi::Error::from_status(Status::PendingException)
}

/// Throws `failure` as its JavaScript error (with its `code` property) in `env`.
///
/// # Safety
/// `env` must be the live env of the current call, on its own thread.
pub(crate) unsafe fn throw(env: sys::napi_env, failure: Failure) {
    let Failure {
        class,
        code,
        message,
    } = failure;
    // Messages are ours and hold no NUL; were one to, the error still gets thrown, blank.
    let message = CString::new(message).unwrap_or_default();
    let code = CString::new(code).unwrap_or_default();
    // SAFETY: live env (caller contract); both strings are NUL-terminated and outlive the call.
    unsafe {
        match class {
            Class::Error => sys::napi_throw_error(env, code.as_ptr(), message.as_ptr()),
            Class::TypeError => sys::napi_throw_type_error(env, code.as_ptr(), message.as_ptr()),
            Class::RangeError => sys::napi_throw_range_error(env, code.as_ptr(), message.as_ptr()),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_decode_error_names_its_check() {
        let shape = ShapeError::ZeroSlots;
        let cases = [
            (DecodeError::Truncated { len: 3 }, "short"),
            (DecodeError::BadMagic(*b"XXXX"), "magic"),
            (DecodeError::UnsupportedVersion(1), "version"),
            (DecodeError::ReservedFlags(1), "flags"),
            (DecodeError::Shape(shape), "shape"),
            (
                DecodeError::Length {
                    expected: 36,
                    actual: 35,
                },
                "length",
            ),
            (
                DecodeError::Checksum {
                    stored: 1,
                    computed: 2,
                },
                "checksum",
            ),
        ];
        for (err, reason) in cases {
            assert_eq!(corrupt_reason(err).ok(), Some(reason));
        }
    }

    #[test]
    fn failures_carry_the_codes_of_lib_errors() {
        assert_eq!(Failure::invalid_key_type().code, "ERR_INVALID_ARG_TYPE");
        assert_eq!(
            Failure::from(ShapeError::ZeroSlots).class,
            Class::RangeError
        );
        let mismatch = Failure::from(MergeError::Seed);
        assert_eq!(mismatch.code, "ERR_KEEPCOUNT_MISMATCH");
        assert_eq!(
            Failure::from(SharedError::Unsupported).code,
            "ERR_KEEPCOUNT_UNSUPPORTED"
        );
        assert_eq!(
            Failure::from(SharedError::NoWideAtomics).code,
            "ERR_KEEPCOUNT_UNSUPPORTED"
        );
        assert_eq!(
            Failure::from(SharedError::Mode(0o1000)).class,
            Class::RangeError
        );
        // A directory that refused a new segment is the system's refusal, as any other.
        let refused = Failure::from(SharedError::Create {
            dir: "/run/ro".into(),
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        });
        assert_eq!(
            (refused.class, refused.code),
            (Class::Error, "ERR_KEEPCOUNT_IO")
        );
        assert!(refused.message.starts_with(
            "Cannot open the shared segment: cannot create a segment file in /run/ro: "
        ));
    }
}
