//! The Node binding of keepcount: adapts `keepcount-limits` (the count-min sketch and the rate)
//! and `keepcount-timeout` (the 10 ms deadline grid) to JavaScript with napi-rs.
//!
//! The binding only adapts: it converts JavaScript values ([`keys`], [`args`]), maps Rust errors
//! to JavaScript errors in one place ([`error`]) and otherwise calls the crates. The generated
//! `binding.js`/`binding.d.ts` are wrapped by `lib/native.cts` into the `Backend` interface that
//! the public TypeScript API uses; most users never touch these classes directly.
//!
//! The hot calls (`Estimator.incr`/`get`, `Rate.observe`) do not go through napi-rs' class
//! methods but through the [`raw`] functions of [`fast_paths`], which take the object as a numeric
//! handle and skip the per-call receiver machinery of napi-rs: ~4,300 -> ~1,100 instructions per
//! `incr` (callgrind).
//!
//! Nothing here can abort Node: every exported function and method is compiled with napi-rs'
//! `catch_unwind`, the raw functions wrap themselves in it ([`raw::call`]), arithmetic on
//! JavaScript input is checked, and every error becomes a thrown JavaScript error with a `code`
//! from `lib/errors.ts` (or `ERR_KEEPCOUNT_INTERNAL` for a broken invariant of the binding).

#[cfg(unix)]
mod allocator;
mod args;
pub mod buffer;
mod caller_clock;
mod error;
pub mod estimator;
pub mod heavy;
mod held;
mod keys;
pub mod limiter;
mod memory;
mod mismatch;
pub mod rate;
mod raw;
pub mod shared;
pub mod ticker;
pub mod window;

/// Large blocks mapped on their own, so dropped sketches give their memory back ([`allocator`]).
#[cfg(unix)]
#[global_allocator]
static ALLOCATOR: allocator::Allocator = allocator::Allocator;

use napi::bindgen_prelude::Object;
use napi::{Env, Result};
use napi_derive::napi;

/// The hot methods as raw functions taking the object's `handle` first (see [`raw`]): for
/// `Estimator.incr`/`get` ([`estimator::FAST_PATHS`]), `Rate.observe`/`observeInWindow`
/// ([`rate::FAST_PATHS`]), `HeavyHitters.incr`/`incrInWindow` ([`heavy::FAST_PATHS`]) and
/// `SharedEstimator.incr`/`get`, `SharedRate.observe`/`observeInWindow`, `SharedInflight.incr` and
/// `SharedLimiter.check` ([`shared::fast_paths`]), and `BufferRate.observe`/`observeInWindow`
/// ([`buffer::FAST_PATHS`]). A fresh set per call; `lib/native.cts` takes one per environment.
#[napi(
    catch_unwind,
    ts_return_type = "{ estimatorIncrStr(handle: number, key: string, value: number): number; estimatorIncrNum(handle: number, key: number, value: number): number; estimatorIncrKey(handle: number, key: string | number | bigint | Uint8Array, value: number): number; estimatorGetStr(handle: number, key: string): number; estimatorGetNum(handle: number, key: number): number; estimatorGetKey(handle: number, key: string | number | bigint | Uint8Array): number; rateObserveStr(handle: number, key: string, events: number, nowMs: number): number; rateObserveNum(handle: number, key: number, events: number, nowMs: number): number; rateObserveKey(handle: number, key: string | number | bigint | Uint8Array, events: number, nowMs: number): number; rateObserveInWindowStr(handle: number, key: string, events: number, nowMs: number): number; rateObserveInWindowNum(handle: number, key: number, events: number, nowMs: number): number; rateObserveInWindowKey(handle: number, key: string | number | bigint | Uint8Array, events: number, nowMs: number): number; heavyIncrStr(handle: number, key: string, value: number, nowMs: number): number; heavyIncrNum(handle: number, key: number, value: number, nowMs: number): number; heavyIncrKey(handle: number, key: string | number | bigint | Uint8Array, value: number, nowMs: number): number; heavyIncrInWindowStr(handle: number, key: string, value: number, nowMs: number): number; heavyIncrInWindowNum(handle: number, key: number, value: number, nowMs: number): number; heavyIncrInWindowKey(handle: number, key: string | number | bigint | Uint8Array, value: number, nowMs: number): number; sharedIncrStr(handle: number, key: string, value: number): number; sharedIncrNum(handle: number, key: number, value: number): number; sharedIncrKey(handle: number, key: string | number | bigint | Uint8Array, value: number): number; sharedGetStr(handle: number, key: string): number; sharedGetNum(handle: number, key: number): number; sharedGetKey(handle: number, key: string | number | bigint | Uint8Array): number; sharedRateObserveStr(handle: number, key: string, events: number): number; sharedRateObserveNum(handle: number, key: number, events: number): number; sharedRateObserveKey(handle: number, key: string | number | bigint | Uint8Array, events: number): number; sharedRateObserveInWindowStr(handle: number, key: string, events: number): number; sharedRateObserveInWindowNum(handle: number, key: number, events: number): number; sharedRateObserveInWindowKey(handle: number, key: string | number | bigint | Uint8Array, events: number): number; sharedInflightIncrStr(handle: number, key: string, value: number): number; sharedInflightIncrNum(handle: number, key: number, value: number): number; sharedInflightIncrKey(handle: number, key: string | number | bigint | Uint8Array, value: number): number; sharedCheckStr(handle: number, key: string, cost: number): number; sharedCheckNum(handle: number, key: number, cost: number): number; sharedCheckKey(handle: number, key: string | number | bigint | Uint8Array, cost: number): number; bufferRateObserveStr(handle: number, key: string, events: number, nowMs: number): number; bufferRateObserveNum(handle: number, key: number, events: number, nowMs: number): number; bufferRateObserveKey(handle: number, key: string | number | bigint | Uint8Array, events: number, nowMs: number): number; bufferRateObserveInWindowStr(handle: number, key: string, events: number, nowMs: number): number; bufferRateObserveInWindowNum(handle: number, key: number, events: number, nowMs: number): number; bufferRateObserveInWindowKey(handle: number, key: string | number | bigint | Uint8Array, events: number, nowMs: number): number }"
)]
pub fn fast_paths(env: &Env) -> Result<Object<'_>> {
    let all: Vec<_> = estimator::FAST_PATHS
        .into_iter()
        .chain(rate::FAST_PATHS)
        .chain(heavy::FAST_PATHS)
        .chain(shared::fast_paths())
        .chain(buffer::FAST_PATHS)
        .collect();
    // SAFETY: this call's env.
    let object = unsafe { raw::functions(env.raw(), &all) }
        .map_err(|failure| error::map_error(env, failure))?;
    Ok(Object::from_raw(env.raw(), object))
}
