//! Counters shared by every process of a host: sketches and rates in a memory-mapped file.
//!
//! Node services run as many processes (`node:cluster`, PM2, several containers on one host);
//! a limit counted per process admits N times too much. A shared segment is a file that every
//! process maps: a versioned header ([`layout`] below), then the counters, every access an atomic
//! operation. There is no lock, so no process can die holding one: a `SIGKILL` at any instant
//! leaves every counter and the header valid.
//!
//! - [`open_estimator`]: a count-min [`Estimator`] whose counters are in the segment.
//! - [`SharedRate`]: pingora's `Rate` with one interval for the whole host.
//! - [`SharedInflight`]: in-flight counts whose dead processes' shares are taken back.
//! - [`SharedLimiter`]: a token bucket per key, created on first sight, up to a fixed capacity.
//! - [`unlink`] removes a segment; [`SharedOptions`] says where files live and their mode.
//!
//! # Opening
//! Create-or-open is race-free however many processes start at once: the creator builds the file
//! under a temporary name and links it into place, so an opener sees either no file or a whole
//! one. An existing segment is checked (magic, format version, header checksum, length:
//! [`SharedError::Corrupt`]) and must have the kind, shape, seed and interval asked for
//! ([`SharedError::Mismatch`] names the first that differs). A segment left by an earlier run
//! is reused with its counts; [`unlink`] it first to start from zero.
//!
//! # Platforms
//! Unix-like systems (Linux, macOS). Elsewhere opening returns [`SharedError::Unsupported`].
//!
//! # When not to use it
//! Within one process a heap [`Estimator`] is as fast and needs no file. Across hosts, share
//! nothing: merge serialized sketches instead.
//!
//! # Layout
//! ```text
//! 0..64    immutable header: magic "KCSHARED", format version, kind, hashes, slots, seed,
//!          interval (ns), creation time (Unix ns), file length, CRC-32 of the above
//! 64..128  mutable words: a rate's interval word
//! 128..    i64 counters, row-major, one sketch (estimator), two (rate), or 1 + process slots
//!          (in-flight), then the in-flight slot table; or a limiter's quotas, best-effort
//!          bucket and key table
//! ```
//!
//! [`Estimator`]: crate::estimator::Estimator
//! [`layout`]: self#layout

mod error;
mod inflight;
mod layout;
mod limiter;
mod rate;
mod segment;

pub use error::{CorruptReason, SharedError};
pub use inflight::{MAX_PROCESSES, RECLAIM_INTERVAL, SharedInflight};
pub use limiter::{MAX_CAPACITY, SharedLimiter, SharedLimiterStats};
pub use rate::SharedRate;
pub use segment::{Counters, DEFAULT_MODE, MAX_NAME_BYTES, SharedOptions, unlink};

use crate::estimator::Estimator;
use crate::shape::Shape;
use layout::{Kind, Layout};
use segment::Segment;
use std::sync::Arc;

/// Opens (or creates) the shared sketch `name` of `shape` keyed by `seed`.
///
/// ```
/// use keepcount_limits::shared::{open_estimator, unlink, SharedOptions};
/// use keepcount_limits::Shape;
///
/// let options = SharedOptions::new().dir(std::env::temp_dir());
/// # unlink("doc-hits", &options).unwrap();
/// let shape = Shape::new(4, 1024).unwrap();
/// let a = open_estimator("doc-hits", shape, 42, &options).unwrap();
/// let b = open_estimator("doc-hits", shape, 42, &options).unwrap(); // another process, say
/// a.incr("1.2.3.4", 2);
/// assert_eq!(b.incr("1.2.3.4", 1), 3);
/// let err = open_estimator("doc-hits", shape, 43, &options).unwrap_err();
/// assert!(err.to_string().contains("seed 42, not 43"));
/// unlink("doc-hits", &options).unwrap();
/// ```
///
/// # Performance
/// The same operations as a heap sketch on the same counters; only the memory is shared (a
/// contended counter's cache line moves between the cores of the processes that use it).
pub fn open_estimator(
    name: &str,
    shape: Shape,
    seed: u64,
    options: &SharedOptions,
) -> Result<Estimator<Counters>, SharedError> {
    let layout = Layout {
        kind: Kind::Estimator,
        shape,
        seed,
        interval_nanos: 0,
        processes: 0,
        limiter: None,
    };
    let segment = Arc::new(Segment::open(name, layout, options, &|_| {})?);
    Ok(Estimator::with_store(
        Counters::new(segment, 0),
        shape,
        seed,
    )?)
}
