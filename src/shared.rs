//! `SharedEstimator`, `SharedRate`, `SharedInflight` and `SharedLimiter` (a module each): the
//! objects of `keepcount-limits`' `shared` module, whose counters live in a segment file every
//! process of the host maps, for `lib/native.cts`.
//!
//! They answer as `Estimator`, `Rate` and `Inflight` do; what differs is where the counters live
//! and, for the rate, the clock: a shared rate reads the host's monotonic clock itself (every
//! process must agree on the interval), so its methods take no `nowMs`. The hot calls (the
//! sketch's `incr` and `get`, the rate's `observe` and `observeInWindow`, the in-flight `incr`
//! and the shared limiter's `check`) are also [`FAST_PATHS`], as the heap objects' are: a method
//! call would cost a shared check more than the check itself.

mod estimator;
mod inflight;
mod limiter;
mod rate;

pub use estimator::SharedEstimator;
pub use inflight::SharedInflight;
pub use limiter::{SharedLimiter, SharedLimiterStats};
pub use rate::SharedRate;

use crate::error::map_error;
use crate::raw::Callback;
use keepcount_limits::shared::{self, SharedOptions};
use napi::{Env, Result};
use napi_derive::napi;
use std::ffi::CStr;

/// Where segments live and with which mode: `dir` `None` for the platform default.
fn options(dir: Option<&str>, mode: u32) -> SharedOptions {
    let options = SharedOptions::new().mode(mode);
    match dir {
        Some(dir) => options.dir(dir),
        None => options,
    }
}

/// Removes segment `name`'s file from `dir` (default: `/dev/shm` on Linux). Processes that have
/// it open keep their counts; the next open starts afresh. No error if it does not exist.
#[napi(catch_unwind)]
pub fn unlink_shared(env: &Env, name: String, dir: Option<String>) -> Result<()> {
    shared::unlink(&name, &options(dir.as_deref(), shared::DEFAULT_MODE))
        .map_err(|err| map_error(env, err.into()))
}

/// The shared objects' hot methods as raw functions taking the object's handle first (each
/// module's `FAST_PATHS`): `SharedEstimator.incr`/`get`, `SharedRate.observe`/`observeInWindow`,
/// `SharedInflight.incr` and `SharedLimiter.check`. Exported by `fastPaths()`.
pub(crate) fn fast_paths() -> impl Iterator<Item = (&'static CStr, Callback)> {
    estimator::FAST_PATHS
        .into_iter()
        .chain(rate::FAST_PATHS)
        .chain(inflight::FAST_PATHS)
        .chain(limiter::FAST_PATHS)
}
