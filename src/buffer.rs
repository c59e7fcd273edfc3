//! Sketches and rates over a JavaScript `SharedArrayBuffer`, which worker threads pass to each
//! other to share counters without copying: [`Lent`] holds the buffer's memory for the crate's
//! `shared::lend_estimator` / `SharedRate::lend`, and [`BufferRate`] is the rate over it (the
//! sketch is a `SharedEstimator` made by `SharedEstimator.lend`, on the shared fast paths; the
//! rate's `observe` and `observeInWindow` are [`FAST_PATHS`] of their own).
//!
//! `lib/shared-buffer.ts` lays the buffer out as a segment file (header, then counters) and
//! validates it with the same messages on both backends before calling here; the crate checks the
//! header again, so memory the binding uses always has the length its header promises.
//!
//! # Lifetime
//! A `SharedArrayBuffer`'s memory lives while any thread holds a buffer object over it. Each
//! [`Lent`] holds a strong reference to its typed array in its own environment until the object
//! that owns it is closed or collected, after the sketch over the memory is dropped; another
//! thread dropping its objects, or terminating, cannot free what this one still uses.

use crate::args;
use crate::caller_clock::CallerClock;
use crate::error::{Failure, Result as Outcome, map_error};
use crate::held::Held;
use crate::keys;
use crate::rate::RateSample;
use crate::raw::{self, Callback, Slab};
use crate::window;
use keepcount_limits::shared::SharedRate;
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Unknown};
use napi::{Env, JsValue, Result, sys};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;
use std::ptr::{self, NonNull};
use std::time::Duration;

thread_local! {
    /// This thread's buffer rates, by handle, for the fast paths.
    static BUFFER_RATES: RefCell<Slab<Inner>> = const { RefCell::new(Slab::new(8)) };
}

/// Longest interval `lib/rate.ts` accepts: 2^52 ms.
const MAX_INTERVAL_MS: u64 = 1 << 52;
/// Nanoseconds per millisecond: buffer rates keep true nanoseconds in their interval word.
const NANOS_PER_MS: u64 = 1_000_000;

/// A `BigInt64Array`'s memory, kept alive by a reference to the array in its environment.
pub(crate) struct Lent {
    env: sys::napi_env,
    reference: sys::napi_ref,
    /// The first byte, 8-byte aligned.
    pub(crate) start: NonNull<u8>,
    /// Bytes.
    pub(crate) len: usize,
}

impl Lent {
    /// Holds the memory of `counters`, which must be a `BigInt64Array` (`lib/` passes one over the
    /// whole buffer).
    pub(crate) fn take(env: &Env, counters: Unknown) -> Outcome<Self> {
        let raw_env = env.raw();
        let mut kind = sys::TypedarrayType::int8_array;
        let mut length = 0usize;
        let mut data = ptr::null_mut();
        let mut buffer = ptr::null_mut();
        let mut offset = 0usize;
        // SAFETY: live handles of this call; out-pointers valid. napi_get_typedarray_info accepts
        // arrays over a SharedArrayBuffer, and fails (napi_invalid_arg) for anything else.
        let status = unsafe {
            sys::napi_get_typedarray_info(
                raw_env,
                counters.raw(),
                &mut kind,
                &mut length,
                &mut data,
                &mut buffer,
                &mut offset,
            )
        };
        let refuse = || {
            Failure::invalid_type(
                "The \"counters\" argument",
                "a BigInt64Array over a SharedArrayBuffer",
            )
        };
        if status != sys::Status::napi_ok || kind != sys::TypedarrayType::bigint64_array {
            return Err(refuse());
        }
        // An ordinary ArrayBuffer can be detached (transferred) and its memory freed while the
        // array is alive; a SharedArrayBuffer cannot, and is the one kind napi_is_arraybuffer
        // does not accept.
        let mut detachable = true;
        // SAFETY: as above.
        let status = unsafe { sys::napi_is_arraybuffer(raw_env, buffer, &mut detachable) };
        if status != sys::Status::napi_ok || detachable {
            return Err(refuse());
        }
        let start = NonNull::new(data.cast::<u8>())
            .filter(|start| (start.as_ptr() as usize).is_multiple_of(8))
            .ok_or_else(|| Failure::internal("a BigInt64Array without aligned memory"))?;
        let mut reference = ptr::null_mut();
        // SAFETY: as above; one strong reference, deleted in Drop.
        let status =
            unsafe { sys::napi_create_reference(raw_env, counters.raw(), 1, &mut reference) };
        if status != sys::Status::napi_ok {
            return Err(Failure::internal("napi_create_reference failed"));
        }
        Ok(Self {
            env: raw_env,
            reference,
            start,
            // A typed array's byte length fits in memory: no overflow.
            len: length * 8,
        })
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        // SAFETY: the reference was created in `env`, and objects holding a Lent are dropped on
        // that environment's thread (a close() call or their finalizer) while it exists.
        unsafe { sys::napi_delete_reference(self.env, self.reference) };
    }
}

/// pingora-limits' `Rate` over a `SharedArrayBuffer` (the crate's `SharedRate::lend`): every
/// thread whose `BufferRate` lends the same buffer counts in the same two sketches and ends each
/// interval once for all. Time is the `nowMs` each call passes, in milliseconds on a time base
/// every thread shares (`lib/` reads the `clock` option, by default `process.hrtime`). Use the
/// package's `Rate.fromSharedBuffer`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct BufferRate {
    /// Dropped before `lent`, with the slab's reference.
    inner: Held<Inner>,
    /// The buffer's memory; declared last so it is released after the sketches.
    lent: Option<Lent>,
}

/// The sketches over the buffer and the clock they read.
struct Inner {
    sketches: SharedRate<CallerClock>,
    clock: CallerClock,
}

