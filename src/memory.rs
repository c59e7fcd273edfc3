//! Tells V8 how much native memory a JavaScript object keeps alive.
//!
//! V8 schedules garbage collection by the size of its own heap. A sketch object is a 64-byte
//! wrapper around, by default, 256 KiB of counters (1 MiB for a `Rate`'s two sketches), so without
//! this report V8 sees nothing worth collecting while native memory grows: before it, creating and
//! dropping default `Estimator`s took the process past 2.7 GB of RSS within ~25,000 of them.
//! Reporting through `napi_adjust_external_memory` makes V8 count the counters as its own
//! pressure and collect dropped objects about as soon as it would collect the fallback's
//! `Float64Array`s.

use napi::Env;

/// Native bytes reported to V8 for one object; give them back with [`External::release`] when the
/// object is finalized (napi-rs' `ObjectFinalize`).
#[derive(Debug)]
pub(crate) struct External(i64);

impl External {
    /// Reports `bytes` to V8. The report is advisory: if V8 refuses it, nothing is recorded, so
    /// nothing is released later either.
    pub(crate) fn report(env: &Env, bytes: usize) -> Self {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        match env.adjust_external_memory(bytes) {
            Ok(_) => Self(bytes),
            Err(_) => Self(0),
        }
    }

    /// Gives back what [`report`](Self::report) added. Idempotent.
    pub(crate) fn release(&mut self, env: &Env) {
        if self.0 != 0 {
            // Advisory as the report: a failure leaves V8's estimate high, nothing worse.
            let _ = env.adjust_external_memory(-self.0);
            self.0 = 0;
        }
    }
}
