//! `SharedEstimator`, `SharedRate` and `SharedInflight`: the sketches of `keepcount-limits`'
//! `shared` module, whose counters live in a segment file every process of the host maps, for
//! `lib/native.cts`.
//!
//! They answer as `Estimator`, `Rate` and `Inflight` do; what differs is where the counters live
//! and, for the rate, the clock: a shared rate reads the host's monotonic clock itself (every
//! process must agree on the interval), so its methods take no `nowMs`. The hot calls (the
//! sketch's `incr` and `get`, the rate's `observe` and `observeInWindow`, the in-flight `incr`
//! and the shared limiter's `check`) are also [`FAST_PATHS`], as the heap objects' are: a method
//! call would cost a shared check more than the check itself.

use crate::args;
use crate::buffer::Lent;
use crate::error::{Failure, Result as Outcome, map_error};
use crate::estimator::{Estimator, fast_path};
use crate::keys;
use crate::limiter::{self, QuotaSpec};
use crate::memory::External;
use crate::rate::RateSample;
use crate::raw::{self, Callback, Slab, Slot};
use keepcount_limits::Shape;
use keepcount_limits::estimator::Estimator as Sketch;
use keepcount_limits::shared::{
    self, Counters, SharedInflight as Inflight, SharedLimiter as Buckets, SharedOptions,
    SharedRate as Sketches,
};
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Uint8Array, Unknown};
use napi::{Env, JsValue, Result, sys};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;
use std::rc::Rc;
use std::time::Duration;

/// A sketch over a shared segment's counters.
type SharedSketch = Sketch<Counters>;

thread_local! {
    /// This thread's shared sketches, by handle, for the fast paths.
    static SHARED_SKETCHES: RefCell<Slab<SharedSketch>> = const { RefCell::new(Slab::new(4)) };
    /// This thread's shared limiters, by handle, for the fast paths.
    static SHARED_LIMITERS: RefCell<Slab<Buckets>> = const { RefCell::new(Slab::new(5)) };
    /// This thread's shared rates, by handle, for the fast paths.
    static SHARED_RATES: RefCell<Slab<Sketches>> = const { RefCell::new(Slab::new(6)) };
    /// This thread's shared in-flight counts, by handle, for the fast paths.
    static SHARED_INFLIGHTS: RefCell<Slab<Inflight>> = const { RefCell::new(Slab::new(7)) };
}

/// Longest interval `lib/rate.ts` accepts: 2^52 ms.
const MAX_INTERVAL_MS: u64 = 1 << 52;

/// Where segments live and with which mode: `dir` `None` for the platform default.
fn options(dir: Option<String>, mode: u32) -> SharedOptions {
    let options = SharedOptions::new().mode(mode);
    match dir {
        Some(dir) => options.dir(dir),
        None => options,
    }
}

/// The failure of calling a method after `close()` (`lib/` never does).
fn closed() -> Failure {
    Failure::internal("the shared segment was closed")
}

/// A count-min sketch whose counters live in the shared segment `name` (docs: the crate's
/// `shared` module). Use the package's `Estimator.openShared`; this class takes only validated
/// input.
#[napi(custom_finalize)]
pub struct SharedEstimator {
    /// `None` once closed.
    sketch: Option<Rc<SharedSketch>>,
    slot: Slot<SharedSketch>,
    /// The mapping, reported to V8 (see [`crate::memory`]) so dropped objects are collected.
    memory: External,
    hashes: u32,
    slots: u32,
    seed: u64,
    /// The `SharedArrayBuffer` of a sketch made by [`SharedEstimator::lend`]; declared last, so
    /// it is released after the sketch over its memory.
    lent: Option<Lent>,
}

impl ObjectFinalize for SharedEstimator {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.memory.release(&env);
        Ok(())
    }
}

