//! Counters shared by every process of a host: sketches and rates in a memory-mapped file.
//!
//! Node services run as many processes (`node:cluster`, PM2, several containers on one host);
//! a limit counted per process admits N times too much. A shared segment is a file that every
//! process maps: a versioned header ([`layout`] below), then the counters, every access an atomic
//! operation. No process waits for a lock, so none can die holding one that others wait for: a
//! `SIGKILL` at any instant leaves every counter and the header valid. (On Linux the holders of a
//! [`SharedInflight`]'s slots lock a byte of its file each, which only tells the others they are
//! alive: nobody waits for such a lock, and the system drops it with its process.)
//!
//! - [`open_estimator`]: a count-min [`Estimator`] whose counters are in the segment.
//! - [`SharedRate`]: pingora's `Rate` with one interval for the whole host.
//! - [`SharedInflight`]: in-flight counts whose dead processes' shares are taken back.
//! - [`SharedLimiter`]: a token bucket per key, created on first sight, up to a fixed capacity.
//! - [`unlink`] removes a segment; [`SharedOptions`] says where files live and their mode.
//! - [`lend_estimator`] and [`SharedRate::lend`]: the same layout in memory the caller lends
//!   instead of a file, such as a JavaScript `SharedArrayBuffer` shared by worker threads.
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
//! 64..128  mutable words: a rate's interval word, a limiter's counts, an in-flight segment's
//!          reclaim turn
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
#[cfg(test)]
mod scratch;
mod segment;

pub use error::{CorruptReason, SharedError};
pub use inflight::{
    MAX_PROCESSES, RECLAIM_INTERVAL, SETTLE_ATTEMPTS, SharedInflight, TURN_TIMEOUT,
};
pub use limiter::{MAX_CAPACITY, SharedLimiter, SharedLimiterStats};
pub use rate::SharedRate;
pub use segment::{Counters, DEFAULT_MODE, MAX_NAME_BYTES, SharedOptions, unlink};

/// How far a time stored in shared memory may run ahead of a reading before it is taken for
/// another clock's (a segment kept from another boot, whose monotonic clock had run longer)
/// rather than for a reading taken a moment before another process or thread stored it: a
/// second, far beyond that moment unless the reader was stopped in between.
pub(crate) const OTHER_CLOCK_NANOS: u64 = 1_000_000_000;

/// Bytes of lent memory that holds a sketch of `shape` ([`lend_estimator`]), or a rate's two
/// (`rate` true, [`SharedRate::lend`]): the 128-byte header, then 8 bytes per counter.
///
/// ```
/// use keepcount_limits::{shared::lent_bytes, Shape};
/// assert_eq!(lent_bytes(Shape::new(4, 1024).unwrap(), false), 128 + 4 * 1024 * 8);
/// ```
pub fn lent_bytes(shape: Shape, rate: bool) -> usize {
    Layout {
        kind: if rate { Kind::Rate } else { Kind::Estimator },
        shape,
        seed: 0,
        interval_nanos: u64::from(rate),
        processes: 0,
        limiter: None,
    }
    .total_bytes()
}

use crate::estimator::Estimator;
use crate::shape::Shape;
use layout::{Kind, Layout};
use segment::Segment;
use std::ptr::NonNull;
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
/// assert!(err.to_string().contains("another seed")); // never the seeds: they are secret
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

