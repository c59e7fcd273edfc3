//! keepcount-limits: counting and limiting for services under load.
//!
//! Lock-free, constant-memory counting in the style of Cloudflare's pingora-limits, and
//! API-compatible with it: swap `pingora_limits::` for `keepcount_limits::` in the imports.
//!
//! - [`estimator::Estimator`]: a count-min sketch. How often has this key been seen?
//! - [`rate::Rate`]: events per second per key over a sliding pair of intervals.
//! - [`inflight::Inflight`]: how many operations per key are in progress, released on drop.
//! - [`heavy::HeavyHitters`]: which keys sent the most, counted exactly past a threshold.
//! - [`shared`]: sketches and rates in memory every process of a host maps.
//!
//! # Why this crate rather than pingora-limits
//! - **No panics** from any public API: invalid sizes are clamped (pingora-compatible
//!   constructors) or refused (`try_new`, `with_seed`, `with_clock`); sub-millisecond and zero
//!   `Rate` intervals work; counters saturate at the `i64` bounds instead of overflowing (see
//!   [`Estimator`](estimator::Estimator) for adds racing at a bound).
//! - **One stable, keyed hash, and independent rows** ([`hash`], [`Rows`]): rapidhash V3 keyed
//!   by a seed you may set, computed once per key; each row then takes its own column through a
//!   strongly universal function of the hash drawn from the seed, so the count-min error bound
//!   holds. Sketches with the same seed can be
//!   [merged](estimator::Estimator::merge) and [serialized](estimator::Estimator::to_bytes), and
//!   agree to the bit with the Node binding and its TypeScript fallback ([format spec]).
//! - **Sizing from error bounds**: [`Estimator::from_error_bounds`](estimator::Estimator::from_error_bounds).
//! - **Testable time**: everything time-based reads a [`clock::Clock`]; tests use
//!   [`clock::ManualClock`] instead of sleeping.
//! - **`Guard` releases everything it added**, including [`Guard::incr`](inflight::Guard::incr)
//!   (pingora's releases only the first increment), short of counts held at the `i64` bounds
//!   (see [`inflight`]).
//!
//! # Performance
//! `Estimator::incr` with a `u32` key, 20M events over 1M keys (`cargo bench -p keepcount-limits
//! --bench estimator`, AMD EPYC, 2 shared vCPUs, 2026-11-26): on the blog's 3 × 1024 shape
//! 11.9 ns/event against pingora-limits' 14.3 (0.83×; two threads 0.73×), on pingora `Inflight`'s
//! 4 × 8192 shape 20.1 ns against 28.9 (0.70×; two threads 0.68×); 9–20× faster than
//! `Mutex<HashMap>` or `DashMap` in 24–256 KiB instead of 38–53 MB for 1M keys. Full table in the
//! crate README.
//!
//! # When not to use it
//! For exact counts over a small known key set, a `HashMap` is simpler and exact. A sketch
//! over-counts when many heavy keys share its counters: size it for your key cardinality.
//!
//! # What is public, and why
//! - The modules pingora-limits has, at its paths, so its users change only the crate name:
//!   [`estimator`], [`rate`], [`inflight`].
//! - [`limiter`]: the token-bucket [`Limiter`](limiter::Limiter) and its small value types
//!   (`Quota`, `Limit`, `Decision`, `LimiterError`); its table, buckets and quota arena stay private.
//! - [`shared`]: opening, creating and removing segments shared between processes, and their
//!   errors; the mapping itself stays private.
//! - [`clock`]: the time sources you pass to `Rate::with_clock` and `Limiter::with_clock`.
//! - [`hash`]: the stable keyed key hash (`KeyHash`, `KeyHasher`), so a key hashed once can be
//!   used with every `*_hash` method, as the Node binding does, and checked against the format spec.
//! - At the root, the types the public signatures name: [`Shape`] and [`ShapeError`] (a sketch's
//!   validated size), [`DecodeError`] with the format's [`MAGIC`] and [`VERSION`] (what
//!   [`Estimator::from_bytes`](estimator::Estimator::from_bytes) refuses), [`Rows`] (the per-row
//!   functions [`Estimator::rows`](estimator::Estimator::rows) returns, to list a key's counters)
//!   and [`CounterStore`] (counters in memory you provide, for
//!   [`Estimator::with_store`](estimator::Estimator::with_store)).
//!
//! The modules that define those types (`codec`, `rows`, `shape`, `store`) are private: their
//! helpers and the serialization code are implementation, free to change without a major version.
//!
//! [format spec]: https://github.com/keepcount/keepcount/blob/main/docs/format.md

pub mod clock;
pub mod estimator;
pub mod hash;
pub mod heavy;
pub mod inflight;
pub mod limiter;
pub mod rate;
pub mod shared;

mod codec;
mod rotation;
mod rows;
mod shape;
mod store;

pub use codec::{DecodeError, MAGIC, VERSION};
pub use rows::Rows;
pub use shape::{MAX_COUNTERS, MAX_HASHES, Shape, ShapeError};
pub use store::CounterStore;
