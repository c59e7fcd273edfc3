//! `Estimator`: the count-min sketch of `keepcount-limits`, for `lib/native.cts`.
//!
//! `incr` and `get` are also [`FAST_PATHS`]: raw N-API functions taking the sketch's
//! [`Estimator::handle`], one per key type, which `lib/native.cts` calls instead of the methods
//! (see [`crate::raw`]).

use crate::args;
use crate::error::{corrupt_reason, map_error};
use crate::keys;
use crate::memory::External;
use crate::raw::{Callback, Slab, Slot};
use keepcount_limits::estimator::Estimator as Sketch;
use napi::bindgen_prelude::{BigInt, Either, ObjectFinalize, Uint8Array, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;
use std::rc::Rc;

thread_local! {
    /// This thread's sketches, by handle, for the fast paths.
    static SKETCHES: RefCell<Slab<Sketch>> = const { RefCell::new(Slab::new(0)) };
    /// What every closed sketch of this thread holds in place of its counters: one shared 1 × 1
    /// sketch, so a closed object keeps no memory of its own until it is collected.
    static CLOSED: Rc<Sketch> = Rc::new(Sketch::new(1, 1));
}

/// A count-min sketch of `hashes × slots` i64 counters keyed by a 64-bit seed
/// (docs/format.md §3). Use the package's `Estimator`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct Estimator {
    sketch: Rc<Sketch>,
    /// The sketch's entry in [`SKETCHES`], emptied when this object is collected.
    slot: Slot<Sketch>,
    /// The counters, reported to V8 (see [`crate::memory`]).
    memory: External,
}

impl Estimator {
    fn wrap(env: &Env, sketch: Sketch) -> crate::error::Result<Self> {
        let memory = External::report(env, sketch.memory_bytes());
        let sketch = Rc::new(sketch);
        let slot = Slot::new(&SKETCHES, Rc::clone(&sketch))?;
        Ok(Self {
            sketch,
            slot,
            memory,
        })
    }
}

impl ObjectFinalize for Estimator {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.memory.release(&env);
        Ok(())
    }
}

