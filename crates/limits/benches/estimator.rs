//! pingora's blog benchmark, reproduced in one run: count events over 1,000,000 uniformly drawn
//! `u32` keys with keepcount's `Estimator`, pingora-limits' `Estimator`, `Mutex<HashMap>` and
//! `DashMap`, single-threaded and multi-threaded; then, in a separate pass so it does not distort
//! the timings, the memory each contender allocates.
//!
//! ```text
//! cargo bench -p keepcount-limits --bench estimator
//! KEEPCOUNT_BENCH_EVENTS=100000000 KEEPCOUNT_BENCH_THREADS=8 cargo bench -p keepcount-limits --bench estimator
//! KEEPCOUNT_BENCH_SHAPES=3x1024 cargo bench -p keepcount-limits --bench estimator
//! ```
//!
//! The estimators run on two shapes, one after the other (`KEEPCOUNT_BENCH_SHAPES`, rows × slots):
//! - 3 × 1024 (24 KiB of counters, in L1): the shape of pingora's blog benchmark (its memory table
//!   reports 26,184 bytes peak), where the hash is the whole cost;
//! - 4 × 8192 (256 KiB, in L2): pingora `Inflight`'s shape, where memory hides part of the hash.
//!
//! The key stream is generated before timing (no RNG cost measured); each timing is the median
//! of `KEEPCOUNT_BENCH_ROUNDS` interleaved rounds.

use dashmap::DashMap;
use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Distinct keys, as in pingora's blog post.
const KEYS: u64 = 1_000_000;
/// Default events: enough for every key to be seen ~20 times, small enough that the whole run
/// takes about a minute on a shared 2-core machine.
const DEFAULT_EVENTS: usize = 20_000_000;
const DEFAULT_THREADS: usize = 2;
const DEFAULT_ROUNDS: usize = 3;
/// pingora's blog shape, then pingora `Inflight`'s.
const DEFAULT_SHAPES: &str = "3x1024,4x8192";

// ---------------------------------------------------------------------------------------------
// Allocation counting: a thin wrapper over the system allocator.

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);
static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            record_alloc(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // Relaxed: statistics only, read after the measured code on the same thread.
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            // Relaxed: statistics only.
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
            record_alloc(new_size);
        }
        new
    }
}

