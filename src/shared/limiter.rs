//! `SharedLimiter`: per-key token buckets over a shared segment, on the host's monotonic clock,
//! and its raw `check`.

use super::options;
use crate::args;
use crate::error::{Result as Outcome, map_error};
use crate::held::Held;
use crate::limiter::{self, QuotaSpec};
use crate::mismatch::Opener;
use crate::raw::{self, Callback, Slab};
use keepcount_limits::shared::SharedLimiter as Buckets;
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Unknown};
use napi::{Env, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;

thread_local! {
    /// This thread's shared limiters, by handle, for the fast paths.
    static SHARED_LIMITERS: RefCell<Slab<Buckets>> = const { RefCell::new(Slab::new(5)) };
}

/// Per-key token buckets over the shared segment `name`, on the host's monotonic clock (the
/// crate's `shared::SharedLimiter`). Use the package's `Limiter.openShared`; this class takes only
/// validated input.
#[napi(custom_finalize)]
pub struct SharedLimiter {
    limiter: Held<Buckets>,
}

/// How full a shared limiter's key table is.
#[napi(object)]
pub struct SharedLimiterStats {
    /// Keys in the table.
    pub keys: u32,
    /// The most keys the table takes.
    pub capacity: u32,
    /// Checks sent to the best-effort bucket because the table was full and no entry within the
    /// key's reach held a full bucket, by every process.
    pub overflow: f64,
    /// Entries new keys took over from keys whose buckets were full, by every process.
    pub takeovers: f64,
}

impl ObjectFinalize for SharedLimiter {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.limiter.close(&env);
        Ok(())
    }
}

#[napi]
impl SharedLimiter {
    /// Opens (creating if needed) segment `name`: a bucket under `quota` for each of up to
    /// `capacity` keys (in [1, 2^22]), `bestEffort` for keys beyond, key identities under `seed`;
    /// errors as `SharedEstimator.open`, and `ERR_KEEPCOUNT_UNSUPPORTED` on a CPU without
    /// lock-free 128-bit atomics.
    #[napi(factory, catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        env: &Env,
        name: String,
        quota: QuotaSpec,
        best_effort: QuotaSpec,
        capacity: u32,
        seed: BigInt,
        dir: Option<String>,
        mode: u32,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let (quota, best_effort) = (limiter::quota(&quota)?, limiter::quota(&best_effort)?);
            let opener = Opener {
                class: "Limiter",
                name: &name,
                dir: dir.as_deref(),
                quotas: Some((quota, best_effort)),
            };
            let limiter = Buckets::open(
                &name,
                quota,
                best_effort,
                capacity,
                args::seed(&seed)?,
                &options(opener.dir, mode),
            )
            .map_err(|err| opener.failure(err))?;
            // Report the mapping's size, as the sketches do: what the table can reach.
            let bytes = limiter.memory_bytes();
            Ok(Self {
                limiter: Held::new(env, &SHARED_LIMITERS, limiter, bytes)?,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Checks one request costing `cost` units (a safe integer) for `key`: 0 if admitted, else
    /// the milliseconds until it would be, `Infinity` if never.
    #[napi(catch_unwind)]
    pub fn check(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        cost: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let cost = args::integer("The \"cost\" argument", cost, 0, limiter::MAX_SAFE)?;
            let buckets = self.limiter.get()?;
            limiter::with_key(env, key, |key| {
                limiter::decision_ms(buckets.check(key, cost))
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This limiter's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.limiter.handle()
    }

    /// How full the key table is, and how many checks overflowed it.
    #[napi(catch_unwind)]
    pub fn stats(&self, env: &Env) -> Result<SharedLimiterStats> {
        self.limiter
            .get()
            .map(|limiter| {
                let stats = limiter.stats();
                SharedLimiterStats {
                    keys: stats.keys,
                    capacity: stats.capacity,
                    // Exact below 2^53 checks.
                    overflow: stats.overflow as f64,
                    takeovers: stats.takeovers as f64,
                }
            })
            .map_err(|failure| map_error(env, failure))
    }

    /// Unmaps the segment from this process now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.limiter.close(env);
    }
}

/// `SharedLimiter.check` taking the limiter's handle, then `(key, cost)`, as the local limiter's
/// (`crate::limiter::FAST_PATHS`).
pub(super) const FAST_PATHS: [(&CStr, Callback); 3] = [
    (c"sharedCheckStr", check_str),
    (c"sharedCheckNum", check_num),
    (c"sharedCheckKey", check_key),
];

raw::per_key_type! {
    [check_str, check_num, check_key],
    |env, read, [handle, key, cost]| {
        let buckets = raw::resolve(env, handle, &SHARED_LIMITERS)?;
        let cost = raw::number(env, cost, "The \"cost\" argument")?;
        let cost = args::integer("The \"cost\" argument", cost, 0, limiter::MAX_SAFE)?;
        read(env, key, |key| key.with_stored(|key| limiter::decision_ms(buckets.check(key, cost))))
    }
}
