//! `Limiter`: the per-key token-bucket limiter of `keepcount-limits`, on a time base JavaScript
//! supplies.
//!
//! The clock lives in JavaScript (`lib/limiter.ts` reads the user's `Clock`): every call passes
//! `nowMs`, milliseconds (fractions allowed) since the limiter was created, and the crate's `_at`
//! methods take it as `(nowMs × 1e6) as u64` nanoseconds, the conversion `fallback/limiter.ts`
//! reproduces. Without a user clock (`lib/`'s default) the limiter is made with `hostClock` and
//! reads the host's monotonic clock itself, nanoseconds since it was made, ignoring `nowMs`: one
//! vDSO read in the call it makes anyway instead of a `process.hrtime()` call from JavaScript
//! before it (as `Rate`'s, `crate::caller_clock`). Keys are kept in their stored form (docs/format.md §6.1, [`Key::with_stored`]),
//! so `1` and `1n` are one key and a string never equals a `Uint8Array`, as in docs/format.md §1.
//!
//! `check` is also [`FAST_PATHS`]: raw N-API functions taking the limiter's [`Limiter::handle`],
//! one per key type, which `lib/native.cts` calls instead of the method (see [`crate::raw`]). The
//! crate's `check_at` borrows the key as `&[u8]`, so neither path allocates for short keys: the
//! stored form is built on the stack.

use crate::args;
use crate::error::{Failure, Result as Outcome, map_error};
use crate::held::Held;
use crate::keys;
use crate::raw::{self, Callback, Slab};
use keepcount_limits::clock::ManualClock;
use keepcount_limits::limiter::{Decision, Limit, Limiter as Core, LimiterError, Quota};
use napi::bindgen_prelude::{Float64Array, Unknown};
use napi::bindgen_prelude::{Object, ObjectFinalize};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use smallvec::SmallVec;
use std::cell::RefCell;
use std::ffi::CStr;
use std::time::{Duration, Instant};

/// The crate's limiter as the binding holds it.
type Buckets = Core<StoredKey, ManualClock>;

/// A key's stored form as the table holds it: inline up to [`INLINE_KEY`] bytes, so that a check
/// on a cold key misses the cache once, on the entry, and not again on the key's bytes (a boxed
/// key cost a second miss: `memcmp` on it was a tenth of a check at a million keys). 24 bytes
/// hold an IPv4 address, an integer or a short id with its tag byte, and make an entry of 64
/// bytes, one cache line (the crate's table tests hold it there); longer keys spill to the heap.
type StoredKey = SmallVec<[u8; INLINE_KEY]>;

/// Bytes of a key kept inline in its table entry.
const INLINE_KEY: usize = 24;

// One cache line per entry needs the key to stay 32 bytes (24 inline, 8 of length and capacity).
const _: () = assert!(size_of::<StoredKey>() == 32);

/// The buckets and where their time comes from.
struct Timed {
    buckets: Buckets,
    /// When a limiter on the host's clock was made; `None` when the caller passes the time.
    host: Option<Instant>,
}

impl Timed {
    /// Nanoseconds since the limiter was made: the host's reading, or the caller's `now_ms`.
    fn now(&self, now_ms: f64) -> u64 {
        match self.host {
            // u64 nanoseconds last 584 years.
            Some(origin) => u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX),
            None => nanos(now_ms),
        }
    }
}

thread_local! {
    /// This thread's limiters, by handle, for the fast paths.
    static LIMITERS: RefCell<Slab<Timed>> = const { RefCell::new(Slab::new(2)) };
}

/// The largest safe integer: amounts, bursts, periods and costs are at most this.
pub(crate) const MAX_SAFE: u64 = (1 << 53) - 1;

/// One dimension of a quota: `amount` tokens every `periodNs` nanoseconds, at most `burst` held.
/// All safe integers; `periodNs` at least 1.
#[napi(object)]
pub struct LimitSpec {
    /// Tokens added per period.
    pub amount: f64,
    /// The period in nanoseconds.
    pub period_ns: f64,
    /// The most tokens held.
    pub burst: f64,
}