/// A sketch of `shape` keyed by `seed` over `len` bytes at `start` that the caller lends, laid
/// out as a segment file (see [Layout](self#layout)) whose header someone already wrote: the
/// header is validated (magic, version, checksum, `len` equal to [`lent_bytes`]) and must name an
/// estimator of this shape and seed ([`SharedError::Mismatch`] otherwise). Errors name the memory
/// `<shared buffer>`. The Node binding lends a `SharedArrayBuffer` this way, so worker threads
/// share counters without copying them.
///
/// # Safety
/// `start` must be aligned to 8 bytes and valid for reads and writes of `len` bytes for as long
/// as the returned sketch lives, and every other access to those bytes meanwhile must be atomic
/// (another sketch lent the same memory, JavaScript `Atomics`).
///
/// # Performance
/// As a heap sketch: the same atomic operations on the same number of counters.
pub unsafe fn lend_estimator(
    start: NonNull<u8>,
    len: usize,
    shape: Shape,
    seed: u64,
) -> Result<Estimator<Counters>, SharedError> {
    let layout = Layout {
        kind: Kind::Estimator,
        shape,
        seed,
        interval_nanos: 0,
        processes: 0,
        limiter: None,
    };
    // SAFETY: the caller's contract is Segment::lent's.
    let segment = Arc::new(unsafe { Segment::lent(start, len, layout) }?);
    Ok(Estimator::with_store(
        Counters::new(segment, 0),
        shape,
        seed,
    )?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use layout::HEADER_BYTES;
    use std::time::Duration;

    /// Zeroed, 8-byte-aligned memory of `bytes` (a multiple of 8) with `layout`'s header written,
    /// as `lib/shared-buffer.ts` writes it into a `SharedArrayBuffer`.
    fn buffer(layout: Layout) -> Vec<u64> {
        let mut words = vec![0u64; layout.total_bytes() / 8];
        for (word, chunk) in words.iter_mut().zip(layout.encode(1).chunks_exact(8)) {
            *word = u64::from_ne_bytes(chunk.try_into().unwrap());
        }
        words
    }

    fn start(words: &mut [u64]) -> NonNull<u8> {
        NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap()
    }

    fn estimator_layout(seed: u64) -> Layout {
        Layout {
            kind: Kind::Estimator,
            shape: Shape::new(2, 64).unwrap(),
            seed,
            interval_nanos: 0,
            processes: 0,
            limiter: None,
        }
    }

    #[test]
    fn sketches_lent_the_same_memory_count_together_across_threads() {
        let layout = estimator_layout(7);
        let mut words = buffer(layout);
        let len = words.len() * 8;
        let at = start(&mut words);
        // SAFETY: `words` outlives both sketches (dropped at the end of the scope, after them)
        // and is touched only through them.
        let (a, b) = unsafe {
            (
                lend_estimator(at, len, layout.shape, 7).unwrap(),
                lend_estimator(at, len, layout.shape, 7).unwrap(),
            )
        };
        std::thread::scope(|s| {
            for sketch in [&a, &b, &a, &b] {
                s.spawn(move || {
                    for _ in 0..10_000 {
                        sketch.incr("hot", 1);
                    }
                });
            }
        });
        assert_eq!((a.get("hot"), b.get("hot")), (40_000, 40_000));
        assert_eq!(lent_bytes(layout.shape, false), len);
    }

    #[test]
    fn lent_memory_of_another_seed_or_length_is_refused() {
        let layout = estimator_layout(7);
        let mut words = buffer(layout);
        let len = words.len() * 8;
        let at = start(&mut words);
        // SAFETY: as above; every call fails before keeping the pointer.
        let mismatch = unsafe { lend_estimator(at, len, layout.shape, 8) }.unwrap_err();
        assert_eq!(
            mismatch.to_string(),
            "<shared buffer> was created with another seed than the one requested (seeds are secret: neither is shown)"
        );
        let short = unsafe { lend_estimator(at, len - 8, layout.shape, 7) }.unwrap_err();
        assert!(matches!(
            short,
            SharedError::Corrupt {
                reason: CorruptReason::Length,
                ..
            }
        ));
        let tiny = unsafe { lend_estimator(at, HEADER_BYTES - 8, layout.shape, 7) }.unwrap_err();
        assert!(matches!(
            tiny,
            SharedError::Corrupt {
                reason: CorruptReason::Short,
                ..
            }
        ));
        words[3] ^= 1;
        let at = start(&mut words);
        let damaged = unsafe { lend_estimator(at, len, layout.shape, 7) }.unwrap_err();
        assert!(matches!(
            damaged,
            SharedError::Corrupt {
                reason: CorruptReason::Checksum,
                ..
            }
        ));
    }

    #[test]
    fn rates_lent_the_same_memory_rotate_once_for_both() {
        let interval = Duration::from_secs(1);
        let layout = Layout {
            kind: Kind::Rate,
            shape: Shape::new(2, 64).unwrap(),
            seed: 3,
            interval_nanos: 1_000_000_000,
            processes: 0,
            limiter: None,
        };
        let mut words = buffer(layout);
        let len = words.len() * 8;
        let at = start(&mut words);
        let clock = ManualClock::new();
        // SAFETY: as above.
        let (a, b) = unsafe {
            (
                SharedRate::lend(at, len, interval, layout.shape, 3, &clock).unwrap(),
                SharedRate::lend(at, len, interval, layout.shape, 3, &clock).unwrap(),
            )
        };
        a.observe(&"k", 2);
        b.observe(&"k", 3);
        clock.advance(interval);
        // One rotation: whichever notices first ends the interval for both.
        assert_eq!((a.rate(&"k"), b.rate(&"k")), (5.0, 5.0));
        b.observe(&"k", 1);
        clock.advance(interval);
        assert_eq!((b.rate(&"k"), a.rate(&"k")), (1.0, 1.0));
    }
}
