//! `HeavyHitters`: the windowed heavy-hitter summaries of `keepcount-limits`, for
//! `lib/native.cts`, on a time base JavaScript supplies ([`CallerClock`]).
//!
//! Keys are kept in their stored form (docs/format.md §6.1, [`Key::with_stored`]): a tag byte and
//! the payload, hashed as a Rust `&[u8]`. The summaries are therefore `Summary<Vec<u8>>`, whose
//! serialization the crate already defines, and `top` can give every key back with its type.
//! The stored form is built on the stack, so counting a short key allocates nothing.
//!
//! `incr` is also [`FAST_PATHS`]: raw N-API functions taking the object's
//! [`HeavyHitters::handle`], one per key type, which `lib/native.cts` calls instead of the method
//! (see [`crate::raw`]): the request path of `rateLimit` goes through it.

use crate::args;
use crate::caller_clock::CallerClock;
use crate::error::{Failure, Result as Outcome, map_error};
use crate::held::Held;
use crate::keys::{self, Key, Stored};
use crate::memory::Followed;
use crate::raw::{self, Callback, Slab};
use crate::window;
use keepcount_limits::hash::KeyHash;
use keepcount_limits::heavy::codec::ReadError;
use keepcount_limits::heavy::{
    ConfigError, Count, HeavyHitters as Windows, MAX_CAPACITY, Settings, Standing, Stats, Summary,
    Window,
};
use napi::bindgen_prelude::{BigInt, Either, Either3, ObjectFinalize, Uint8Array, Unknown};
use napi::{Env, JsValue, Result};
use napi_derive::napi;
use std::cell::RefCell;
use std::ffi::CStr;
use std::time::Duration;

/// Longest interval `lib/heavy.ts` accepts: 2^52 ms, as for `Rate`.
const MAX_INTERVAL_MS: u64 = 1 << 52;
/// Largest threshold: `Number.MAX_SAFE_INTEGER`, so that JavaScript passes it exactly.
const MAX_THRESHOLD: u64 = (1 << 53) - 1;
/// Largest count a serialized summary may carry into Node (`Number.MAX_SAFE_INTEGER`).
const MAX_SAFE_COUNT: u64 = (1 << 53) - 1;
/// Bytes a table entry takes besides its key (hash, key vector, exact count, slack, control
/// byte and load factor): what the memory report reserves per entry of capacity.
const ENTRY_BYTES: usize = 64;

thread_local! {
    /// This thread's heavy hitters, by handle, for the fast paths.
    static HEAVIES: RefCell<Slab<Inner>> = const { RefCell::new(Slab::new(3)) };
}

/// The summaries and the clock they read.
struct Inner {
    windows: Windows<Vec<u8>, CallerClock>,
    now: CallerClock,
    /// The bytes of the keys both tables hold, reported to V8 apart from the fixed part that
    /// [`Held`] reports: 1,000 tracked keys of 20 KB are 20 MB that V8 saw nothing of, so that
    /// it collected none of 100 such dropped objects (1,977 MB of RSS; the fallback: 218 MB).
    keys: Followed,
}

impl Inner {
    /// Renews the report of the keys' bytes if it moved by a step ([`Followed`]): after every
    /// call that may enter keys, rotate (which drops an interval's keys) or merge.
    #[inline(always)]
    fn follow_keys(&self, env: &Env) {
        self.keys.follow(env, self.windows.key_bytes());
    }
}

/// Heavy hitters per interval of `intervalMs` ms: two summaries of a `hashes × slots` sketch keyed
/// by `seed`, each with an exact table of `capacity` keys entered at `threshold`. Use the
/// package's `HeavyHitters`; this class takes only validated input.
#[napi(custom_finalize)]
pub struct HeavyHitters {
    /// Reported to V8 as its sketches and its tables at capacity, and the keys' bytes as they
    /// grow and shrink ([`Inner::keys`]).
    inner: Held<Inner>,
}

impl ObjectFinalize for HeavyHitters {
    fn finalize(mut self, env: Env) -> Result<()> {
        self.release(&env);
        Ok(())
    }
}

