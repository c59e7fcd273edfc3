//! `Rate`: the per-key rate of `keepcount-limits`, on a time base JavaScript supplies.
//!
//! The clock lives in JavaScript (`lib/rate.ts` reads the user's `Clock`), so every call passes
//! `nowMs`, which [`CallerClock`] hands to the crate's `Rate` (in milliseconds: see there). The
//! fraction of the interval comes out as `(past % interval) / interval` in f64, the fallback's
//! formula, bit for bit.
//!
//! `observe` is also [`FAST_PATHS`]: raw N-API functions taking the rate's [`Rate::handle`], one
//! per key type, which `lib/native.cts` calls instead of the method (see [`crate::raw`]).

use crate::args;
use crate::caller_clock::CallerClock;
use crate::error::{Result as Outcome, map_error};
use crate::keys;
use crate::memory::External;
use crate::raw::{self, Callback, Slab, Slot};
use crate::window;
use keepcount_limits::rate::{Rate as Sketches, RateComponents};
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;
use std::rc::Rc;
use std::time::Duration;

thread_local! {
    /// This thread's rates, by handle, for the fast paths.
    static RATES: RefCell<Slab<Inner>> = const { RefCell::new(Slab::new(1)) };
    /// What every closed rate of this thread holds in place of its sketches: one shared 1 × 1
    /// rate, so a closed object keeps no memory of its own until it is collected. A 1 × 1 rate
    /// over 1 ns is always a valid configuration; `None` only if that ever changed.
    static CLOSED: Option<Rc<Inner>> = {
        let now = CallerClock::default();
        Sketches::with_clock(Duration::from_nanos(1), 1, 1, 0, now.clone())
            .ok()
            .map(|sketches| Rc::new(Inner { sketches, now }))
    };
}

/// Longest interval `lib/rate.ts` accepts: 2^52 ms, so twice it is still exact in a double.
const MAX_INTERVAL_MS: u64 = 1 << 52;

/// pingora-limits' `Rate` semantics over `hashes × slots` sketches keyed by `seed`, on the
/// caller's time base. Use the package's `Rate`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct Rate {
    inner: Rc<Inner>,
    /// The rate's entry in [`RATES`], emptied when this object is collected.
    slot: Slot<Inner>,
    /// The two sketches' counters, reported to V8 (see [`crate::memory`]).
    memory: External,
}

impl ObjectFinalize for Rate {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.memory.release(&env);
        Ok(())
    }
}

/// The sketches and the clock they read.
struct Inner {
    sketches: Sketches<CallerClock>,
    now: CallerClock,
}

/// What `Rate.rateWith` needs: both counts and how far into the current interval `nowMs` is.
#[napi(object)]
pub struct RateSample {
    /// The key's count in the previous interval.
    pub prev_samples: f64,
    /// The key's count so far in the current interval.
    pub curr_samples: f64,
    /// Elapsed fraction of the current interval, in [0, 1).
    pub current_interval_fraction: f64,
}

/// The crate's `rate_with` components as JavaScript gets them: counts below 2^53 are exact.
impl From<RateComponents> for RateSample {
    fn from(parts: RateComponents) -> Self {
        Self {
            prev_samples: parts.prev_samples as f64,
            curr_samples: parts.curr_samples as f64,
            current_interval_fraction: parts.current_interval_fraction,
        }
    }
}