#[napi]
impl SharedEstimator {
    /// Opens (creating if needed) segment `name` in `dir` (default: `/dev/shm` on Linux) with
    /// file mode `mode`: `hashes × slots` counters keyed by `seed`. Throws `ERR_KEEPCOUNT_MISMATCH`
    /// if it exists with another shape, seed or kind, `ERR_KEEPCOUNT_CORRUPT` if its header is
    /// damaged, `ERR_KEEPCOUNT_IO` if the system refuses the file.
    #[napi(factory, catch_unwind)]
    pub fn open(
        env: &Env,
        name: String,
        hashes: f64,
        slots: f64,
        seed: BigInt,
        dir: Option<String>,
        mode: u32,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let shape = Shape::new(
                args::dimension("The \"hashes\" argument", hashes)?,
                args::dimension("The \"slots\" argument", slots)?,
            )?;
            let seed = args::seed(&seed)?;
            let sketch = shared::open_estimator(&name, shape, seed, &options(dir, mode))?;
            let memory = External::report(env, sketch.memory_bytes());
            let sketch = Rc::new(sketch);
            let slot = Slot::new(&SHARED_SKETCHES, Rc::clone(&sketch))?;
            // Shapes are within 2^27: both fit in u32.
            Ok(Self {
                sketch: Some(sketch),
                slot,
                memory,
                hashes: shape.hashes() as u32,
                slots: shape.slots() as u32,
                seed,
                lent: None,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// A sketch over `counters`, a `BigInt64Array` over a `SharedArrayBuffer` that `lib/` laid out
    /// for `hashes × slots` counters keyed by `seed` (see [`crate::buffer`]); worker threads that
    /// lend the same buffer share its counters. `ERR_KEEPCOUNT_CORRUPT` /
    /// `ERR_KEEPCOUNT_MISMATCH` if its header says otherwise.
    #[napi(factory, catch_unwind)]
    pub fn lend(
        env: &Env,
        #[napi(ts_arg_type = "BigInt64Array")] counters: Unknown,
        hashes: f64,
        slots: f64,
        seed: BigInt,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let shape = Shape::new(
                args::dimension("The \"hashes\" argument", hashes)?,
                args::dimension("The \"slots\" argument", slots)?,
            )?;
            let seed = args::seed(&seed)?;
            let lent = Lent::take(env, counters)?;
            // SAFETY: `lent` keeps the memory alive and is dropped after the sketch (field order,
            // and close(); the slab's copy goes when the slot is vacated, which happens first);
            // JavaScript reaches the memory only through Atomics.
            let sketch = unsafe { shared::lend_estimator(lent.start, lent.len, shape, seed) }?;
            // The counters are the buffer's, which V8 already counts: only the struct is ours.
            let memory = External::report(env, size_of_val(&sketch));
            let sketch = Rc::new(sketch);
            let slot = Slot::new(&SHARED_SKETCHES, Rc::clone(&sketch))?;
            // Shapes are within 2^27: both fit in u32.
            Ok(Self {
                sketch: Some(sketch),
                slot,
                memory,
                hashes: shape.hashes() as u32,
                slots: shape.slots() as u32,
                seed,
                lent: Some(lent),
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Rows of counters.
    #[napi(getter)]
    pub fn hashes(&self) -> u32 {
        self.hashes
    }

    /// Counters per row.
    #[napi(getter)]
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// The hash seed, in [0, 2^64).
    #[napi(getter)]
    pub fn seed(&self) -> BigInt {
        BigInt::from(self.seed)
    }

    /// This sketch's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// The row-major positions of `key`'s counters, one per row (docs/format.md §3).
    #[napi(catch_unwind)]
    pub fn counter_indexes(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<Vec<u32>> {
        (|| -> Outcome<Vec<u32>> {
            let sketch = self.sketch()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketch.hash_key(k)) }?;
            let mut indexes = Vec::with_capacity(sketch.hashes());
            // Indexes are below 2^27 (docs/format.md §4): they fit in u32.
            sketch
                .rows()
                .for_each_index(key, |index| indexes.push(index as u32));
            Ok(indexes)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Zeroes every counter, for every process.
    #[napi(catch_unwind)]
    pub fn reset(&self, env: &Env) -> Result<()> {
        self.sketch()
            .map(|sketch| sketch.reset())
            .map_err(|failure| map_error(env, failure))
    }

    /// Adds `other`'s counters to the shared ones; `ERR_KEEPCOUNT_MISMATCH` unless both have the
    /// same hashes, slots and seed.
    #[napi(catch_unwind)]
    pub fn merge(&self, env: &Env, other: &Estimator) -> Result<()> {
        (|| -> Outcome<()> {
            other.merge_into(self.sketch()?)?;
            Ok(())
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// The version-2 serialized form (docs/format.md §5) of the counters as they are now.
    #[napi(catch_unwind)]
    pub fn serialize(&self, env: &Env) -> Result<Uint8Array> {
        self.sketch()
            .map(|sketch| Uint8Array::new(sketch.to_bytes()))
            .map_err(|failure| map_error(env, failure))
    }

    /// Unmaps the segment from this process now (the file and the other processes' counts stay).
    /// Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.slot.vacate();
        // The slab held the only other reference: dropping ours unmaps the segment.
        self.sketch = None;
        self.lent = None;
        self.memory.release(env);
    }
}

impl SharedEstimator {
    fn sketch(&self) -> Outcome<&SharedSketch> {
        self.sketch.as_deref().ok_or_else(closed)
    }
}

/// pingora-limits' `Rate` over the shared segment `name`, on the host's monotonic clock. Use the
/// package's `Rate.openShared`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct SharedRate {
    /// `None` once closed.
    sketches: Option<Rc<Sketches>>,
    slot: Slot<Sketches>,
    memory: External,
}

impl ObjectFinalize for SharedRate {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.memory.release(&env);
        Ok(())
    }
}

#[napi]
impl SharedRate {
    /// Opens (creating if needed) the shared rate `name` over intervals of `intervalMs` (an
    /// integer in [1, 2^52]) with two sketches of `hashes × slots` keyed by `seed`; errors as
    /// `SharedEstimator.open`.
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
            let shape = Shape::new(
                args::dimension("The \"hashes\" argument", hashes)?,
                args::dimension("The \"slots\" argument", slots)?,
            )?;
            let sketches = Sketches::open(
                &name,
                Duration::from_millis(interval_ms),
                shape,
                args::seed(&seed)?,
                &options(dir, mode),
            )?;
            let memory = External::report(env, 2 * shape.counters() * size_of::<i64>());
            let sketches = Rc::new(sketches);
            let slot = Slot::new(&SHARED_RATES, Rc::clone(&sketches))?;
            Ok(Self {
                sketches: Some(sketches),
                slot,
                memory,
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
            let sketches = self.sketches()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.observe_hash(key, events) as f64)
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
            let sketches = self.sketches()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| sketches.hash_key(k)) }?;
            Ok(sketches.rate_with_hash(key, |parts| RateSample {
                prev_samples: parts.prev_samples as f64,
                curr_samples: parts.curr_samples as f64,
                current_interval_fraction: parts.current_interval_fraction,
            }))
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This rate's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// Unmaps the segment from this process now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.slot.vacate();
        // The slab held the only other reference: dropping ours unmaps the segment.
        self.sketches = None;
        self.memory.release(env);
    }
}

impl SharedRate {
    fn sketches(&self) -> Outcome<&Sketches> {
        self.sketches.as_deref().ok_or_else(closed)
    }
}

/// In-flight counts over the shared segment `name`, with this process's contribution in a slot
/// of its own that survivors take back if it dies (the crate's `shared::SharedInflight`). Use the
/// package's `Inflight.openShared`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct SharedInflight {
    /// `None` once closed (dropping the last reference gives back what this process still holds).
    inflight: Option<Rc<Inflight>>,
    slot: Slot<Inflight>,
    memory: External,
}

impl ObjectFinalize for SharedInflight {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.memory.release(&env);
        Ok(())
    }
}

#[napi]
impl SharedInflight {
    /// Opens (creating if needed) segment `name` with `processes` slots (in [1, 1024]) and
    /// sketches of `hashes × slots` keyed by `seed`; errors as `SharedEstimator.open`, and
    /// `ERR_KEEPCOUNT_FULL` if every slot is held by a live process.
    #[napi(factory, catch_unwind)]
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        env: &Env,
        name: String,
        hashes: f64,
        slots: f64,
        seed: BigInt,
        processes: u32,
        dir: Option<String>,
        mode: u32,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let shape = Shape::new(
                args::dimension("The \"hashes\" argument", hashes)?,
                args::dimension("The \"slots\" argument", slots)?,
            )?;
            let seed = args::seed(&seed)?;
            let inflight = Inflight::open(&name, shape, seed, processes, &options(dir, mode))?;
            // The total and this process's contribution are the sketches it touches.
            let memory = External::report(env, 2 * shape.counters() * size_of::<i64>());
            let inflight = Rc::new(inflight);
            let slot = Slot::new(&SHARED_INFLIGHTS, Rc::clone(&inflight))?;
            Ok(Self {
                inflight: Some(inflight),
                slot,
                memory,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Adds `value` (a safe integer, negative to give back) to `key` for this process; returns
    /// the host-wide estimate.
    #[napi(catch_unwind)]
    pub fn incr(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        value: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let value = args::count("The \"value\" argument", value)?;
            let inflight = self.inflight()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| inflight.hash_key(k)) }?;
            Ok(inflight.incr_hash(key, value) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// `key`'s host-wide estimate.
    #[napi(catch_unwind)]
    pub fn get(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let inflight = self.inflight()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| inflight.hash_key(k)) }?;
            Ok(inflight.get_hash(key) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Takes back the contributions of dead processes; returns how many slots it freed (0 once
    /// closed).
    #[napi(catch_unwind)]
    pub fn reclaim(&self) -> u32 {
        // At most 1024 slots.
        self.inflight
            .as_ref()
            .map_or(0, |inflight| inflight.reclaim() as u32)
    }

    /// This object's handle for the fast paths ([`FAST_PATHS`]), valid while it lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// Gives back what this process still holds and frees its slot now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.slot.vacate();
        // The slab held the only other reference: dropping ours gives the counts back.
        self.inflight = None;
        self.memory.release(env);
    }
}

impl SharedInflight {
    fn inflight(&self) -> Outcome<&Inflight> {
        self.inflight.as_deref().ok_or_else(closed)
    }
}

/// Per-key token buckets over the shared segment `name`, on the host's monotonic clock (the
/// crate's `shared::SharedLimiter`). Use the package's `Limiter.openShared`; this class takes only
/// validated input.
#[napi(custom_finalize)]
pub struct SharedLimiter {
    /// `None` once closed.
    limiter: Option<Rc<Buckets>>,
    slot: Slot<Buckets>,
    memory: External,
}

/// How full a shared limiter's key table is.
#[napi(object)]
pub struct SharedLimiterStats {
    /// Keys in the table.
    pub keys: u32,
    /// The most keys the table takes.
    pub capacity: u32,
    /// Checks sent to the best-effort bucket because the table was full, by every process.
    pub overflow: f64,
}

impl ObjectFinalize for SharedLimiter {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.memory.release(&env);
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
            let limiter = Buckets::open(
                &name,
                limiter::quota(&quota)?,
                limiter::quota(&best_effort)?,
                capacity,
                args::seed(&seed)?,
                &options(dir, mode),
            )?;
            // Report the mapping's size, as the sketches do: what the table can reach.
            let memory = External::report(env, limiter.memory_bytes());
            let limiter = Rc::new(limiter);
            let slot = Slot::new(&SHARED_LIMITERS, Rc::clone(&limiter))?;
            Ok(Self {
                limiter: Some(limiter),
                slot,
                memory,
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
            let buckets = self.limiter()?;
            limiter::with_key(env, key, |key| {
                limiter::decision_ms(buckets.check(key, cost))
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This limiter's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// How full the key table is, and how many checks overflowed it.
    #[napi(catch_unwind)]
    pub fn stats(&self, env: &Env) -> Result<SharedLimiterStats> {
        self.limiter()
            .map(|limiter| {
                let stats = limiter.stats();
                SharedLimiterStats {
                    keys: stats.keys,
                    capacity: stats.capacity,
                    // Exact below 2^53 checks.
                    overflow: stats.overflow as f64,
                }
            })
            .map_err(|failure| map_error(env, failure))
    }

    /// Unmaps the segment from this process now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.slot.vacate();
        // The slab held the only other reference: dropping ours unmaps the segment.
        self.limiter = None;
        self.memory.release(env);
    }
}

impl SharedLimiter {
    fn limiter(&self) -> Outcome<&Buckets> {
        self.limiter.as_deref().ok_or_else(closed)
    }
}

/// Removes segment `name`'s file from `dir` (default: `/dev/shm` on Linux). Processes that have
/// it open keep their counts; the next open starts afresh. No error if it does not exist.
#[napi(catch_unwind)]
pub fn unlink_shared(env: &Env, name: String, dir: Option<String>) -> Result<()> {
    shared::unlink(&name, &options(dir, shared::DEFAULT_MODE))
        .map_err(|err| map_error(env, err.into()))
}

/// `SharedEstimator.incr` and `get` as raw functions taking the sketch's handle first, as the
/// heap sketch's (`crate::estimator::FAST_PATHS`); then `SharedRate.observe(handle, key, events)`
/// and `observeInWindow(handle, key, events, window)`, as the heap rate's
/// (`crate::rate::FAST_PATHS`) without `nowMs`: `window[0]` receives the whole milliseconds
/// elapsed in the host's interval, so a `WindowQuota` on a shared rate makes one call per
/// request; `SharedInflight.incr(handle, key, value)`; and `SharedLimiter.check` taking the
/// limiter's handle, then `(key, cost)`, as the local limiter's (`crate::limiter::FAST_PATHS`).
/// Exported by `fastPaths()`.
pub(crate) const FAST_PATHS: [(&CStr, Callback); 18] = [
    (c"sharedIncrStr", incr_str),
    (c"sharedIncrNum", incr_num),
    (c"sharedIncrKey", incr_key),
    (c"sharedGetStr", get_str),
    (c"sharedGetNum", get_num),
    (c"sharedGetKey", get_key),
    (c"sharedRateObserveStr", observe_str),
    (c"sharedRateObserveNum", observe_num),
    (c"sharedRateObserveKey", observe_key),
    (c"sharedRateObserveInWindowStr", observe_in_window_str),
    (c"sharedRateObserveInWindowNum", observe_in_window_num),
    (c"sharedRateObserveInWindowKey", observe_in_window_key),
    (c"sharedInflightIncrStr", inflight_incr_str),
    (c"sharedInflightIncrNum", inflight_incr_num),
    (c"sharedInflightIncrKey", inflight_incr_key),
    (c"sharedCheckStr", check_str),
    (c"sharedCheckNum", check_num),
    (c"sharedCheckKey", check_key),
];

/// Defines the raw callback `$name(handle, key, cost)` reading its key with `$read`
/// (`keys::with_str_key`, `with_number_key` or `with_key`).
macro_rules! fast_check {
    ($name:ident, $read:path) => {
        unsafe extern "C" fn $name(
            env: napi::sys::napi_env,
            info: napi::sys::napi_callback_info,
        ) -> napi::sys::napi_value {
            // SAFETY: this callback's handles.
            unsafe {
                raw::call(env, info, |&[handle, key, cost]| {
                    let buckets = raw::resolve(env, handle, &SHARED_LIMITERS)?;
                    let cost = raw::number(env, cost, "The \"cost\" argument")?;
                    let cost = args::integer("The \"cost\" argument", cost, 0, limiter::MAX_SAFE)?;
                    $read(env, key, |key| {
                        key.with_stored(|key| limiter::decision_ms(buckets.check(key, cost)))
                    })
                })
            }
        }
    };
}

fast_check!(check_str, keys::with_str_key);
fast_check!(check_num, keys::with_number_key);
fast_check!(check_key, keys::with_key);

fast_path!(incr_str, SHARED_SKETCHES, incr, keys::with_str_key);
fast_path!(incr_num, SHARED_SKETCHES, incr, keys::with_number_key);
fast_path!(incr_key, SHARED_SKETCHES, incr, keys::hash_key);
fast_path!(get_str, SHARED_SKETCHES, get, keys::with_str_key);
fast_path!(get_num, SHARED_SKETCHES, get, keys::with_number_key);
fast_path!(get_key, SHARED_SKETCHES, get, keys::hash_key);
fast_path!(
    inflight_incr_str,
    SHARED_INFLIGHTS,
    incr,
    keys::with_str_key
);
fast_path!(
    inflight_incr_num,
    SHARED_INFLIGHTS,
    incr,
    keys::with_number_key
);
fast_path!(inflight_incr_key, SHARED_INFLIGHTS, incr, keys::hash_key);

/// Defines the raw callback `$name(handle, key, events)` (`observe`) or, with `in_window`,
/// `$name(handle, key, events, window)`, hashing its key with `$hash`; checks its arguments in
/// `SharedRate.observe`'s order.
macro_rules! fast_observe {
    ($name:ident, $hash:path) => {
        unsafe extern "C" fn $name(
            env: sys::napi_env,
            info: sys::napi_callback_info,
        ) -> sys::napi_value {
            // SAFETY: this callback's handles.
            unsafe {
                raw::call(env, info, |&[handle, key, events]| {
                    let sketches = raw::resolve(env, handle, &SHARED_RATES)?;
                    let events = raw::number(env, events, "The \"events\" argument")?;
                    let events = args::count("The \"events\" argument", events)?;
                    let key = $hash(env, key, |k| sketches.hash_key(k))?;
                    Ok(sketches.observe_hash(key, events) as f64)
                })
            }
        }
    };
    ($name:ident, $hash:path, in_window) => {
        unsafe extern "C" fn $name(
            env: sys::napi_env,
            info: sys::napi_callback_info,
        ) -> sys::napi_value {
            // SAFETY: this callback's handles.
            unsafe {
                raw::call(env, info, |&[handle, key, events, window]| {
                    let sketches = raw::resolve(env, handle, &SHARED_RATES)?;
                    let events = raw::number(env, events, "The \"events\" argument")?;
                    let events = args::count("The \"events\" argument", events)?;
                    let key = $hash(env, key, |k| sketches.hash_key(k))?;
                    let window = raw::first_f64(env, window, "The \"window\" argument")?;
                    let (count, past) = sketches.observe_hash_in_interval(key, events);
                    // SAFETY: checked by first_f64, and still within this call. Whole
                    // milliseconds, below the 2^52 ms interval: exact in a double, and the
                    // interval's end stays at least 1 ms away.
                    window.write((past / 1_000_000) as f64);
                    Ok(count as f64)
                })
            }
        }
    };
}

fast_observe!(observe_str, keys::with_str_key);
fast_observe!(observe_num, keys::with_number_key);
fast_observe!(observe_key, keys::hash_key);
fast_observe!(observe_in_window_str, keys::with_str_key, in_window);
fast_observe!(observe_in_window_num, keys::with_number_key, in_window);
fast_observe!(observe_in_window_key, keys::hash_key, in_window);
