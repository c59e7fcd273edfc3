//! `SharedEstimator`: a count-min sketch whose counters live in a shared segment (or, lent, in a
//! `SharedArrayBuffer`), and its raw `incr` / `get`.

use super::options;
use crate::args;
use crate::buffer::Lent;
use crate::error::{Result as Outcome, map_error};
use crate::estimator::{Estimator, sketch_fast_paths};
use crate::held::Held;
use crate::keys;
use crate::mismatch::Opener;
use crate::raw::{Callback, Slab};
use keepcount_limits::estimator::Estimator as Sketch;
use keepcount_limits::shared::{self, Counters};
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Uint8Array, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;

/// A sketch over a shared segment's counters.
type SharedSketch = Sketch<Counters>;

thread_local! {
    /// This thread's shared sketches, by handle, for the fast paths.
    static SHARED_SKETCHES: RefCell<Slab<SharedSketch>> = const { RefCell::new(Slab::new(4)) };
}

/// A count-min sketch whose counters live in the shared segment `name` (docs: the crate's
/// `shared` module). Use the package's `Estimator.openShared`; this class takes only validated
/// input.
#[napi(custom_finalize)]
pub struct SharedEstimator {
    sketch: Held<SharedSketch>,
    hashes: u32,
    slots: u32,
    seed: u64,
    /// The `SharedArrayBuffer` of a sketch made by [`SharedEstimator::lend`]; declared last, so
    /// it is released after the sketch over its memory.
    lent: Option<Lent>,
}

impl ObjectFinalize for SharedEstimator {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.sketch.close(&env);
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
            let shape = args::shape(hashes, slots)?;
            let seed = args::seed(&seed)?;
            let opener = Opener {
                class: "Estimator",
                name: &name,
                dir: dir.as_deref(),
                quotas: None,
            };
            let sketch = shared::open_estimator(&name, shape, seed, &options(opener.dir, mode))
                .map_err(|err| opener.failure(err))?;
            let bytes = sketch.memory_bytes();
            // Shapes are within 2^27: both fit in u32.
            Ok(Self {
                sketch: Held::new(env, &SHARED_SKETCHES, sketch, bytes)?,
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
            let shape = args::shape(hashes, slots)?;
            let seed = args::seed(&seed)?;
            let lent = Lent::take(env, counters)?;
            // SAFETY: `lent` keeps the memory alive and is dropped after the sketch (field order,
            // and close(); the slab's copy goes when the slot is vacated, which happens first);
            // JavaScript reaches the memory only through Atomics.
            let sketch = unsafe { shared::lend_estimator(lent.start, lent.len, shape, seed) }?;
            // The counters are the buffer's, which V8 already counts: only the struct is ours.
            let bytes = size_of_val(&sketch);
            // Shapes are within 2^27: both fit in u32.
            Ok(Self {
                sketch: Held::new(env, &SHARED_SKETCHES, sketch, bytes)?,
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
        self.sketch.handle()
    }

    /// The row-major positions of `key`'s counters, one per row (docs/format.md §3).
    #[napi(catch_unwind)]
    pub fn counter_indexes(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<Vec<u32>> {
        (|| -> Outcome<Vec<u32>> {
            let sketch = self.sketch.get()?;
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
        self.sketch
            .get()
            .map(|sketch| sketch.reset())
            .map_err(|failure| map_error(env, failure))
    }

    /// Adds `other`'s counters to the shared ones; `ERR_KEEPCOUNT_MISMATCH` unless both have the
    /// same hashes, slots and seed.
    #[napi(catch_unwind)]
    pub fn merge(&self, env: &Env, other: &Estimator) -> Result<()> {
        (|| -> Outcome<()> {
            other.merge_into(self.sketch.get()?)?;
            Ok(())
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// The version-3 serialized form (docs/format.md §5) of the counters as they are now.
    #[napi(catch_unwind)]
    pub fn serialize(&self, env: &Env) -> Result<Uint8Array> {
        self.sketch
            .get()
            .map(|sketch| Uint8Array::new(sketch.to_bytes()))
            .map_err(|failure| map_error(env, failure))
    }

    /// Unmaps the segment from this process now (the file and the other processes' counts stay).
    /// Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        // The sketch first: the lent buffer's memory must outlive it.
        self.sketch.close(env);
        self.lent = None;
    }
}

/// `SharedEstimator.incr` and `get` as raw functions taking the sketch's handle first, as the heap
/// sketch's (`crate::estimator::FAST_PATHS`).
pub(super) const FAST_PATHS: [(&CStr, Callback); 6] = [
    (c"sharedIncrStr", incr_str),
    (c"sharedIncrNum", incr_num),
    (c"sharedIncrKey", incr_key),
    (c"sharedGetStr", get_str),
    (c"sharedGetNum", get_num),
    (c"sharedGetKey", get_key),
];

sketch_fast_paths!(SHARED_SKETCHES, incr: [incr_str, incr_num, incr_key]);
sketch_fast_paths!(SHARED_SKETCHES, get: [get_str, get_num, get_key]);
