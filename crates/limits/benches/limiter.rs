//! `Limiter::check` against governor's keyed limiter and a naive `Mutex<HashMap>` baseline:
//! one hot key and 1,000,000 configured keys drawn uniformly, on 1 and 2 threads, plus the
//! memory each holds per key.
//!
//! Run: `cargo bench -p keepcount-limits --bench limiter` (about a minute). Every contender is
//! given a quota large enough to admit every check, and the bench verifies they all admitted the
//! same number before printing, so the figures time the same work. Two-thread figures are
//! wall-clock time divided by the checks of both threads (throughput, not latency).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::time::Instant;

use keepcount_limits::limiter::{Limit, Limiter, Quota};

/// Distinct keys configured in the many-keys scenario.
const KEYS: usize = 1_000_000;
/// Checks per thread per timed run: ~0.1-0.5 s per run at 50-250 ns a check.
const CHECKS: usize = 2_000_000;
/// Timed runs per contender and scenario, interleaved; the median is reported.
const RUNS: usize = 3;
/// Per-second rate and burst big enough that no contender ever refuses during a run.
const GENEROUS: u32 = 2_000_000_000;

/// Counts live heap bytes so that the per-key memory of each structure can be read off.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to `System` unchanged; only adds bookkeeping.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // Relaxed: a statistic read only while no other thread allocates.
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Something that admits or refuses one request for a key.
trait Contender: Sync {
    fn check(&self, key: u64) -> bool;
}

impl Contender for Limiter<u64> {
    fn check(&self, key: u64) -> bool {
        self.check_one(&key).is_allowed()
    }
}

type Governor = governor::DefaultKeyedRateLimiter<u64>;

impl Contender for Governor {
    fn check(&self, key: u64) -> bool {
        self.check_key(&key).is_ok()
    }
}

/// The obvious implementation: one global lock over a std map of (tokens, last refill).
struct Naive {
    start: Instant,
    buckets: Mutex<HashMap<u64, (u64, u64)>>,
}

impl Naive {
    fn new() -> Self {
        Self {
            start: Instant::now(),
            buckets: Mutex::new(HashMap::new()),
        }
    }
}

impl Contender for Naive {
    fn check(&self, key: u64) -> bool {
        let now = self.start.elapsed().as_nanos() as u64;
        let mut buckets = self.buckets.lock().unwrap();
        let (tokens, last) = buckets.entry(key).or_insert((u64::from(GENEROUS), now));
        let refill = now.saturating_sub(*last) * u64::from(GENEROUS) / 1_000_000_000;
        *tokens = (*tokens + refill).min(u64::from(GENEROUS));
        *last = now.max(*last);
        let allowed = *tokens > 0;
        *tokens -= u64::from(allowed);
        allowed
    }
}

/// splitmix64: well-spread keys and a uniform access sequence without a dependency.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn generous_quota() -> Quota {
    let limit = Limit::per_second(u64::from(GENEROUS), u64::from(GENEROUS));
    Quota::new(Some(limit), None)
}

fn governor() -> Governor {
    let rate = NonZeroU32::new(GENEROUS).expect("non-zero");
    governor::RateLimiter::keyed(governor::Quota::per_second(rate).allow_burst(rate))
}

/// Runs each thread's share of `accesses` through `contender`; returns (ns per check, admitted).
fn time(contender: &dyn Contender, accesses: &[u64], threads: usize) -> (f64, usize) {
    let barrier = Barrier::new(threads);
    let start = Instant::now();
    let admitted: usize = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let barrier = &barrier;
                // Each thread walks the sequence from its own offset.
                let offset = t * accesses.len() / threads;
                scope.spawn(move || {
                    barrier.wait();
                    let mut admitted = 0;
                    for i in 0..CHECKS {
                        let key = accesses[(offset + i) % accesses.len()];
                        admitted += usize::from(contender.check(black_box(key)));
                    }
                    admitted
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("worker")).sum()
    });
    let nanos = start.elapsed().as_nanos() as f64;
    (nanos / (threads * CHECKS) as f64, admitted)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Times every contender on `accesses`, interleaved, and prints one row per thread count.
fn scenario(name: &str, contenders: &[(&str, &dyn Contender)], accesses: &[u64]) {
    for threads in [1, 2] {
        let mut samples = vec![Vec::new(); contenders.len()];
        let mut admitted = vec![0; contenders.len()];
        for _ in 0..RUNS {
            for (i, (_, contender)) in contenders.iter().enumerate() {
                let (ns, ok) = time(*contender, accesses, threads);
                samples[i].push(ns);
                admitted[i] = ok;
            }
        }
        assert!(
            admitted.iter().all(|&a| a == threads * CHECKS),
            "contenders disagree: {admitted:?}"
        );
        let medians: Vec<f64> = samples.into_iter().map(median).collect();
        let ours = medians[0];
        let mut row = format!("| {name:<22} | {threads} |");
        for (ns, _) in medians.iter().zip(contenders) {
            row += &format!(" {ns:>7.1} | {:>5.2}x |", ns / ours);
        }
        println!("{row}");
    }
}

/// Live heap bytes `build` leaves behind, per key.
fn bytes_per_key<T>(build: impl FnOnce() -> T) -> (T, f64) {
    let before = LIVE.load(Ordering::Relaxed);
    let built = build();
    let after = LIVE.load(Ordering::Relaxed);
    (built, after.saturating_sub(before) as f64 / KEYS as f64)
}

fn main() {
    let mut seed = 0x5eed;
    let keys: Vec<u64> = (0..KEYS).map(|_| splitmix(&mut seed)).collect();
    let uniform: Vec<u64> = (0..2 * CHECKS)
        .map(|_| keys[(splitmix(&mut seed) % KEYS as u64) as usize])
        .collect();
    let hot = vec![keys[0]];

    let (ours, ours_bytes) = bytes_per_key(|| {
        let limiter = Limiter::new(generous_quota());
        limiter
            .replace_keys(keys.iter().map(|&k| (k, generous_quota())))
            .expect("distinct keys");
        limiter
    });
    let (theirs, governor_bytes) = bytes_per_key(|| {
        let limiter = governor();
        for &key in &keys {
            assert!(limiter.check_key(&key).is_ok());
        }
        limiter
    });
    let (naive, naive_bytes) = bytes_per_key(|| {
        let naive = Naive::new();
        for &key in &keys {
            assert!(naive.check(key));
        }
        naive
    });

    println!(
        "| scenario               | threads | keepcount ns/op | (ratio) | governor ns/op | ratio | naive ns/op | ratio |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let contenders: [(&str, &dyn Contender); 3] = [
        ("keepcount", &ours),
        ("governor", &theirs),
        ("naive", &naive),
    ];
    scenario("one hot key", &contenders, &hot);
    scenario("1M keys, uniform", &contenders, &uniform);
    println!();
    println!("| memory for 1M keys | keepcount | governor | naive |");
    println!("|---|---|---|---|");
    println!("| bytes/key | {ours_bytes:.0} | {governor_bytes:.0} | {naive_bytes:.0} |");
}
