//! Fast paths: the hot methods (`Estimator.incr`/`get`, `Rate.observe`) as raw N-API functions,
//! one set per object, each bound to its object through the function's `data` pointer.
//!
//! # Why not `#[napi]` methods
//! A napi-rs 3 class method pays, per call, for the receiver: `napi_unwrap` (a V8 private-symbol
//! lookup, ~570 instructions), a class-identity check, and the `&self` borrow tracking
//! (`register_native_borrow`, a borrow scope with a `Vec` and a `HashMap` entry, malloc/free):
//! ~2,600 of the ~4,300 instructions (callgrind) an `Estimator.incr` with a 12-byte string key
//! cost, more than the hashing, the string copy and the counters together. A function created
//! with `napi_create_function` gets its `data` pointer from `napi_get_cb_info`, the one call it
//! makes anyway for its arguments, so reaching the object is free, and nothing JavaScript does
//! can hand it a pointer it did not create (unlike an `External` argument).
//!
//! # Lifetime and threads
//! Each function holds one strong count of the object's `Rc` (released by a finalizer when the
//! function is collected, or when its environment is torn down), so the object outlives every call.
//! Functions are created per environment and per object and never leave their thread: a worker
//! thread loads the addon into its own environment and gets its own objects.
//!
//! # Errors and panics
//! [`call`] wraps every body in `catch_unwind`: a failure is thrown as the JavaScript error
//! `error.rs` maps it to, a panic as a plain `Error`; nothing unwinds into Node.

use crate::error::{Failure, Result, throw};
use napi::sys;
use std::ffi::{CStr, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::rc::Rc;

/// A raw N-API callback.
pub(crate) type Callback =
    unsafe extern "C" fn(sys::napi_env, sys::napi_callback_info) -> sys::napi_value;

/// `NAPI_AUTO_LENGTH`: the name is NUL-terminated.
const AUTO_LENGTH: isize = -1;

/// Creates a plain object with one function per `(name, callback)`, each bound to `owner`.
///
/// # Safety
/// `env` must be the live env of the current call, and every callback must read its `data` as a
/// `*const T` (through [`call`] with the same `T`).
pub(crate) unsafe fn bound_functions<T: 'static>(
    env: sys::napi_env,
    owner: &Rc<T>,
    functions: &[(&CStr, Callback)],
) -> Result<sys::napi_value> {
    let mut object = ptr::null_mut();
    // SAFETY: live env; valid out-pointer.
    check(unsafe { sys::napi_create_object(env, &mut object) })?;
    for &(name, callback) in functions {
        let data = Rc::into_raw(Rc::clone(owner)).cast_mut().cast::<c_void>();
        let mut function = ptr::null_mut();
        // SAFETY: live env; `name` is NUL-terminated; `data` stays valid until the finalizer.
        let created = check(unsafe {
            sys::napi_create_function(
                env,
                name.as_ptr(),
                AUTO_LENGTH,
                Some(callback),
                data,
                &mut function,
            )
        })
        .and_then(|()| {
            // SAFETY: `function` is live; the finalizer takes back the count `data` holds.
            check(unsafe {
                sys::napi_add_finalizer(
                    env,
                    function,
                    data,
                    Some(release::<T>),
                    ptr::null_mut(),
                    ptr::null_mut(),
                )
            })
        });
        if let Err(failure) = created {
            // No finalizer owns the count: give it back here.
            // SAFETY: `data` came from `Rc::into_raw` above and was not handed over.
            drop(unsafe { Rc::from_raw(data.cast::<T>()) });
            return Err(failure);
        }
        // SAFETY: live handles; `name` is NUL-terminated.
        check(unsafe { sys::napi_set_named_property(env, object, name.as_ptr(), function) })?;
    }
    Ok(object)
}

/// The finalizer of a bound function: releases its count of the owner.
unsafe extern "C" fn release<T>(_env: sys::napi_env, data: *mut c_void, _hint: *mut c_void) {
    // SAFETY: `data` is the `Rc::into_raw` of `bound_functions`, released exactly once, here.
    drop(unsafe { Rc::from_raw(data.cast::<T>()) });
}

/// The body of a bound function: reads `N` arguments (missing ones are `undefined`) and the owner,
/// runs `body`, and returns its number, or throws its failure (or a panic) as a JavaScript error.
///
/// # Safety
/// `env` and `info` must be the callback's own, and the function must have been created by
/// [`bound_functions`] with the same `T`.
#[inline(always)]
pub(crate) unsafe fn call<T, const N: usize>(
    env: sys::napi_env,
    info: sys::napi_callback_info,
    body: impl FnOnce(&T, &[sys::napi_value; N]) -> Result<f64>,
) -> sys::napi_value {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let mut argc = N;
        let mut argv = [ptr::null_mut(); N];
        let mut data = ptr::null_mut();
        // SAFETY: the callback's handles; argv has room for `argc` values.
        let status = unsafe {
            sys::napi_get_cb_info(
                env,
                info,
                &mut argc,
                argv.as_mut_ptr(),
                ptr::null_mut(),
                &mut data,
            )
        };
        if status != sys::Status::napi_ok || data.is_null() {
            return Err(Failure::internal("cannot read the call's arguments"));
        }
        // SAFETY: `data` is the owner this function holds a count of (caller contract).
        let owner = unsafe { &*data.cast::<T>() };
        body(owner, &argv)
    }));
    let failure = match outcome {
        Ok(Ok(number)) => {
            let mut result = ptr::null_mut();
            // SAFETY: live env; valid out-pointer. On failure `result` stays null: undefined.
            unsafe { sys::napi_create_double(env, number, &mut result) };
            return result;
        }
        Ok(Err(failure)) => failure,
        Err(_) => Failure::internal("a native call panicked"),
    };
    // SAFETY: the callback's live env.
    unsafe { throw(env, failure) };
    ptr::null_mut()
}

/// A number argument as `f64`, or a `TypeError` naming `what`.
///
/// # Safety
/// `env` and `value` must be live handles of the current call.
#[inline(always)]
pub(crate) unsafe fn number(env: sys::napi_env, value: sys::napi_value, what: &str) -> Result<f64> {
    let mut number = 0.0;
    // SAFETY: live handles; a non-number returns `napi_number_expected`.
    match unsafe { sys::napi_get_value_double(env, value, &mut number) } {
        sys::Status::napi_ok => Ok(number),
        _ => Err(Failure::invalid_type(what, "of type number")),
    }
}

/// A napi status as a result.
fn check(status: sys::napi_status) -> Result<()> {
    match status {
        sys::Status::napi_ok => Ok(()),
        other => Err(Failure::internal(&format!(
            "N-API call failed: status {other}"
        ))),
    }
}
