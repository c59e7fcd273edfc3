//! `Estimator`: the count-min sketch of `keepcount-limits`, for `lib/native.cts`.
//!
//! `incr` and `get` are also [`Estimator::fast_paths`]: raw N-API functions bound to this sketch,
//! one per key type, which `lib/native.cts` calls instead of the methods (see [`crate::raw`]).

use crate::args;
use crate::error::{corrupt_reason, map_error};
use crate::keys;
use crate::raw::{self, Callback};
use keepcount_limits::estimator::Estimator as Sketch;
use napi::bindgen_prelude::{BigInt, Either, Object, Uint8Array, Unknown};
use napi::{Env, JsValue, Result, sys};
use napi_derive::napi;
use std::rc::Rc;

/// A count-min sketch of `hashes × slots` i64 counters keyed by a 64-bit seed
/// (docs/format.md §3). Use the package's `Estimator`; this class takes only validated input.
#[napi]
pub struct Estimator {
    /// Shared with the fast-path functions, which may outlive this object.
    sketch: Rc<Sketch>,
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
            Ok(Self {
                sketch: Rc::new(sketch),
            })
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
            Ok(sketch) => Ok(Either::A(Self {
                sketch: Rc::new(sketch),
            })),
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

    /// `incr` and `get` as functions bound to this sketch, taking the same arguments and throwing
    /// the same errors: `incrStr`/`getStr` for string keys, `incrNum`/`getNum` for number keys,
    /// `incrKey`/`getKey` for any key. Each call is a fresh set of functions.
    #[napi(
        catch_unwind,
        ts_return_type = "{ incrStr(key: string, value: number): number; incrNum(key: number, value: number): number; incrKey(key: string | number | bigint | Uint8Array, value: number): number; getStr(key: string): number; getNum(key: number): number; getKey(key: string | number | bigint | Uint8Array): number }"
    )]
    pub fn fast_paths<'env>(&self, env: &'env Env) -> Result<Object<'env>> {
        const PATHS: [(&std::ffi::CStr, Callback); 6] = [
            (c"incrStr", incr_str),
            (c"incrNum", incr_num),
            (c"incrKey", incr_key),
            (c"getStr", get_str),
            (c"getNum", get_num),
            (c"getKey", get_key),
        ];
        // SAFETY: this call's env; every callback reads its data as a `Sketch`.
        let object = unsafe { raw::bound_functions(env.raw(), &self.sketch, &PATHS) }
            .map_err(|failure| map_error(env, failure))?;
        Ok(Object::from_raw(env.raw(), object))
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

/// Defines the raw callback `$name(key, value)` (incr) or `$name(key)` (get) hashing its key with
/// `$hash` (one of the `keys::hash_*`).
macro_rules! fast_path {
    ($name:ident, incr, $hash:path) => {
        unsafe extern "C" fn $name(
            env: sys::napi_env,
            info: sys::napi_callback_info,
        ) -> sys::napi_value {
            // SAFETY: this callback's handles; created by `fast_paths` over a `Sketch`.
            unsafe {
                raw::call(env, info, |sketch: &Sketch, &[key, value]| {
                    let value = raw::number(env, value, "The \"value\" argument")?;
                    let value = args::count("The \"value\" argument", value)?;
                    let key = $hash(env, key, |k| sketch.hash_key(k))?;
                    // Exact for estimates within ±2^53, the documented range.
                    Ok(sketch.incr_hash(key, value) as f64)
                })
            }
        }
    };
    ($name:ident, get, $hash:path) => {
        unsafe extern "C" fn $name(
            env: sys::napi_env,
            info: sys::napi_callback_info,
        ) -> sys::napi_value {
            // SAFETY: this callback's handles; created by `fast_paths` over a `Sketch`.
            unsafe {
                raw::call(env, info, |sketch: &Sketch, &[key]| {
                    let key = $hash(env, key, |k| sketch.hash_key(k))?;
                    Ok(sketch.get_hash(key) as f64)
                })
            }
        }
    };
}

fast_path!(incr_str, incr, keys::hash_str);
fast_path!(incr_num, incr, keys::hash_number);
fast_path!(incr_key, incr, keys::hash_key);
fast_path!(get_str, get, keys::hash_str);
fast_path!(get_num, get, keys::hash_number);
fast_path!(get_key, get, keys::hash_key);