fn record_alloc(size: usize) {
    // Relaxed: statistics only.
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED.fetch_add(size, Ordering::Relaxed);
    let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static GLOBAL: Counting = Counting;

struct MemoryUse {
    peak: usize,
    allocations: usize,
    allocated: usize,
}

/// Memory allocated by `f` beyond what was live before it.
fn measure_memory(f: impl FnOnce()) -> MemoryUse {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let allocations = ALLOCATIONS.load(Ordering::Relaxed);
    let allocated = ALLOCATED.load(Ordering::Relaxed);
    f();
    MemoryUse {
        peak: PEAK.load(Ordering::Relaxed) - base,
        allocations: ALLOCATIONS.load(Ordering::Relaxed) - allocations,
        allocated: ALLOCATED.load(Ordering::Relaxed) - allocated,
    }
}

// ---------------------------------------------------------------------------------------------
// Contenders.

trait Counter: Send + Sync {
    fn create(shape: Shape) -> Self;
    fn incr(&self, key: u32);
    fn count(&self, key: u32) -> usize;
}

struct Keepcount(keepcount_limits::estimator::Estimator);
impl Counter for Keepcount {
    fn create(shape: Shape) -> Self {
        Self(keepcount_limits::estimator::Estimator::new(
            shape.hashes,
            shape.slots,
        ))
    }
    #[inline]
    fn incr(&self, key: u32) {
        black_box(self.0.incr(key, 1));
    }
    fn count(&self, key: u32) -> usize {
        self.0.get(key) as usize
    }
}

struct Pingora(pingora_limits::estimator::Estimator);
impl Counter for Pingora {
    fn create(shape: Shape) -> Self {
        Self(pingora_limits::estimator::Estimator::new(
            shape.hashes,
            shape.slots,
        ))
    }
    #[inline]
    fn incr(&self, key: u32) {
        black_box(self.0.incr(key, 1));
    }
    fn count(&self, key: u32) -> usize {
        self.0.get(key) as usize
    }
}

struct Naive(Mutex<HashMap<u32, usize>>);
impl Counter for Naive {
    fn create(_: Shape) -> Self {
        Self(Mutex::default())
    }
    #[inline]
    fn incr(&self, key: u32) {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(key).or_insert(0) += 1;
    }
    fn count(&self, key: u32) -> usize {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(&key).copied().unwrap_or(0)
    }
}

struct Dash(DashMap<u32, AtomicUsize>);
impl Counter for Dash {
    fn create(_: Shape) -> Self {
        Self(DashMap::new())
    }
    #[inline]
    fn incr(&self, key: u32) {
        if let Some(count) = self.0.get(&key) {
            // Relaxed: an independent counter.
            count.fetch_add(1, Ordering::Relaxed);
            return;
        }
        // Relaxed: an independent counter.
        self.0
            .entry(key)
            .or_insert_with(|| AtomicUsize::new(0))
            .fetch_add(1, Ordering::Relaxed);
    }
    fn count(&self, key: u32) -> usize {
        // Relaxed: read after all writers joined.
        self.0.get(&key).map_or(0, |c| c.load(Ordering::Relaxed))
    }
}

// ---------------------------------------------------------------------------------------------
// Runs.

fn run<C: Counter>(counter: &C, keys: &[u32]) {
    for &key in keys {
        counter.incr(black_box(key));
    }
}

fn time_single<C: Counter>(shape: Shape, keys: &[u32]) -> Duration {
    let counter = C::create(shape);
    let start = Instant::now();
    run(&counter, keys);
    let elapsed = start.elapsed();
    black_box(&counter);
    elapsed
}

fn time_threads<C: Counter + 'static>(
    shape: Shape,
    keys: &Arc<Vec<u32>>,
    threads: usize,
) -> Duration {
    let counter = Arc::new(C::create(shape));
    let chunk = keys.len().div_ceil(threads);
    let start = Instant::now();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let counter = Arc::clone(&counter);
            let keys = Arc::clone(keys);
            std::thread::spawn(move || {
                let from = (t * chunk).min(keys.len());
                let to = ((t + 1) * chunk).min(keys.len());
                run(counter.as_ref(), &keys[from..to]);
            })
        })
        .collect();
    for handle in handles {
        handle.join().expect("bench thread panicked");
    }
    start.elapsed()
}

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&v| v > 0)
        .unwrap_or(default)
}

/// splitmix64, then Lemire's multiply-shift into `0..KEYS`: uniform enough, and no dependency.
fn key_stream(events: usize) -> Vec<u32> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..events)
        .map(|_| {
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^= z >> 31;
            (((z >> 32) * KEYS) >> 32) as u32
        })
        .collect()
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

const NAMES: [&str; 4] = [
    "keepcount Estimator",
    "pingora-limits Estimator",
    "Mutex<HashMap<u32,usize>>",
    "DashMap<u32,AtomicUsize>",
];

/// An estimator shape, rows × slots.
#[derive(Clone, Copy)]
struct Shape {
    hashes: usize,
    slots: usize,
}

fn shapes() -> Vec<Shape> {
    let spec = std::env::var("KEEPCOUNT_BENCH_SHAPES").unwrap_or_else(|_| DEFAULT_SHAPES.into());
    spec.split(',')
        .filter_map(|s| {
            let (h, w) = s.trim().split_once('x')?;
            Some(Shape {
                hashes: h.parse().ok()?,
                slots: w.parse().ok()?,
            })
        })
        .collect()
}

fn main() {
    let events = env_or("KEEPCOUNT_BENCH_EVENTS", DEFAULT_EVENTS);
    let threads = env_or("KEEPCOUNT_BENCH_THREADS", DEFAULT_THREADS);
    let rounds = env_or("KEEPCOUNT_BENCH_ROUNDS", DEFAULT_ROUNDS);
    let keys = Arc::new(key_stream(events));
    for shape in shapes() {
        bench_shape(shape, &keys, threads, rounds);
    }
}