#[napi]
impl Rate {
    /// A rate over intervals of `intervalMs` (an integer in [1, 2^52]) with two sketches of
    /// `hashes × slots` keyed by `seed`; otherwise a `RangeError`. Time starts at 0. With
    /// `hostClock` the rate reads the host's monotonic clock itself and ignores every `nowMs`
    /// ([`CallerClock::host`]); with `wallOriginMs` (and no `hostClock`) each `nowMs` is a wall
    /// reading from that origin, NaN to read the wall clock here, and time is the readings' forward
    /// steps ([`CallerClock::with_wall_origin`]).
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: &Env,
        interval_ms: f64,
        hashes: f64,
        slots: f64,
        seed: BigInt,
        host_clock: Option<bool>,
        wall_origin_ms: Option<f64>,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let interval = args::integer(
                "The \"intervalMs\" argument",
                interval_ms,
                1,
                MAX_INTERVAL_MS,
            )?;
            let hashes = args::dimension("The \"hashes\" argument", hashes)?;
            let slots = args::dimension("The \"slots\" argument", slots)?;
            let now = match (host_clock, wall_origin_ms) {
                (Some(true), _) => CallerClock::host(),
                (_, Some(origin)) => CallerClock::with_wall_origin(origin)?,
                _ => CallerClock::default(),
            };
            // The clock counts milliseconds, so the interval is given in them too (module docs).
            let sketches = Sketches::with_clock(
                Duration::from_nanos(interval),
                hashes,
                slots,
                args::seed(&seed)?,
                now.clone(),
            )?;
            // Two sketches of `hashes × slots` i64 counters; within 2^27 each (docs/format.md §4).
            let memory = External::report(env, 2 * hashes * slots * size_of::<i64>());
            let inner = Rc::new(Inner { sketches, now });
            let slot = Slot::new(&RATES, Rc::clone(&inner))?;
            Ok(Self {
                inner,
                slot,
                memory,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Frees both sketches now instead of when the object is collected (`lib/` refuses every
    /// later call, so the empty rate left in their place is never used). Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.slot.vacate();
        if let Some(closed) = CLOSED.with(Option::clone) {
            // The slab held the only other reference: dropping ours frees the sketches.
            self.inner = closed;
        }
        self.memory.release(env);
    }

    /// Adds `events` (a safe integer) to `key` in the interval current at `nowMs`; returns the
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
            let inner = &*self.inner;
            // SAFETY: live handles of this call.
            let key =
                unsafe { keys::hash_key(env.raw(), key.raw(), |k| inner.sketches.hash_key(k)) }?;
            inner.set_now(now_ms)?;
            Ok(inner.sketches.observe_hash(key, events) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Takes back up to `events` (a safe integer >= 0) of `key`'s count in the interval current
    /// at `nowMs`, stopping each of its counters at zero; returns the key's count there.
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
            let inner = &*self.inner;
            // SAFETY: live handles of this call.
            let key =
                unsafe { keys::hash_key(env.raw(), key.raw(), |k| inner.sketches.hash_key(k)) }?;
            inner.set_now(now_ms)?;
            Ok(inner.sketches.refund_hash(key, events) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This rate's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// `key`'s count in the previous interval as of `nowMs`; 0 if two or more intervals passed.
    #[napi(catch_unwind)]
    pub fn previous_count(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        now_ms: f64,
    ) -> Result<f64> {
        self.components(env, key, now_ms)
            .map(|parts| parts.prev_samples as f64)
    }

    /// pingora's `rate_with` components for `key` as of `nowMs`.
    #[napi(catch_unwind)]
    pub fn sample(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        now_ms: f64,
    ) -> Result<RateSample> {
        self.components(env, key, now_ms).map(RateSample::from)
    }
}

impl Rate {
    /// Rolls the intervals over as of `now_ms` and reads `key`'s counts.
    fn components(&self, env: &Env, key: Unknown, now_ms: f64) -> Result<RateComponents> {
        (|| -> Outcome<RateComponents> {
            let inner = &*self.inner;
            // SAFETY: live handles of this call.
            let key =
                unsafe { keys::hash_key(env.raw(), key.raw(), |k| inner.sketches.hash_key(k)) }?;
            inner.set_now(now_ms)?;
            Ok(inner.sketches.rate_with_hash(key, |parts| parts))
        })()
        .map_err(|failure| map_error(env, failure))
    }
}

impl Inner {
    fn set_now(&self, now_ms: f64) -> Outcome<()> {
        self.now.set(now_ms)
    }
}

/// `observe` as raw functions taking the rate's handle first, then the method's arguments,
/// throwing the method's errors (and a `TypeError` for a handle that names no live rate): per key
/// type (`Str`, `Num`) or for any key (`Key`). Then `observeInWindow` the same way: `observe`
/// that also writes the milliseconds elapsed in the current interval (the crate's
/// `observe_hash_in_interval`) to the thread's window scratch ([`crate::window`]), so
/// `WindowQuota` needs one call per request.
/// Exported by `fastPaths()`.
pub(crate) const FAST_PATHS: [(&CStr, Callback); 6] = [
    (c"rateObserveStr", observe_str),
    (c"rateObserveNum", observe_num),
    (c"rateObserveKey", observe_key),
    (c"rateObserveInWindowStr", observe_in_window_str),
    (c"rateObserveInWindowNum", observe_in_window_num),
    (c"rateObserveInWindowKey", observe_in_window_key),
];

raw::per_key_type! {
    [observe_str, observe_num, observe_key],
    |env, read, [handle, key, events, now_ms]| {
        let inner = raw::resolve(env, handle, &RATES)?;
        let events = raw::count(env, events, "The \"events\" argument")?;
        let key = read(env, key, |k| inner.sketches.hash_key(k))?;
        let now_ms = raw::number(env, now_ms, "The \"nowMs\" argument")?;
        inner.set_now(now_ms)?;
        Ok(inner.sketches.observe_hash(key, events) as f64)
    }
}

raw::per_key_type! {
    [observe_in_window_str, observe_in_window_num, observe_in_window_key],
    |env, read, [handle, key, events, now_ms]| {
        let inner = raw::resolve(env, handle, &RATES)?;
        let events = raw::count(env, events, "The \"events\" argument")?;
        let key = read(env, key, |k| inner.sketches.hash_key(k))?;
        let now_ms = raw::number(env, now_ms, "The \"nowMs\" argument")?;
        inner.set_now(now_ms)?;
        let (count, elapsed) = inner.sketches.observe_hash_in_interval(key, events);
        // Milliseconds below the 2^52 ms interval: exact in a double.
        window::write(env, elapsed as f64)?;
        Ok(count as f64)
    }
}
