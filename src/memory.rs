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
use std::cell::{Cell, RefCell};

/// Smallest change in a [`Followed`] size that renews its report, and the whole band while the
/// report is under 8 MiB: a renewal is a call into V8 (which may start a collection), and V8
/// weighs external memory in tens of megabytes anyway (a collection for it comes once some
/// 64 MB more than at the last one are reported), so a finer report would cost without helping.
const MIN_STEP: usize = 1 << 20;

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

    /// Reports `bytes` in place of what is reported now, in one adjustment; if V8 refuses it, the
    /// old report stays (and is what [`release`](Self::release) gives back).
    pub(crate) fn renew(&mut self, env: &Env, bytes: usize) {
        let bytes = i64::try_from(bytes).unwrap_or(i64::MAX);
        // Both in [0, i64::MAX]: the difference cannot overflow.
        if env.adjust_external_memory(bytes - self.0).is_ok() {
            self.0 = bytes;
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

/// A report that follows a size changing on a hot path (the keys a heavy-hitter table holds):
/// renewed only once the size leaves the band around the last report, a [`MIN_STEP`] or an
/// eighth of the report either side, whichever is wider. Following it costs a comparison per
/// call; the report stays within that band of the truth, and a size growing to `n` bytes renews
/// it about `8 + log(n / 8 MiB) / log(9 / 8)` times (some 50 times on the way to 1 GB). Released as
/// [`External`] is: exactly what was reported. Starts at 0, so a size that never passes 1 MiB
/// is never reported.
#[derive(Debug)]
pub(crate) struct Followed {
    external: RefCell<External>,
    /// Sizes that need no renewal: `(low, high)`, inclusive.
    band: Cell<(usize, usize)>,
}

impl Followed {
    /// Nothing reported yet.
    pub(crate) fn new() -> Self {
        Self {
            external: RefCell::new(External(0)),
            band: Cell::new(band(0)),
        }
    }

    /// Renews the report if `bytes` left the band around it.
    #[inline(always)]
    pub(crate) fn follow(&self, env: &Env, bytes: usize) {
        let (low, high) = self.band.get();
        if bytes < low || bytes > high {
            self.renew(env, bytes);
        }
    }

    #[cold]
    #[inline(never)]
    fn renew(&self, env: &Env, bytes: usize) {
        self.external.borrow_mut().renew(env, bytes);
        self.band.set(band(bytes));
    }

    /// Gives back what was reported: the object's `close()` and finalizer. Idempotent.
    pub(crate) fn release(&self, env: &Env) {
        self.external.borrow_mut().release(env);
        self.band.set(band(0));
    }
}

/// The sizes a report of `bytes` stands for.
fn band(bytes: usize) -> (usize, usize) {
    let step = (bytes / 8).max(MIN_STEP);
    (bytes.saturating_sub(step), bytes.saturating_add(step))
}