#[napi]
impl Estimator {
    /// An empty sketch. `hashes` in [1, 32], `slots` >= 1, `hashes × slots` <= 2^27, `seed` in
    /// [0, 2^64); otherwise a `RangeError`.
    #[napi(constructor, catch_unwind)]
    pub fn new(env: &Env, hashes: f64, slots: f64, seed: BigInt) -> Result<Self> {
        (|| -> crate::error::Result<Self> {
            let hashes = args::dimension("The \"hashes\" argument", hashes)?;
            let slots = args::dimension("The \"slots\" argument", slots)?;
            let sketch = Sketch::with_seed(hashes, slots, args::seed(&seed)?)?;
            Self::wrap(env, sketch)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Decodes a version-3 serialized sketch (docs/format.md §5), or returns the first check it
    /// fails: `'short' | 'magic' | 'version' | 'flags' | 'shape' | 'length' | 'checksum'`.
    #[napi(catch_unwind, ts_return_type = "Estimator | string")]
    pub fn deserialize(
        env: &Env,
        #[napi(ts_arg_type = "Uint8Array")] bytes: Unknown,
    ) -> Result<Either<Estimator, &'static str>> {
        // SAFETY: live handles of this call; the slice is dropped before any JavaScript runs.
        let Some(bytes) = (unsafe { keys::uint8_array(env.raw(), bytes.raw()) }) else {
            return Err(map_error(
                env,
                crate::error::Failure::invalid_type(
                    "The \"bytes\" argument",
                    "an instance of Uint8Array",
                ),
            ));
        };
        match Sketch::from_bytes(bytes) {
            Ok(sketch) => Self::wrap(env, sketch)
                .map(Either::A)
                .map_err(|failure| map_error(env, failure)),
            Err(err) => corrupt_reason(err)
                .map(Either::B)
                .map_err(|failure| map_error(env, failure)),
        }
    }

    /// Rows of counters.
    #[napi(getter)]
    pub fn hashes(&self) -> u32 {
        // At most 32.
        self.sketch.hashes() as u32
    }

    /// Counters per row.
    #[napi(getter)]
    pub fn slots(&self) -> u32 {
        // At most 2^27.
        self.sketch.slots() as u32
    }

    /// The hash seed, in [0, 2^64).
    #[napi(getter)]
    pub fn seed(&self) -> BigInt {
        BigInt::from(self.sketch.seed())
    }

    /// Adds `value` (a safe integer, may be negative) to `key`; returns its new estimate.
    #[napi(catch_unwind)]
    pub fn incr(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        value: f64,
    ) -> Result<f64> {
        // Exact for estimates within ±2^53, the documented range.
        (|| -> crate::error::Result<f64> {
            let value = args::count("The \"value\" argument", value)?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| self.sketch.hash_key(k)) }?;
            Ok(self.sketch.incr_hash(key, value) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// `key`'s estimate.
    #[napi(catch_unwind)]
    pub fn get(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<f64> {
        // SAFETY: live handles of this call.
        unsafe { keys::hash_key(env.raw(), key.raw(), |k| self.sketch.hash_key(k)) }
            .map(|key| self.sketch.get_hash(key) as f64)
            .map_err(|failure| map_error(env, failure))
    }

    /// The row-major positions of `key`'s counters, one per row (docs/format.md §3).
    #[napi(catch_unwind)]
    pub fn counter_indexes(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<Vec<u32>> {
        // SAFETY: live handles of this call.
        let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| self.sketch.hash_key(k)) }
            .map_err(|failure| map_error(env, failure))?;
        let mut indexes = Vec::with_capacity(self.sketch.hashes());
        // Indexes are below 2^27 (docs/format.md §4): they fit in u32.
        self.sketch
            .rows()
            .for_each_index(key, |index| indexes.push(index as u32));
        Ok(indexes)
    }

    /// Frees the counters now instead of when the object is collected (`lib/` refuses every
    /// later call, so the empty sketch left in their place is never used). Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.slot.vacate();
        // The slab held the only other reference: dropping ours frees the counters.
        self.sketch = CLOSED.with(Rc::clone);
        self.memory.release(env);
    }

    /// Adds this sketch's counters to `target`'s (a shared sketch's, in [`crate::shared`]).
    pub(crate) fn merge_into<S: keepcount_limits::CounterStore>(
        &self,
        target: &Sketch<S>,
    ) -> std::result::Result<(), keepcount_limits::estimator::MergeError> {
        target.merge(&self.sketch)
    }

    /// This sketch's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.slot.handle()
    }

    /// Zeroes every counter.
    #[napi(catch_unwind)]
    pub fn reset(&self) {
        self.sketch.reset();
    }

    /// Adds `other`'s counters to this sketch's; an `ERR_KEEPCOUNT_MISMATCH` error unless both
    /// have the same hashes, slots and seed.
    #[napi(catch_unwind)]
    pub fn merge(&self, env: &Env, other: &Estimator) -> Result<()> {
        self.sketch
            .merge(&other.sketch)
            .map_err(|err| map_error(env, err.into()))
    }

    /// The version-3 serialized form (docs/format.md §5): `28 + 8 × hashes × slots` bytes.
    #[napi(catch_unwind)]
    pub fn serialize(&self) -> Uint8Array {
        Uint8Array::new(self.sketch.to_bytes())
    }
}

/// `incr` and `get` as raw functions taking the sketch's handle first, then the method's
/// arguments, throwing the method's errors (and a `TypeError` for a handle that names no live
/// sketch): per key type (`Str`, `Num`) or for any key (`Key`). Exported by `fastPaths()`.
pub(crate) const FAST_PATHS: [(&CStr, Callback); 6] = [
    (c"estimatorIncrStr", incr_str),
    (c"estimatorIncrNum", incr_num),
    (c"estimatorIncrKey", incr_key),
    (c"estimatorGetStr", get_str),
    (c"estimatorGetNum", get_num),
    (c"estimatorGetKey", get_key),
];

/// Defines `incr(handle, key, value)` or `get(handle, key)` on the sketches of `$slab` as raw
/// callbacks, one per key type ([`raw::per_key_type`](crate::raw::per_key_type)). Also used for
/// the shared sketches and in-flight counts of [`crate::shared`].
macro_rules! sketch_fast_paths {
    ($slab:ident, incr: [$($name:ident),*]) => {
        $crate::raw::per_key_type! {
            [$($name),*],
            |env, read, [handle, key, value]| {
                let sketch = $crate::raw::resolve(env, handle, &$slab)?;
                let value = $crate::raw::count(env, value, "The \"value\" argument")?;
                let key = read(env, key, |k| sketch.hash_key(k))?;
                // Exact for estimates within ±2^53, the documented range.
                Ok(sketch.incr_hash(key, value) as f64)
            }
        }
    };
    ($slab:ident, get: [$($name:ident),*]) => {
        $crate::raw::per_key_type! {
            [$($name),*],
            |env, read, [handle, key]| {
                let sketch = $crate::raw::resolve(env, handle, &$slab)?;
                let key = read(env, key, |k| sketch.hash_key(k))?;
                Ok(sketch.get_hash(key) as f64)
            }
        }
    };
}
pub(crate) use sketch_fast_paths;

sketch_fast_paths!(SKETCHES, incr: [incr_str, incr_num, incr_key]);
sketch_fast_paths!(SKETCHES, get: [get_str, get_num, get_key]);