/// A limit on requests (one per check) and one on cost units; an absent one is unlimited.
#[napi(object)]
pub struct QuotaSpec {
    /// The limit on requests.
    pub requests: Option<LimitSpec>,
    /// The limit on cost units.
    pub units: Option<LimitSpec>,
}

/// Per-key token buckets with a best-effort bucket for unknown keys and an optional overall
/// quota, on the caller's time base. Use the package's `Limiter`; this class takes only validated
/// input.
#[napi(custom_finalize)]
pub struct Limiter {
    /// The buckets, in [`LIMITERS`] for the fast paths; their key table and the keys' bytes are
    /// reported to V8 (see [`crate::memory`]) and the report renewed by every `replace_keys`: a
    /// million keys hold some 100 MB that V8 would otherwise not see.
    core: Held<Timed>,
}

impl ObjectFinalize for Limiter {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.core.close(&env);
        Ok(())
    }
}

/// Heap bytes a stored key of `len` bytes owns: none inline, else its bytes rounded up to the
/// allocator's 16-byte granule.
fn key_heap_bytes(len: usize) -> usize {
    if len <= INLINE_KEY {
        0
    } else {
        len.div_ceil(16) * 16
    }
}

#[napi]
impl Limiter {
    /// A limiter with no keys and `bestEffort` for every key; time starts at 0. With `hostClock`
    /// it reads the host's monotonic clock itself and ignores every `nowMs` (module docs).
    #[napi(constructor, catch_unwind)]
    pub fn new(env: &Env, best_effort: QuotaSpec, host_clock: Option<bool>) -> Result<Self> {
        (|| -> Outcome<Self> {
            // The clock never moves: every call passes its reading to an `_at` method.
            let buckets = Core::with_clock(quota(&best_effort)?, ManualClock::new());
            let host = (host_clock == Some(true)).then(Instant::now);
            let bytes = buckets.table_bytes();
            Ok(Self {
                core: Held::new(env, &LIMITERS, Timed { buckets, host }, bytes)?,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// This limiter's handle for the fast paths ([`FAST_PATHS`]), valid while this object lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.core.handle()
    }

    /// Frees the key table and the buckets now. Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.core.close(env);
    }

    /// Checks one request costing `cost` units for `key` at `nowMs`: 0 if admitted, else the
    /// milliseconds until it would be, `Infinity` if never.
    #[napi(catch_unwind)]
    pub fn check(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        cost: f64,
        now_ms: f64,
    ) -> Result<f64> {
        (|| -> Outcome<f64> {
            let cost = args::integer("The \"cost\" argument", cost, 0, MAX_SAFE)?;
            let core = self.core.get()?;
            let now = core.now(now_ms);
            with_key(env, key, |key| wait_ms(&core.buckets, key, cost, now))
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Replaces the key table with `keys[i]` → `quotas[i]` at `nowMs`; `false` (and no change) if
    /// a key appears twice.
    #[napi(catch_unwind)]
    pub fn replace_keys(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "Array<string | number | bigint | Uint8Array>")] keys: Vec<Unknown>,
        quotas: Float64Array,
        now_ms: f64,
    ) -> Result<bool> {
        (|| -> Outcome<bool> {
            if keys.len().checked_mul(PACKED_QUOTA) != Some(quotas.len()) {
                return Err(Failure::out_of_range(
                    "The \"quotas\" argument",
                    "6 numbers for each key of the \"keys\" argument",
                ));
            }
            let mut entries = Vec::with_capacity(keys.len());
            let mut key_bytes = 0;
            for (key, packed) in keys.into_iter().zip(quotas.chunks_exact(PACKED_QUOTA)) {
                let key = with_key(env, key, StoredKey::from_slice)?;
                key_bytes += key_heap_bytes(key.len());
                entries.push((key, packed_quota(packed)?));
            }
            let core = self.core.get()?;
            match core.buckets.replace_keys_at(entries, core.now(now_ms)) {
                Ok(()) => {
                    self.core
                        .report(env, core.buckets.table_bytes() + key_bytes);
                    Ok(true)
                }
                Err(LimiterError::DuplicateKey) => Ok(false),
                Err(other) => Err(failure(other)),
            }
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Sets `key`'s quota at `nowMs`; `false` if `key` is not in the table.
    #[napi(catch_unwind)]
    pub fn set_quota(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        quota_spec: QuotaSpec,
        now_ms: f64,
    ) -> Result<bool> {
        (|| -> Outcome<bool> {
            let quota = quota(&quota_spec)?;
            let core = self.core.get()?;
            match with_key(env, key, |key| {
                core.buckets.set_quota_at(key, quota, core.now(now_ms))
            })? {
                Ok(()) => Ok(true),
                Err(LimiterError::UnknownKey) => Ok(false),
                Err(other) => Err(failure(other)),
            }
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Sets the best-effort quota at `nowMs`.
    #[napi(catch_unwind)]
    pub fn set_best_effort(&self, env: &Env, quota_spec: QuotaSpec, now_ms: f64) -> Result<()> {
        (|| -> Outcome<()> {
            let quota = quota(&quota_spec)?;
            let core = self.core.get()?;
            core.buckets.set_best_effort_at(quota, core.now(now_ms));
            Ok(())
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Sets the overall quota at `nowMs`; `null` removes it.
    #[napi(catch_unwind)]
    pub fn set_overall(&self, env: &Env, quota_spec: Option<QuotaSpec>, now_ms: f64) -> Result<()> {
        (|| -> Outcome<()> {
            let quota = quota_spec.as_ref().map(quota).transpose()?;
            let core = self.core.get()?;
            core.buckets.set_overall_at(quota, core.now(now_ms));
            Ok(())
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// `key`'s quota, or `null` if it is not in the table.
    #[napi(catch_unwind)]
    pub fn quota(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
    ) -> Result<Option<QuotaSpec>> {
        (|| -> Outcome<Option<QuotaSpec>> {
            let core = self.core.get()?;
            with_key(env, key, |key| core.buckets.quota(key).map(spec))
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// How many keys the table holds.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        // Exact: at most u32::MAX keys. 0 once closed (lib/ never asks then).
        self.core
            .get_open()
            .map_or(0.0, |core| core.buckets.len() as f64)
    }
}

/// `check` as a number: 0 if admitted, else the milliseconds to wait, `Infinity` if never.
#[inline(always)]
fn wait_ms(core: &Buckets, key: &[u8], cost: u64, now: u64) -> f64 {
    decision_ms(core.check_at(key, cost, now))
}

/// A decision as `LimiterCore.check` returns it: 0 if admitted, else the milliseconds until it
/// would be, `Infinity` if never.
pub(crate) fn decision_ms(decision: Decision) -> f64 {
    match decision {
        Decision::Allowed => 0.0,
        // u128 → f64 rounds to nearest, as the fallback's Number(bigint) does.
        Decision::Refused { retry_after } => retry_after.as_nanos() as f64 / 1e6,
        Decision::Never => f64::INFINITY,
    }
}

/// The fast paths of this module ([`FAST_PATHS`]) on one object; `lib/native.cts` takes one set
/// per environment. (Separate from `fastPaths()` so this module owns its registration.)
#[napi(
    catch_unwind,
    ts_return_type = "{ limiterCheckStr(handle: number, key: string, cost: number, nowMs: number): number; limiterCheckNum(handle: number, key: number, cost: number, nowMs: number): number; limiterCheckKey(handle: number, key: string | number | bigint | Uint8Array, cost: number, nowMs: number): number }"
)]
pub fn limiter_fast_paths(env: &Env) -> Result<Object<'_>> {
    // SAFETY: this call's env.
    let object = unsafe { raw::functions(env.raw(), &FAST_PATHS) }
        .map_err(|failure| map_error(env, failure))?;
    Ok(Object::from_raw(env.raw(), object))
}

/// `check` as raw functions taking the limiter's handle first, then the method's arguments
/// `(key, cost, nowMs)`, returning and throwing what the method does (and a `TypeError` for a
/// handle that names no live limiter, or a `cost` or `nowMs` that is no number): per key type
/// (`Str`, `Num`) or for any key (`Key`).
pub(crate) const FAST_PATHS: [(&CStr, Callback); 3] = [
    (c"limiterCheckStr", check_str),
    (c"limiterCheckNum", check_num),
    (c"limiterCheckKey", check_key),
];

raw::per_key_type! {
    [check_str, check_num, check_key],
    |env, read, [handle, key, cost, now_ms]| {
        let core = raw::resolve(env, handle, &LIMITERS)?;
        let cost = raw::number(env, cost, "The \"cost\" argument")?;
        let cost = args::integer("The \"cost\" argument", cost, 0, MAX_SAFE)?;
        let now = core.now(raw::number(env, now_ms, "The \"nowMs\" argument")?);
        read(env, key, |key| key.with_stored(|key| wait_ms(&core.buckets, key, cost, now)))
    }
}

/// Nanoseconds of `now_ms`: `as` truncates toward zero and saturates (NaN and negatives to 0),
/// which `nanosFromMs` in `fallback/limiter.ts` mirrors.
fn nanos(now_ms: f64) -> u64 {
    (now_ms * 1e6) as u64
}

/// Converts the JavaScript key and calls `f` with its stored form: a tag byte, then the bytes.
pub(crate) fn with_key<R>(env: &Env, key: Unknown, f: impl FnOnce(&[u8]) -> R) -> Outcome<R> {
    // SAFETY: live handles of this call; the closure does not run JavaScript.
    unsafe { keys::with_key(env.raw(), key.raw(), |key| key.with_stored(f)) }
}

/// A validated quota.
pub(crate) fn quota(spec: &QuotaSpec) -> Outcome<Quota> {
    Ok(Quota::new(
        spec.requests.as_ref().map(limit).transpose()?,
        spec.units.as_ref().map(limit).transpose()?,
    ))
}

/// Numbers per quota in `replaceKeys`' packed table (`lib/core.ts` `packQuotas`): requests'
/// amount, period in ns and burst, then units'; a period of 0 leaves that dimension unlimited.
const PACKED_QUOTA: usize = 6;

/// One quota of a packed table.
fn packed_quota(packed: &[f64]) -> Outcome<Quota> {
    let dimension = |at: usize| {
        let spec = LimitSpec {
            amount: packed[at],
            period_ns: packed[at + 1],
            burst: packed[at + 2],
        };
        (spec.period_ns != 0.0).then(|| limit(&spec)).transpose()
    };
    Ok(Quota::new(dimension(0)?, dimension(3)?))
}

fn limit(spec: &LimitSpec) -> Outcome<Limit> {
    let amount = args::integer("The \"amount\" field", spec.amount, 0, MAX_SAFE)?;
    let period = args::integer("The \"periodNs\" field", spec.period_ns, 1, MAX_SAFE)?;
    let burst = args::integer("The \"burst\" field", spec.burst, 0, MAX_SAFE)?;
    Limit::new(amount, Duration::from_nanos(period), burst).map_err(failure)
}

fn spec(quota: Quota) -> QuotaSpec {
    let limit = |limit: Limit| LimitSpec {
        // Exact: each came from a safe integer.
        amount: limit.amount() as f64,
        period_ns: limit.period().as_nanos() as f64,
        burst: limit.burst() as f64,
    };
    QuotaSpec {
        requests: quota.requests().map(limit),
        units: quota.units().map(limit),
    }
}

/// The failure for a limiter error `lib/` does not prevent or turn into a value.
fn failure(err: LimiterError) -> Failure {
    match err {
        LimiterError::TooManyKeys => {
            Failure::out_of_range("The number of keys", "at most 4294967294")
        }
        other => Failure::out_of_range("The quota", &other.to_string()),
    }
}
