//! `SharedInflight`: in-flight counts over a shared segment whose dead processes' contributions
//! survivors take back, and its raw `incr`.

use super::options;
use crate::args;
use crate::error::{Result as Outcome, map_error};
use crate::estimator::sketch_fast_paths;
use crate::held::Held;
use crate::keys;
use crate::mismatch::Opener;
use crate::raw::{Callback, Slab};
use keepcount_limits::shared::SharedInflight as Inflight;
use napi::bindgen_prelude::{BigInt, ObjectFinalize, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;

thread_local! {
    /// This thread's shared in-flight counts, by handle, for the fast paths.
    static SHARED_INFLIGHTS: RefCell<Slab<Inflight>> = const { RefCell::new(Slab::new(7)) };
}

/// In-flight counts over the shared segment `name`, with this process's contribution in a slot
/// of its own that survivors take back if it dies (the crate's `shared::SharedInflight`). Use the
/// package's `Inflight.openShared`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct SharedInflight {
    /// Dropping it (on close) gives back what this process still holds.
    inflight: Held<Inflight>,
}

impl ObjectFinalize for SharedInflight {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.inflight.close(&env);
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
            let shape = args::shape(hashes, slots)?;
            let seed = args::seed(&seed)?;
            let opener = Opener {
                class: "Inflight",
                name: &name,
                dir: dir.as_deref(),
                quotas: None,
            };
            let inflight =
                Inflight::open(&name, shape, seed, processes, &options(opener.dir, mode))
                    .map_err(|err| opener.failure(err))?;
            // The total and this process's contribution are the sketches it touches.
            let bytes = 2 * shape.counters() * size_of::<i64>();
            Ok(Self {
                inflight: Held::new(env, &SHARED_INFLIGHTS, inflight, bytes)?,
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
            let inflight = self.inflight.get()?;
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
            let inflight = self.inflight.get()?;
            // SAFETY: live handles of this call.
            let key = unsafe { keys::hash_key(env.raw(), key.raw(), |k| inflight.hash_key(k)) }?;
            Ok(inflight.get_hash(key) as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Takes back the contributions of dead processes if it is this object's turn to for the
    /// host (the crate's `SharedInflight::reclaim_in_turn`, called every 100 ms from every
    /// object); returns how many slots it freed (0 once closed).
    #[napi(catch_unwind)]
    pub fn reclaim_in_turn(&self) -> u32 {
        // At most 1024 slots.
        self.inflight
            .get_open()
            .map_or(0, |inflight| inflight.reclaim_in_turn() as u32)
    }

    /// This object's handle for the fast paths ([`FAST_PATHS`]), valid while it lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.inflight.handle()
    }

    /// Gives back what this process still holds and frees its slot now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.inflight.close(env);
    }
}

/// `SharedInflight.incr(handle, key, value)` as raw functions.
pub(super) const FAST_PATHS: [(&CStr, Callback); 3] = [
    (c"sharedInflightIncrStr", inflight_incr_str),
    (c"sharedInflightIncrNum", inflight_incr_num),
    (c"sharedInflightIncrKey", inflight_incr_key),
];

sketch_fast_paths!(SHARED_INFLIGHTS, incr: [inflight_incr_str, inflight_incr_num, inflight_incr_key]);