impl ObjectFinalize for BufferRate {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.inner.close(&env);
        Ok(())
    }
}

#[napi]
impl BufferRate {
    /// A rate over `counters`, a `BigInt64Array` over a buffer laid out by `lib/` for a rate of
    /// `intervalMs` (an integer in [1, 2^52]) with two sketches of `hashes × slots` keyed by
    /// `seed`. `ERR_KEEPCOUNT_CORRUPT` / `ERR_KEEPCOUNT_MISMATCH` if its header says otherwise.
    #[napi(factory, catch_unwind)]
    pub fn lend(
        env: &Env,
        #[napi(ts_arg_type = "BigInt64Array")] counters: Unknown,
        interval_ms: f64,
        hashes: f64,
        slots: f64,
        seed: BigInt,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let interval_ms = args::integer(
                "The \"intervalMs\" argument",
                interval_ms,
                1,
                MAX_INTERVAL_MS,
            )?;
            let shape = args::shape(hashes, slots)?;
            let seed = args::seed(&seed)?;
            let lent = Lent::take(env, counters)?;
            let clock = CallerClock::default();
            // SAFETY: `lent` keeps the memory alive and is dropped after the sketches (field
            // order, and close()); JavaScript reaches it only through Atomics.
            let sketches = unsafe {
                SharedRate::lend(
                    lent.start,
                    lent.len,
                    Duration::from_nanos(interval_ms.saturating_mul(NANOS_PER_MS)),
                    shape,
                    seed,
                    clock.clone(),
                )
            }?;
            // The counters are the buffer's, which V8 already counts: only the struct is ours.
            let bytes = size_of_val(&sketches);
            Ok(Self {
                inner: Held::new(env, &BUFFER_RATES, Inner { sketches, clock }, bytes)?,
                lent: Some(lent),
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Adds `events` (a safe integer) to `key` in the current interval as of `nowMs`; returns the
    /// key's count there.
    #[napi(catch_unwind)]
    pub fn observe(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        events: f64,
        now_ms: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let events = args::count("The \"events\" argument", events)?;
            let sketches = self.at(now_ms)?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.observe_hash(key, events) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Takes back up to `events` (a safe integer >= 0) of `key`'s count in the current interval
    /// as of `nowMs`, stopping each of its counters at zero however many threads refund at once;
    /// returns the key's count there.
    #[napi(catch_unwind)]
    pub fn refund(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        events: f64,
        now_ms: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let events = args::refund("The \"events\" argument", events)?;
            let sketches = self.at(now_ms)?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.refund_hash(key, events) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// pingora's `rate_with` components for `key` as of `nowMs`.
    #[napi(catch_unwind)]
    pub fn sample(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        now_ms: f64,
    ) -> Result<RateSample> {
        (|| -> Outcome<RateSample> {
            let sketches = self.at(now_ms)?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.rate_with_hash(key, RateSample::from))
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This rate's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.inner.handle()
    }

    /// Lets go of the buffer now (other threads keep counting in it). Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        // The sketches first (the slab's reference too): they must be gone before the memory.
        self.inner.close(env);
        self.lent = None;
    }
}

impl BufferRate {
    /// The sketches, with the clock set to `now_ms`.
    fn at(&self, now_ms: f64) -> Outcome<&SharedRate<CallerClock>> {
        self.inner.get()?.at(now_ms)
    }
}

impl Inner {
    fn at(&self, now_ms: f64) -> Outcome<&SharedRate<CallerClock>> {
        self.clock.set_nanos_from_ms(now_ms)?;
        Ok(&self.sketches)
    }
}

/// `BufferRate.observe(handle, key, events, nowMs)` and `observeInWindow(handle, key, events,
/// nowMs)` as raw functions, as the heap rate's (`crate::rate::FAST_PATHS`): the thread's window
/// scratch ([`crate::window`]) receives the whole milliseconds elapsed in the interval. Exported by
/// `fastPaths()`.
pub(crate) const FAST_PATHS: [(&CStr, Callback); 6] = [
    (c"bufferRateObserveStr", observe_str),
    (c"bufferRateObserveNum", observe_num),
    (c"bufferRateObserveKey", observe_key),
    (c"bufferRateObserveInWindowStr", observe_in_window_str),
    (c"bufferRateObserveInWindowNum", observe_in_window_num),
    (c"bufferRateObserveInWindowKey", observe_in_window_key),
];

raw::per_key_type! {
    [observe_str, observe_num, observe_key],
    |env, read, [handle, key, events, now_ms]| {
        let inner = raw::resolve(env, handle, &BUFFER_RATES)?;
        let events = raw::count(env, events, "The \"events\" argument")?;
        let now_ms = raw::number(env, now_ms, "The \"nowMs\" argument")?;
        let sketches = inner.at(now_ms)?;
        let key = read(env, key, |k| sketches.hash_key(k))?;
        Ok(sketches.observe_hash(key, events) as f64)
    }
}

raw::per_key_type! {
    [observe_in_window_str, observe_in_window_num, observe_in_window_key],
    |env, read, [handle, key, events, now_ms]| {
        let inner = raw::resolve(env, handle, &BUFFER_RATES)?;
        let events = raw::count(env, events, "The \"events\" argument")?;
        let now_ms = raw::number(env, now_ms, "The \"nowMs\" argument")?;
        let sketches = inner.at(now_ms)?;
        let key = read(env, key, |k| sketches.hash_key(k))?;
        let (count, past) = sketches.observe_hash_in_interval(key, events);
        // Whole milliseconds, below the 2^52 ms interval: exact in a double, and the interval's
        // end stays at least 1 ms away.
        window::write(env, (past / NANOS_PER_MS) as f64)?;
        Ok(count as f64)
    }
}
