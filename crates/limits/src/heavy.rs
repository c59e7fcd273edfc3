//! Heavy hitters: which keys sent the most, with exact counts for them, in bounded memory.
//!
//! A count-min sketch cannot list its keys, and under a flood of distinct keys it over-counts
//! everyone: tried as an attacker would, 2,048 addresses × 6 requests filled a 4 × 1024 sketch so
//! that about half of 300 fresh clients read over a limit of 5 on their first request. This
//! module puts the sketch in front of a bounded exact table, the "first-stage filter" design of
//! Cloudflare's pingora blog post and of Cormode and Muthukrishnan's heavy-hitter use of the
//! sketch: every increment goes to the sketch; a key whose estimate reaches `threshold` enters
//! the table, which counts it exactly from then on and keeps the key so that
//! [`top`](Summary::top) can list it.
//!
//! - [`Summary`]: one interval's sketch and table; mergeable and serializable.
//! - [`HeavyHitters`]: a current and a previous [`Summary`] that rotate like
//!   [`Rate`](crate::rate::Rate)'s sketches, so "the top talkers of the last minute" is
//!   `heavy.top(n, Window::Previous)` with a one-minute interval.
//!
//! # Guarantees
//! For one interval, with `f(k)` the true count of key `k` (the sum of its increments, all
//! non-negative), `N = Σ f(k)`, `T` the threshold, `C` the capacity, a sketch of `d` rows × `w`
//! columns, `ε = e / w` and `δ = e^-d`; every statement holds at any moment no increment is in
//! flight (see *Thread safety* for concurrent ones):
//!
//! 1. **The sketch never under-counts** (Cormode & Muthukrishnan, "An improved data stream
//!    summary: the count-min sketch and its applications", J. Algorithms 55(1), 2005, Thm. 1):
//!    `f(k) ≤ est(k)`, and `est(k) ≤ f(k) + εN` with probability at least `1 − δ`.
//! 2. **Bounds**: [`count`](Summary::count) returns `lower ≤ f(k) ≤ upper` for every key.
//!    - A tracked key: `lower` is every increment since it entered, counted exactly; `upper` adds
//!      the slack, a bound on its count before its entering increment: its sketch estimate
//!      then, capped at `T − 1`. The cap is sound because the key's previous increment, if any,
//!      read an estimate below `T` (else it would have entered then: the table had room, since
//!      it has now and never shrinks within an interval), so its true count before entering was
//!      below `T` even when other keys have since raised its estimate. **The slack is at most
//!      `T − 1`**, except after a merge, which adds counts that never passed through the entry
//!      rule (see *Merging*).
//!    - Any other key: `lower = 0`, `upper = est(k)`, or `T − 1` when the estimate reached `T`
//!      while the table has room: by the same argument every increment of the key read an
//!      estimate below `T`, so other keys raised it since. Only a full table (or a merge) leaves
//!      an untracked key with `upper ≥ T`, so a flood of other keys cannot make a key it never
//!      saw read over a limit above `T − 1` while the table has room.
//! 3. **No false heavy hitter, no missed one**: a key is tracked only if its estimate reached
//!    `T`; a key whose true count reached `T` is tracked unless the table was full when it
//!    crossed (then it is [`Standing::Overflow`], and the increment is counted in
//!    [`Stats::overflow_events`]). As in Cormode & Muthukrishnan §5.1 (ϕ-heavy hitters), a key
//!    with `f(k) < T − εN` enters with probability at most `δ`.
//! 4. **Memory** is the sketch (`8·d·w` bytes) plus at most `C` entries (key hash, key, exact
//!    count, slack: 32 bytes for a `u64` key, plus hashbrown's control byte and load factor),
//!    plus whatever the keys own on the heap ([`Summary::key_bytes`], a running total); see
//!    [`Summary::memory_bytes`].
//!
//! Compared with the classic counter-based summaries: Misra–Gries with `C` counters (Misra &
//! Gries, "Finding repeated elements", 1982) bounds the error of every count by `N / (C + 1)`,
//! and Space-Saving (Metwally, Agrawal & El Abbadi, "Efficient computation of frequent and top-k
//! elements in data streams", ICDT 2005) by `N / C`; both errors grow with the stream. Here a
//! tracked key's error is at most `T − 1` however long the interval, in exchange for the sketch's
//! memory and for the capacity rule below.
//!
//! # When more keys cross the threshold than the table holds
//! The table holds the **first `C` keys to cross** in the interval and never evicts one before
//! the interval ends. A later key that crosses finds no room: its increments stay in the sketch,
//! its [`Count`] says [`Standing::Overflow`] with the sketch estimate as upper bound and 0 as
//! lower bound, and each such increment is counted in [`Stats::overflow_events`] and
//! [`Stats::overflow_weight`].
//!
//! Why not Space-Saving's replacement of the smallest entry (carrying its count over as the
//! newcomer's error)? For a rate limit the table is what says "this client certainly sent
//! `lower` requests". With eviction, a flood of fresh keys crossing the threshold would evict the
//! tracked flooders and reset what is certain about them, so they would be admitted again;
//! with refusal a tracked key stays exactly counted for the whole interval, and the shortage is
//! visible. A rule that refuses a client only when `lower ≥ limit`, with `T ≤ limit`, therefore:
//! - never refuses a client that sent fewer than `limit` (its `lower` never exceeds its true
//!   count), whatever the table's state;
//! - refuses a client tracked in the table once it sent `limit`, admitting at most `T − 1` more
//!   than `limit` in the interval (the slack);
//! - cannot refuse an over-limit client in overflow: it has no lower bound, so the caller must
//!   choose a policy for [`Standing::Overflow`] (the sketch estimate, which may refuse
//!   innocents, or a shared budget for all overflow keys) and watch the overflow counters.
//!
//! Size `C` to hold every key that crosses: at most `N / (T − εN)` keys have a true count of
//! `T − εN` or more, plus the keys whose estimate a collision inflates (each with probability at
//! most `δ` by guarantee 1). Under a flood of distinct keys that saturates the sketch, every key
//! reads over `T` and enters on its first increment: the table then has to hold the flood.
//!
//! # Merging
//! Two summaries with the same shape, seed and threshold merge ([`Summary::merge`]); in the sense
//! of Agarwal et al. ("Mergeable summaries", PODS 2012) the result bounds every count of the
//! union of the two streams:
//! - the sketches add element-wise: the result is exactly the sketch of both streams, so
//!   guarantee 1 holds with `N = N_a + N_b`;
//! - a key tracked in both: exact parts add (`lower_a + lower_b`), slacks add;
//! - a key tracked in one only: its exact part stays, and the other stream's sketch estimate of
//!   it (an upper bound on its count there, below `T` unless it overflowed there) joins its slack;
//! - the union keeps the `C` entries with the largest upper bounds (ties: larger lower bound,
//!   then smaller key hash); the others become sketch-only (their estimates stay upper bounds)
//!   and are counted in [`Stats::merge_dropped`]; overflow counters add.
//!
//! Every merged entry's key has an estimate of at least `T` in the merged sketch, so the rule
//! that keys below the threshold are never looked up in the table stays sound. A merged
//! summary no longer caps an entering key's slack at `T − 1` (a key below `T` on each side can
//! be over it in the union without ever having been incremented here): its slack is then its
//! whole estimate before entering, until the next reset. A key tracked in neither side but over
//! `T` in the union is not tracked by the merge (the sketch cannot name it); it enters on its
//! next increment if there is room.
//!
//! # Thread safety
//! The sketch is lock-free. An increment whose estimate is below the threshold — every key of a
//! normal client — touches only the sketch. A tracked key's increment takes the table's
//! `parking_lot::RwLock` **shared** and adds to an atomic counter; a key entering takes it
//! exclusively once; [`top`](Summary::top) and [`count`](Summary::count) take it shared; merges
//! and interval changes exclusively. `lower` is always a count of increments that happened.
//! `upper` has one race: increments of a key that other threads make *concurrently* with its
//! entering increment or its last one before (at most one per other thread, in flight at that
//! instant) may be missing from its slack, which assumes each of them read its own estimate in
//! full; the sketch estimate still bounds them, and the stress test in `tests/heavy.rs` checks
//! `count ≤ upper + threads − 1`.
//!
//! A [`HeavyHitters`] rotating after an idle spell takes out of both summaries what they held
//! when it claimed the rotation, rather than clearing them, so increments other threads make
//! meanwhile are not lost (`tests/idle_rotation.rs` counts every one): each sketch subtracts
//! its copy counter by counter, and each table empties, since an entry cannot tell its stale
//! count from its new one. When increments raced into a table (a key counted or entered there,
//! or overflowed), their exact counts go with it while its sketch keeps them, so that summary
//! stops capping entering keys' slack at `T − 1` until its next reset, as after a merge.
//!
//! # Performance
//! Single-threaded, `u64` keys, 4 × 4096 sketch, threshold 128, 1,024 entries, 2·10^6 events
//! (`cargo bench -p keepcount-limits --bench heavy`, AMD EPYC, 2 shared vCPUs, 2026-11-23),
//! ns per update and the ratio to `Estimator::incr` on the same sketch:
//!
//! | stream                  | `Estimator::incr` | [`Summary::incr`] | [`HeavyHitters::incr`] | `HashMap` |
//! |-------------------------|------------------:|------------------:|-----------------------:|----------:|
//! | Zipf(1.1), 10^5 keys    | 43.9              | 85.8 (1.95×)      | 155.0 (3.53×)          | 91.8      |
//! | uniform, 10^6 keys      | 48.7              | 85.3 (1.75×)      | 151.6 (3.11×)          | 314.7     |
//!
//! On Zipf(1.1) most events belong to tracked keys, which take the table's shared lock; the
//! uniform stream saturates the sketch, so most events take the overflow path (a shared lock
//! and a miss). Below the threshold an update is the sketch's own cost. The windowed
//! [`HeavyHitters`] adds a clock read and the interval check per update, as
//! [`Rate`](crate::rate::Rate) does. Memory after the Zipf stream: 200,320 bytes, against
//! 38–53 MB for exact maps over 10^6 keys (crate README).
//!
//! # Serialization
//! [`Summary<Vec<u8>>`](Summary) encodes to the format of docs/format.md §6 ([`codec`]): the
//! sketch in format version 3 (§5), the table's entries and a CRC-32.
//!
//! # When not to use it
//! When the set of keys is small and known, a `HashMap` is exact and simpler. When you only need
//! "is this key over a limit" and occasional false positives are acceptable, a plain
//! [`Estimator`](crate::estimator::Estimator) is cheaper.

pub mod codec;
mod count;
mod heap_bytes;
mod settings;
mod summary;
mod table;
mod window;

pub use count::{Count, Standing, Talker};
pub use heap_bytes::HeapBytes;
pub use settings::{ConfigError, MAX_CAPACITY, Settings};
pub use summary::{MergeError, Stats, Summary};
pub use window::{HeavyHitters, Window};
