//! The window scratch: one `Float64Array` per environment (a load of the addon in a JavaScript
//! thread), made by the binding and fetched once by each copy of `lib/native.cts`
//! (`windowScratch`), where the `InWindow` fast paths of `Rate`, `SharedRate`,
//! `BufferRate` and `HeavyHitters` write how far the current interval has run.
//!
//! Taking a `Float64Array` argument per call instead cost about 100 ns a call here
//! (`napi_get_typedarray_info`: `HeavyHitters` `incrInWindow` 375–421 ns against `incr`'s 294–307
//! on the same keys, November 2026), a quarter of a fixed-window quota's check; a pointer kept
//! from one registration costs a store.

use crate::error::{Failure, Result as Outcome, map_error};
use napi::bindgen_prelude::Unknown;
use napi::{Env, Result, sys};
use napi_derive::napi;
use std::cell::{Cell, RefCell};
use std::ptr;

/// One environment's window scratch: the environment, the reference that keeps the array alive
/// there, and its element 0.
#[derive(Clone, Copy)]
struct Scratch {
    env: sys::napi_env,
    reference: sys::napi_ref,
    data: *mut f64,
}

thread_local! {
    /// The scratches of this thread's environments, one per load of the addon (Node gives each
    /// load an environment of its own): nearly always one, so a scan is the lookup.
    static WINDOWS: RefCell<Vec<Scratch>> = const { RefCell::new(Vec::new()) };
    /// The environment [`write`] wrote for last and its scratch's element 0, so that the write
    /// inlined into the fast paths is a comparison and a store; the scan runs when the
    /// environment changes.
    static LAST: Cell<(sys::napi_env, *mut f64)> = const { Cell::new((ptr::null_mut(), ptr::null_mut())) };
}

/// `env`'s scratch, if it has one.
fn scratch_of(env: sys::napi_env) -> Option<Scratch> {
    WINDOWS.with_borrow(|windows| windows.iter().find(|scratch| scratch.env == env).copied())
}

/// This environment's window scratch: a `Float64Array` of length 1 over an `ArrayBuffer` of its
/// own, made on the first call and the same array on every later one, so that every copy of
/// `lib/native.cts` a thread evaluates over this load of the addon (a module registry reset such
/// as `jest.resetModules`) reads where the fast paths called through it write. Made here, not
/// handed in: with an array per copy, registered last-wins, the older copies read a stale
/// `resetMs`. A copy that loads the addon anew (its `require` cache cleared too) gets an
/// environment, and so a scratch, of its own. Holders must never transfer or detach it; one
/// strong reference keeps it for the environment's life, whose teardown frees it and drops the
/// entry.
#[napi(catch_unwind, ts_return_type = "Float64Array")]
pub fn window_scratch(env: &Env) -> Result<Unknown<'_>> {
    let raw_env = env.raw();
    (|| -> Outcome<Unknown<'_>> {
        let mut array = ptr::null_mut();
        if let Some(scratch) = scratch_of(raw_env) {
            // SAFETY: a reference made in this very environment, alive until its teardown.
            let status =
                unsafe { sys::napi_get_reference_value(raw_env, scratch.reference, &mut array) };
            if status != sys::Status::napi_ok || array.is_null() {
                return Err(Failure::internal("could not read the window scratch"));
            }
            // SAFETY: a live value of this call's env.
            return Ok(unsafe { Unknown::from_raw_unchecked(raw_env, array) });
        }
        let mut data = ptr::null_mut();
        let mut buffer = ptr::null_mut();
        let mut reference = ptr::null_mut();
        // SAFETY: this call's env; valid out-pointers. An `ArrayBuffer`'s contents never move, so
        // `data` stays valid while the reference holds the array.
        let made = unsafe {
            sys::napi_create_arraybuffer(raw_env, size_of::<f64>(), &mut data, &mut buffer)
                == sys::Status::napi_ok
                && sys::napi_create_typedarray(
                    raw_env,
                    sys::TypedarrayType::float64_array,
                    1,
                    buffer,
                    0,
                    &mut array,
                ) == sys::Status::napi_ok
                && sys::napi_create_reference(raw_env, array, 1, &mut reference)
                    == sys::Status::napi_ok
        };
        if !made || data.is_null() {
            return Err(Failure::internal("could not make the window scratch"));
        }
        // Dropped with its environment, whose pointer a later one on this thread may reuse.
        let key = raw_env as usize;
        env.add_env_cleanup_hook(key, |key| {
            // `try_with`: nothing to drop if the thread's storage went first.
            let _ = WINDOWS.try_with(|windows| {
                windows
                    .borrow_mut()
                    .retain(|scratch| scratch.env as usize != key);
            });
            let _ = LAST.try_with(|last| {
                if last.get().0 as usize == key {
                    last.set((ptr::null_mut(), ptr::null_mut()));
                }
            });
        })
        .map_err(|_| Failure::internal("could not hook the window scratch's teardown"))?;
        let data = data.cast::<f64>();
        WINDOWS.with_borrow_mut(|windows| {
            windows.push(Scratch {
                env: raw_env,
                reference,
                data,
            });
        });
        // SAFETY: a live value of this call's env.
        Ok(unsafe { Unknown::from_raw_unchecked(raw_env, array) })
    })()
    .map_err(|failure| map_error(env, failure))
}

/// Writes `value` to element 0 of `env`'s window scratch; an error if it has none.
///
/// Inlined into the fast paths, which share its thread-local access with their own; out of line
/// it cost ~27 instructions a call.
#[inline(always)]
pub(crate) fn write(env: sys::napi_env, value: f64) -> Outcome<()> {
    let (last, mut data) = LAST.get();
    if last != env {
        data = switch_to(env)?;
    }
    // SAFETY: the scratch's element 0, kept alive by its reference (`window_scratch`) until its
    // environment's teardown, on the only thread that uses it.
    unsafe { data.write(value) };
    Ok(())
}

/// `env`'s scratch as [`LAST`], for a write through another environment than the last one.
#[cold]
#[inline(never)]
fn switch_to(env: sys::napi_env) -> Outcome<*mut f64> {
    let Some(scratch) = scratch_of(env) else {
        return Err(Failure::invalid_type(
            "The window scratch",
            "made by windowScratch() before an InWindow fast path",
        ));
    };
    LAST.set((env, scratch.data));
    Ok(scratch.data)
}
