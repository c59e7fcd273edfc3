//! The window scratch: one `Float64Array` per JavaScript thread, handed over once by
//! `lib/native.cts` (`windowScratch`), where the `InWindow` fast paths of `Rate`, `SharedRate`,
//! `BufferRate` and `HeavyHitters` write how far the current interval has run.
//!
//! Taking a `Float64Array` argument per call instead cost about 100 ns a call here
//! (`napi_get_typedarray_info`: `HeavyHitters` `incrInWindow` 375–421 ns against `incr`'s 294–307
//! on the same keys, November 2026), a quarter of a fixed-window quota's check; a pointer kept
//! from one registration costs a store.

use crate::error::{Failure, Result as Outcome, map_error};
use crate::raw;
use napi::bindgen_prelude::Unknown;
use napi::{Env, JsValue, Result, sys};
use napi_derive::napi;
use std::cell::Cell;
use std::ptr;

thread_local! {
    /// Element 0 of this thread's registered scratch array; null until `windowScratch`.
    static WINDOW: Cell<*mut f64> = const { Cell::new(ptr::null_mut()) };
}

/// Makes `array` (a `Float64Array` of length >= 1 over an `ArrayBuffer` of its own, which nothing
/// else may hold: it must never be transferred or detached) this thread's window scratch for the
/// rest of the environment's life: a reference keeps it alive. A later call replaces it.
#[napi(catch_unwind)]
pub fn window_scratch(
    env: &Env,
    #[napi(ts_arg_type = "Float64Array")] array: Unknown,
) -> Result<()> {
    (|| -> Outcome<()> {
        // SAFETY: this call's live handles.
        let data = unsafe { raw::first_f64(env.raw(), array.raw(), "The \"array\" argument") }?;
        let mut reference = ptr::null_mut();
        // SAFETY: live handles; a valid out-pointer. One strong reference, never deleted: the
        // environment's teardown frees it, with the array.
        let status =
            unsafe { sys::napi_create_reference(env.raw(), array.raw(), 1, &mut reference) };
        if status != sys::Status::napi_ok {
            return Err(Failure::internal("could not keep the window scratch alive"));
        }
        // The buffer's memory stays where it is while the reference holds the array (an
        // ArrayBuffer's contents never move, and `first_f64` has moved an on-heap array's out).
        WINDOW.with(|window| window.set(data));
        Ok(())
    })()
    .map_err(|failure| map_error(env, failure))
}

/// Writes `value` to element 0 of this thread's window scratch; an error if none was registered.
pub(crate) fn write(value: f64) -> Outcome<()> {
    let data = WINDOW.with(Cell::get);
    if data.is_null() {
        return Err(Failure::invalid_type(
            "The window scratch",
            "registered with windowScratch() before an InWindow fast path",
        ));
    }
    // SAFETY: a registered scratch's element 0, kept alive by its reference (`window_scratch`),
    // on the only thread that uses it.
    unsafe { data.write(value) };
    Ok(())
}
