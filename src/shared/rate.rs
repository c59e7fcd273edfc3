//! `SharedRate`: pingora-limits' `Rate` over a shared segment, on the host's monotonic clock, and
//! its raw `observe` / `observeInWindow`.

use super::options;
use crate::args;
use crate::error::{Result as Outcome, map_error};
use crate::held::Held;
use crate::keys;
use crate::mismatch::Opener;
use crate::rate::RateSample;
use crate::raw::{self, Callback, Slab};
use crate::window;
use keepcount_limits::shared::SharedRate as Sketches;
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;
use std::time::Duration;

thread_local! {
    /// This thread's shared rates, by handle, for the fast paths.
    static SHARED_RATES: RefCell<Slab<Sketches>> = const { RefCell::new(Slab::new(6)) };
}

/// Longest interval `lib/rate.ts` accepts for a shared rate: what the segment's 64 bits of
/// nanoseconds hold, `floor((2^64 − 1) / 10^6)` ms (584 years).
const MAX_INTERVAL_MS: u64 = u64::MAX / 1_000_000;

/// pingora-limits' `Rate` over the shared segment `name`, on the host's monotonic clock. Use the
/// package's `Rate.openShared`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct SharedRate {
    sketches: Held<Sketches>,
}

impl ObjectFinalize for SharedRate {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.sketches.close(&env);
        Ok(())
    }
}

#[napi]
impl SharedRate {
    /// Opens (creating if needed) the shared rate `name` over intervals of `intervalMs` (an
    /// integer in [1, 18446744073709]) with two sketches of `hashes × slots` keyed by `seed`;
    /// errors as `SharedEstimator.open`.
    #[napi(factory, catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        env: &Env,
        name: String,
        interval_ms: f64,
        hashes: f64,
        slots: f64,
        seed: BigInt,
        dir: Option<String>,
        mode: u32,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let interval_ms = args::integer(
                "The \"intervalMs\" argument",
                interval_ms,
                1,
                MAX_INTERVAL_MS,
            )?;
            let shape = args::shape(hashes, slots)?;
            let opener = Opener {
                class: "Rate",
                name: &name,
                dir: dir.as_deref(),
                quotas: None,
            };
            let sketches = Sketches::open(
                &name,
                Duration::from_millis(interval_ms),
                shape,
                args::seed(&seed)?,
                &options(opener.dir, mode),
            )
            .map_err(|err| opener.failure(err))?;
            let bytes = 2 * shape.counters() * size_of::<i64>();
            Ok(Self {
                sketches: Held::new(env, &SHARED_RATES, sketches, bytes)?,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Adds `events` (a safe integer) to `key` in the host's current interval; returns the
    /// key's count there.
    #[napi(catch_unwind)]
    pub fn observe(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        events: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let events = args::count("The \"events\" argument", events)?;
            let sketches = self.sketches.get()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.observe_hash(key, events) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Takes back up to `events` (a safe integer >= 0) of `key`'s count in the host's current
    /// interval, stopping each of its counters at zero however many processes refund at once;
    /// returns the key's count there.
    #[napi(catch_unwind)]
    pub fn refund(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        events: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let events = args::refund("The \"events\" argument", events)?;
            let sketches = self.sketches.get()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.refund_hash(key, events) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// `key`'s count in the previous interval; 0 if two or more intervals passed.
    #[napi(catch_unwind)]
    pub fn previous_count(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<f64> {
        self.sample(env, key).map(|sample| sample.prev_samples)
    }

    /// pingora's `rate_with` components for `key`, now.
    #[napi(catch_unwind)]
    pub fn sample(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<RateSample> {
        (|| -> Outcome<RateSample> {
            let sketches = self.sketches.get()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.rate_with_hash(key, RateSample::from))
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This rate's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.sketches.handle()
    }

    /// Unmaps the segment from this process now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.sketches.close(env);
    }
}

/// `SharedRate.observe(handle, key, events)` and `observeInWindow(handle, key, events)` as raw
/// functions, as the heap rate's (`crate::rate::FAST_PATHS`) without `nowMs`: the thread's window
/// scratch ([`crate::window`]) receives the whole milliseconds elapsed in the host's interval, so
/// a `WindowQuota` on a shared rate makes one call per request.
pub(super) const FAST_PATHS: [(&CStr, Callback); 6] = [
    (c"sharedRateObserveStr", observe_str),
    (c"sharedRateObserveNum", observe_num),
    (c"sharedRateObserveKey", observe_key),
    (c"sharedRateObserveInWindowStr", observe_in_window_str),
    (c"sharedRateObserveInWindowNum", observe_in_window_num),
    (c"sharedRateObserveInWindowKey", observe_in_window_key),
];

raw::per_key_type! {
    [observe_str, observe_num, observe_key],
    |env, read, [handle, key, events]| {
        let sketches = raw::resolve(env, handle, &SHARED_RATES)?;
        let events = raw::count(env, events, "The \"events\" argument")?;
        let key = read(env, key, |k| sketches.hash_key(k))?;
        Ok(sketches.observe_hash(key, events) as f64)
    }
}

raw::per_key_type! {
    [observe_in_window_str, observe_in_window_num, observe_in_window_key],
    |env, read, [handle, key, events]| {
        let sketches = raw::resolve(env, handle, &SHARED_RATES)?;
        let events = raw::count(env, events, "The \"events\" argument")?;
        let key = read(env, key, |k| sketches.hash_key(k))?;
        let (count, past) = sketches.observe_hash_in_interval(key, events);
        // Whole milliseconds, below the 2^52 ms interval: exact in a double, and the interval's
        // end stays at least 1 ms away.
        window::write(env, (past / 1_000_000) as f64)?;
        Ok(count as f64)
    }
}