fn bench_shape(shape: Shape, keys: &Arc<Vec<u32>>, threads: usize, rounds: usize) {
    let events = keys.len();
    let Shape { hashes, slots } = shape;
    println!();
    println!(
        "## {hashes} hashes × {slots} slots ({} KiB of counters)",
        hashes * slots * 8 / 1024
    );
    println!(
        "{events} events over {KEYS} uniform u32 keys; median of {rounds} interleaved rounds; \
         {threads} threads for the multi-thread run"
    );

    // Same answer check: the estimators never under-count the exact maps.
    {
        let sample = &keys[..keys.len().min(200_000)];
        let (k, p, n, d) = (
            Keepcount::create(shape),
            Pingora::create(shape),
            Naive::create(shape),
            Dash::create(shape),
        );
        run(&k, sample);
        run(&p, sample);
        run(&n, sample);
        run(&d, sample);
        for &key in &sample[..100] {
            let exact = n.count(key);
            assert_eq!(d.count(key), exact, "DashMap disagrees on {key}");
            assert!(k.count(key) >= exact, "keepcount under-counts {key}");
            assert!(p.count(key) >= exact, "pingora under-counts {key}");
        }
    }

    let mut single: [Vec<Duration>; 4] = Default::default();
    let mut multi: [Vec<Duration>; 4] = Default::default();
    for _ in 0..rounds {
        single[0].push(time_single::<Keepcount>(shape, keys));
        single[1].push(time_single::<Pingora>(shape, keys));
        single[2].push(time_single::<Naive>(shape, keys));
        single[3].push(time_single::<Dash>(shape, keys));
        multi[0].push(time_threads::<Keepcount>(shape, keys, threads));
        multi[1].push(time_threads::<Pingora>(shape, keys, threads));
        multi[2].push(time_threads::<Naive>(shape, keys, threads));
        multi[3].push(time_threads::<Dash>(shape, keys, threads));
    }
    let per_event = |d: Duration| d.as_secs_f64() * 1e9 / events as f64;
    let single: Vec<f64> = single.into_iter().map(|t| per_event(median(t))).collect();
    let multi: Vec<f64> = multi.into_iter().map(|t| per_event(median(t))).collect();

    println!();
    println!(
        "| contender                  | 1 thread ns/event | × keepcount | {threads} threads ns/event (wall) | per-thread ns/op | × keepcount |"
    );
    println!(
        "|----------------------------|------------------:|------------:|-------------------------:|-----------------:|------------:|"
    );
    for i in 0..4 {
        println!(
            "| {:<26} | {:>17.1} | {:>11.2} | {:>24.1} | {:>16.1} | {:>11.2} |",
            NAMES[i],
            single[i],
            single[i] / single[0],
            multi[i],
            multi[i] * threads as f64,
            multi[i] / multi[0],
        );
    }
    println!(
        "keepcount / pingora-limits: {:.2} (1 thread), {:.2} ({threads} threads)",
        single[0] / single[1],
        multi[0] / multi[1]
    );

    println!();
    println!("memory, single thread, all {events} events (separate pass):");
    println!("| contender                  |   peak bytes | allocations | bytes allocated |");
    println!("|----------------------------|-------------:|------------:|----------------:|");
    let memory = [
        measure_memory(|| run(&Keepcount::create(shape), keys)),
        measure_memory(|| run(&Pingora::create(shape), keys)),
        measure_memory(|| run(&Naive::create(shape), keys)),
        measure_memory(|| run(&Dash::create(shape), keys)),
    ];
    for (name, m) in NAMES.iter().zip(&memory) {
        println!(
            "| {:<26} | {:>12} | {:>11} | {:>15} |",
            name, m.peak, m.allocations, m.allocated
        );
    }
    println!(
        "(keepcount's counters: {hashes} × {slots} × 8 = {} bytes)",
        hashes * slots * 8
    );
}