/// A key's bounds (`lib/core.ts` `HeavyCount`).
#[napi(object)]
pub struct HeavyCount {
    pub lower: f64,
    pub upper: f64,
    /// 0 tracked, 1 below the threshold, 2 overflow.
    pub standing: u32,
}

/// One row of `top` (`lib/core.ts` `HeavyTalker`).
#[napi(object)]
pub struct HeavyTalker {
    pub key: Either3<String, Uint8Array, Either<f64, BigInt>>,
    pub lower: f64,
    pub upper: f64,
}

/// One interval's counters (`lib/core.ts` `HeavyStats`).
#[napi(object)]
pub struct HeavyStats {
    pub tracked: f64,
    pub capacity: f64,
    pub total: f64,
    pub overflow_events: f64,
    pub overflow_weight: f64,
    pub merge_dropped: f64,
}

#[napi]
impl HeavyHitters {
    /// Validated like `lib/heavy.ts` does; out-of-range values are a `RangeError`. With
    /// `hostClock` the summaries read the host's monotonic clock themselves and ignore every
    /// `nowMs` ([`CallerClock::host`]); with `wallOriginMs` (and no `hostClock`) each `nowMs` is a
    /// wall reading from that origin, NaN to read the wall clock here, and time is the readings'
    /// forward steps ([`CallerClock::with_wall_origin`]).
    #[allow(clippy::too_many_arguments)]
    #[napi(constructor, catch_unwind)]
    pub fn new(
        env: &Env,
        interval_ms: f64,
        hashes: f64,
        slots: f64,
        seed: BigInt,
        threshold: f64,
        capacity: f64,
        host_clock: Option<bool>,
        wall_origin_ms: Option<f64>,
    ) -> Result<Self> {
        (|| -> Outcome<Self> {
            let interval = args::integer(
                "The \"intervalMs\" argument",
                interval_ms,
                1,
                MAX_INTERVAL_MS,
            )?;
            let shape = args::shape(hashes, slots)?;
            let threshold =
                args::integer("The \"threshold\" argument", threshold, 1, MAX_THRESHOLD)?;
            let capacity = args::integer(
                "The \"capacity\" argument",
                capacity,
                1,
                MAX_CAPACITY as u64,
            )?;
            // Within MAX_CAPACITY = 2^24, which fits usize.
            let capacity = capacity as usize;
            let settings = Settings::new(shape, args::seed(&seed)?, threshold, capacity)
                .map_err(config_failure)?;
            let now = match (host_clock, wall_origin_ms) {
                (Some(true), _) => CallerClock::host(),
                (_, Some(origin)) => CallerClock::with_wall_origin(origin)?,
                _ => CallerClock::default(),
            };
            // The clock counts milliseconds, so the interval is given in them too.
            let windows =
                Windows::with_clock(settings, Duration::from_nanos(interval), now.clone())
                    .map_err(config_failure)?;
            let sketches = 2 * shape.hashes() * shape.slots() * size_of::<i64>();
            let bytes = sketches + 2 * capacity * ENTRY_BYTES;
            Ok(Self {
                inner: Held::new(
                    env,
                    &HEAVIES,
                    Inner {
                        windows,
                        now,
                        keys: Followed::new(),
                    },
                    bytes,
                )?,
            })
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Frees both summaries now (`lib/` refuses every later call). Idempotent.
    #[napi(catch_unwind)]
    pub fn close(&mut self, env: &Env) {
        self.release(env);
    }

    /// This object's handle for the fast paths ([`FAST_PATHS`]), valid while it lives.
    #[napi(getter)]
    pub fn handle(&self) -> f64 {
        self.inner.handle()
    }

    /// Counts `value` for `key`: its exact count if it is tracked after this, else `−1 − estimate`.
    #[napi(catch_unwind)]
    pub fn incr(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        value: f64,
        now_ms: f64,
    ) -> Result<f64> {
        self.with_key(env, key, value, now_ms, incr_result)
    }

    /// Takes back `value` counted for `key` in the current interval (`Summary::decr`).
    #[napi(catch_unwind)]
    pub fn decr(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        value: f64,
        now_ms: f64,
    ) -> Result<()> {
        self.with_key(env, key, value, now_ms, |windows, hash, key, value| {
            windows.decr_hash(hash, key, value);
        })
    }

    /// Milliseconds the current interval has run at `nowMs`, after starting the next one if it
    /// ended (then 0), as every call does.
    #[napi(catch_unwind)]
    pub fn interval_elapsed(&self, env: &Env, now_ms: f64) -> Result<f64> {
        (|| -> Outcome<f64> {
            let inner = self.inner.get()?;
            inner.now.set(now_ms)?;
            let elapsed = inner.windows.interval_elapsed();
            inner.follow_keys(env);
            // The clock counts milliseconds as the crate's nanoseconds; below the 2^52 ms interval.
            Ok(elapsed.as_nanos() as f64)
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// `key`'s bounds in `window` (0 current, 1 previous, 2 both).
    #[napi(catch_unwind)]
    pub fn count(
        &self,
        env: &Env,
        #[napi(ts_arg_type = "string | number | bigint | Uint8Array")] key: Unknown,
        window: u32,
        now_ms: f64,
    ) -> Result<HeavyCount> {
        self.with_key(env, key, 1.0, now_ms, |windows, hash, key, _| {
            count_of(windows.count_hash(hash, key, window_of(window)))
        })
    }

    /// The `n` tracked keys with the largest upper bounds in `window`.
    #[napi(catch_unwind)]
    pub fn top(&self, env: &Env, n: f64, window: u32, now_ms: f64) -> Result<Vec<HeavyTalker>> {
        (|| -> Outcome<Vec<HeavyTalker>> {
            let n = args::integer("The \"n\" argument", n, 0, MAX_CAPACITY as u64)? as usize;
            let inner = self.inner.get()?;
            inner.now.set(now_ms)?;
            let talkers = inner.windows.top(n, window_of(window));
            inner.follow_keys(env);
            talkers
                .into_iter()
                .map(|talker| {
                    Ok(HeavyTalker {
                        key: js_key(&talker.key)?,
                        lower: talker.count.lower as f64,
                        upper: talker.count.upper as f64,
                    })
                })
                .collect()
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// `window`'s counters (0 current, 1 previous).
    #[napi(catch_unwind)]
    pub fn stats(&self, env: &Env, window: u32, now_ms: f64) -> Result<HeavyStats> {
        self.with_summary(env, window, now_ms, |summary| Ok(stats_of(summary.stats())))
    }

    /// `window`'s summary in docs/format.md §6.
    #[napi(catch_unwind)]
    pub fn serialize(&self, env: &Env, window: u32, now_ms: f64) -> Result<Uint8Array> {
        self.with_summary(env, window, now_ms, |summary| {
            Ok(Uint8Array::from(summary.to_bytes()))
        })
    }

    /// Merges serialized summary `bytes` into `window`: `null` when merged, else why not (a
    /// `HeavyCorruptReason` of `lib/core.ts`, or `'mismatch'`).
    #[napi(catch_unwind, ts_return_type = "string | null")]
    pub fn absorb(
        &self,
        env: &Env,
        bytes: Uint8Array,
        window: u32,
        now_ms: f64,
    ) -> Result<Option<&'static str>> {
        self.with_summary(env, window, now_ms, |summary| {
            // A summary of other settings is refused from its header, before its entries are
            // decoded (docs/format.md §6).
            let other = match Summary::<Vec<u8>>::from_bytes_for(&bytes, summary.settings()) {
                Ok(other) => other,
                Err(ReadError::Mismatch(_)) => return Ok(Some("mismatch")),
                Err(ReadError::Corrupt(err)) => return Ok(Some(err.check())),
            };
            if !other.all_tracked(|key, _| Stored::decode(key).is_some()) {
                return Ok(Some("key"));
            }
            // JavaScript numbers hold counts exactly up to 2^53 − 1: the fallback could not keep
            // larger ones bit for bit, so neither backend takes them.
            let exact = |n: u64| n <= MAX_SAFE_COUNT;
            let stats = other.stats();
            if !other.all_tracked(|_, count| exact(count.lower) && exact(count.slack()))
                || ![
                    stats.overflow_events,
                    stats.overflow_weight,
                    stats.merge_dropped,
                ]
                .into_iter()
                .all(exact)
            {
                return Ok(Some("counts"));
            }
            Ok(summary.merge(&other).err().map(|_| "mismatch"))
        })
    }
}

impl HeavyHitters {
    /// Gives back both memory reports and frees the summaries: `close()` and the finalizer.
    /// Idempotent.
    fn release(&mut self, env: &Env) {
        if let Some(inner) = self.inner.get_open() {
            inner.keys.release(env);
        }
        self.inner.close(env);
    }

    /// Converts `key` and `value`, sets the clock, and calls `f` with the key's stored form and
    /// hash.
    fn with_key<R>(
        &self,
        env: &Env,
        key: Unknown,
        value: f64,
        now_ms: f64,
        f: impl FnOnce(&Windows<Vec<u8>, CallerClock>, KeyHash, &[u8], u32) -> R,
    ) -> Result<R> {
        (|| -> Outcome<R> {
            let value = value_argument(value)?;
            let inner = self.inner.get()?;
            inner.now.set(now_ms)?;
            // SAFETY: live handles of this call; the closure runs no JavaScript.
            let result = unsafe {
                keys::with_key(env.raw(), key.raw(), |k: Key<'_>| {
                    k.with_stored(|stored| {
                        f(
                            &inner.windows,
                            inner.windows.hash_key(stored),
                            stored,
                            value,
                        )
                    })
                })
            };
            inner.follow_keys(env);
            result
        })()
        .map_err(|failure| map_error(env, failure))
    }

    /// Sets the clock and calls `f` with `window`'s summary (0 current, else previous), then
    /// follows the keys' bytes (a rotation or a merge changes them).
    fn with_summary<R>(
        &self,
        env: &Env,
        window: u32,
        now_ms: f64,
        f: impl FnOnce(&Summary<Vec<u8>>) -> Outcome<R>,
    ) -> Result<R> {
        (|| -> Outcome<R> {
            let inner = self.inner.get()?;
            inner.now.set(now_ms)?;
            let result = f(if window == 0 {
                inner.windows.current()
            } else {
                inner.windows.previous()
            });
            inner.follow_keys(env);
            result
        })()
        .map_err(|failure| map_error(env, failure))
    }
}

/// `incr` as the core returns it: the exact count of a tracked key, else `−1 − estimate`.
fn incr_result(
    windows: &Windows<Vec<u8>, CallerClock>,
    hash: KeyHash,
    stored: &[u8],
    value: u32,
) -> f64 {
    count_result(windows.incr_hash(hash, stored, value))
}

/// A count as `incr` returns it: the exact count of a tracked key, else `−1 − estimate`.
fn count_result(count: Count) -> f64 {
    if count.standing == Standing::Tracked {
        count.lower as f64
    } else {
        -1.0 - count.upper as f64
    }
}

/// An increment: an integer in [1, 2^32 − 1] (the crate counts `u32` values).
fn value_argument(value: f64) -> Outcome<u32> {
    let value = args::integer("The \"value\" argument", value, 1, u64::from(u32::MAX))?;
    // At most u32::MAX.
    Ok(value as u32)
}

fn window_of(window: u32) -> Window {
    match window {
        0 => Window::Current,
        1 => Window::Previous,
        _ => Window::Both,
    }
}

fn count_of(count: Count) -> HeavyCount {
    HeavyCount {
        lower: count.lower as f64,
        upper: count.upper as f64,
        standing: match count.standing {
            Standing::Tracked => 0,
            Standing::BelowThreshold => 1,
            Standing::Overflow => 2,
        },
    }
}

fn stats_of(stats: Stats) -> HeavyStats {
    HeavyStats {
        tracked: stats.tracked as f64,
        capacity: stats.capacity as f64,
        total: stats.total as f64,
        overflow_events: stats.overflow_events as f64,
        overflow_weight: stats.overflow_weight as f64,
        merge_dropped: stats.merge_dropped as f64,
    }
}

/// A stored key as the JavaScript value it came from: integers as a `number` when safe.
fn js_key(stored: &[u8]) -> Outcome<Either3<String, Uint8Array, Either<f64, BigInt>>> {
    const MAX_SAFE: i64 = (1 << 53) - 1;
    Ok(match Stored::decode(stored) {
        Some(Stored::Str(s)) => Either3::A(s.to_owned()),
        Some(Stored::Bytes(b)) => Either3::B(Uint8Array::from(b.to_vec())),
        Some(Stored::Int(i)) if (-MAX_SAFE..=MAX_SAFE).contains(&i) => {
            Either3::C(Either::A(i as f64))
        }
        Some(Stored::Int(i)) => Either3::C(Either::B(BigInt::from(i))),
        // `absorb` refuses summaries with such keys, and `incr` writes none.
        None => {
            return Err(Failure::internal(
                "a heavy-hitter key is not in its stored form",
            ));
        }
    })
}

fn config_failure(err: ConfigError) -> Failure {
    Failure::out_of_range("The heavy-hitter configuration", &format!("valid: {err}"))
}

/// `incr` as raw functions taking the object's handle first, then the method's arguments
/// `(key, value, nowMs)`, returning and throwing what the method does (and a `TypeError` for a
/// handle that names no live object): per key type (`Str`, `Num`) or for any key (`Key`). Then
/// `incrInWindow` the same way: `incr` that also writes the milliseconds the current interval has
/// run (the crate's `incr_hash_in_interval`) to the thread's window scratch ([`crate::window`]), so
/// that `incrWindow` learns its reset time from the core's own clock reading.
pub(crate) const FAST_PATHS: [(&CStr, Callback); 6] = [
    (c"heavyIncrStr", incr_str),
    (c"heavyIncrNum", incr_num),
    (c"heavyIncrKey", incr_key),
    (c"heavyIncrInWindowStr", incr_in_window_str),
    (c"heavyIncrInWindowNum", incr_in_window_num),
    (c"heavyIncrInWindowKey", incr_in_window_key),
];

raw::per_key_type! {
    [incr_str, incr_num, incr_key],
    |env, read, [handle, key, value, now_ms]| {
        let inner = raw::resolve(env, handle, &HEAVIES)?;
        let value = raw::number(env, value, "The \"value\" argument")?;
        let value = value_argument(value)?;
        let now_ms = raw::number(env, now_ms, "The \"nowMs\" argument")?;
        inner.now.set(now_ms)?;
        let result = read(env, key, |k| {
            k.with_stored(|stored| {
                let hash = inner.windows.hash_key(stored);
                incr_result(&inner.windows, hash, stored, value)
            })
        })?;
        inner.follow_keys(&Env::from_raw(env));
        Ok(result)
    }
}

raw::per_key_type! {
    [incr_in_window_str, incr_in_window_num, incr_in_window_key],
    |env, read, [handle, key, value, now_ms]| {
        let inner = raw::resolve(env, handle, &HEAVIES)?;
        let value = raw::number(env, value, "The \"value\" argument")?;
        let value = value_argument(value)?;
        let now_ms = raw::number(env, now_ms, "The \"nowMs\" argument")?;
        inner.now.set(now_ms)?;
        let (count, elapsed) = read(env, key, |k| {
            k.with_stored(|stored| {
                let hash = inner.windows.hash_key(stored);
                inner.windows.incr_hash_in_interval(hash, stored, value)
            })
        })?;
        inner.follow_keys(&Env::from_raw(env));
        // Milliseconds below the 2^52 ms interval: exact in a double.
        window::write(env, elapsed as f64)?;
        Ok(count_result(count))
    }
}
