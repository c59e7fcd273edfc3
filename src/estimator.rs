//! `Estimator`: the count-min sketch of `keepcount-limits`, for `lib/native.ts`.

use crate::args;
use crate::error::{corrupt_reason, map_error};
use crate::keys;
use keepcount_limits::estimator::Estimator as Sketch;
use napi::bindgen_prelude::{BigInt, Either, Uint8Array, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;

/// A count-min sketch of `hashes × slots` i64 counters keyed by a 64-bit seed
/// (docs/format.md §3). Use the package's `Estimator`; this class takes only validated input.
#[napi]
pub struct Estimator {
    sketch: Sketch,
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
            Ok(Self { sketch })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Decodes a version-1 serialized sketch (docs/format.md §5), or returns the first check it
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
            Ok(sketch) => Ok(Either::A(Self { sketch })),
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

    /// The version-1 serialized form (docs/format.md §5): `28 + 8 × hashes × slots` bytes.
    #[napi(catch_unwind)]
    pub fn serialize(&self) -> Uint8Array {
        Uint8Array::new(self.sketch.to_bytes())
    }
}
