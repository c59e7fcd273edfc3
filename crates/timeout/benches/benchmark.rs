//! keepcount-timeout beside pingora-timeout and tokio, in one run:
//! - `create_drop`: register a timer 1 s out, keep it, then drop it (what a timeout that never
//!   fires costs), per timer;
//! - `ready_timeout`: `timeout()` over an immediately ready future, per call.
//!
//! Each scenario runs from one thread and from two threads at once.
//!
//! Every figure is the median of `SAMPLES` runs, contenders interleaved within each sample.
//! Run with `cargo bench -p keepcount-timeout`.

use std::hint::black_box;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// Timers per create/drop run: pingora's own benchmark size.
const TIMERS: usize = 100_000;
/// `timeout()` calls per run: ten times `TIMERS`, since each costs only a few nanoseconds.
const TIMEOUTS: u32 = 1_000_000;
/// Runs per figure; the median is reported.
const SAMPLES: usize = 9;
/// The timeout every contender is given: long enough never to fire during a run.
const TIMEOUT: Duration = Duration::from_secs(1);

/// Nanoseconds per operation of one run.
fn per_op(elapsed: Duration, ops: usize) -> f64 {
    elapsed.as_nanos() as f64 / ops as f64
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("runtime")
}

/// Runs `f` on `threads` threads started together; returns the mean of their ns/op.
fn on_threads(threads: usize, f: &Contender<'_>) -> f64 {
    let barrier = Barrier::new(threads);
    let results: Vec<f64> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    f()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .collect()
    });
    results.iter().sum::<f64>() / threads as f64
}

mod create_drop {
    use super::*;

    /// Creates `TIMERS` timers with `create`, then drops them all: total ns per timer.
    fn run<T>(create: impl Fn() -> T) -> f64 {
        let mut timers = Vec::with_capacity(TIMERS);
        let start = Instant::now();
        for _ in 0..TIMERS {
            timers.push(create());
        }
        drop(black_box(timers));
        per_op(start.elapsed(), TIMERS)
    }

    pub fn keepcount(tm: &keepcount_timeout::timer::TimerManager) -> f64 {
        run(|| tm.register_timer(black_box(TIMEOUT)))
    }

    pub fn pingora(tm: &pingora_timeout::timer::TimerManager) -> f64 {
        run(|| tm.register_timer(black_box(TIMEOUT)))
    }

    pub fn tokio_sleep() -> f64 {
        let rt = runtime();
        let _guard = rt.enter();
        run(|| tokio::time::sleep(black_box(TIMEOUT)))
    }
}

mod ready_timeout {
    use super::*;

    /// `TIMEOUTS` awaits of `timeout(TIMEOUT, ready)` built by `each`, on a current-thread
    /// runtime; checks every contender returned every value.
    fn run<F, E>(each: impl Fn() -> F) -> f64
    where
        F: Future<Output = Result<u32, E>>,
    {
        let rt = runtime();
        rt.block_on(async {
            let start = Instant::now();
            let mut sum = 0u32;
            for _ in 0..TIMEOUTS {
                sum += black_box(each().await.ok().unwrap_or(0));
            }
            let ns = per_op(start.elapsed(), TIMEOUTS as usize);
            assert_eq!(sum, TIMEOUTS, "a ready future timed out");
            ns
        })
    }

    pub fn keepcount() -> f64 {
        run(|| keepcount_timeout::timeout(black_box(TIMEOUT), async { black_box(1) }))
    }

    pub fn pingora() -> f64 {
        run(|| pingora_timeout::timeout(black_box(TIMEOUT), async { black_box(1) }))
    }

    pub fn tokio() -> f64 {
        run(|| tokio::time::timeout(black_box(TIMEOUT), async { black_box(1) }))
    }

    /// The loop without any timeout: the harness cost included in every row above.
    pub fn bare() -> f64 {
        run(|| async { Ok::<u32, ()>(black_box(1)) })
    }
}

/// One benchmark run of one contender, returning ns/op.
type Contender<'a> = dyn Fn() -> f64 + Sync + 'a;

/// One table row: a scenario's three contenders in ns/op.
struct Row {
    scenario: &'static str,
    keepcount: f64,
    pingora: f64,
    tokio: f64,
}

fn measure(scenario: &'static str, threads: usize, contenders: [&Contender<'_>; 3]) -> Row {
    let mut samples = [Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..SAMPLES {
        for (contender, out) in contenders.iter().zip(samples.iter_mut()) {
            out.push(on_threads(threads, *contender));
        }
    }
    let [k, p, t] = samples.map(median);
    Row {
        scenario,
        keepcount: k,
        pingora: p,
        tokio: t,
    }
}

fn main() {
    let kc = keepcount_timeout::timer::TimerManager::new();
    let pg = pingora_timeout::timer::TimerManager::new();
    // Warm up: start keepcount's clock thread and both global managers, fault in allocations.
    create_drop::keepcount(&kc);
    create_drop::pingora(&pg);
    ready_timeout::keepcount();
    ready_timeout::pingora();

    let (kc_create, pg_create) = (|| create_drop::keepcount(&kc), || create_drop::pingora(&pg));
    let create_drop: [&Contender<'_>; 3] = [&kc_create, &pg_create, &create_drop::tokio_sleep];
    let ready: [&Contender<'_>; 3] = [
        &ready_timeout::keepcount,
        &ready_timeout::pingora,
        &ready_timeout::tokio,
    ];
    let rows = [
        measure("timer create+drop, 1 thread", 1, create_drop),
        measure("timer create+drop, 2 threads", 2, create_drop),
        measure("timeout(ready), 1 thread", 1, ready),
        measure("timeout(ready), 2 threads", 2, ready),
    ];

    println!(
        "{:<30} {:>12} {:>12} {:>12} {:>12} {:>12}",
        "ns/op (median)", "keepcount", "pingora", "tokio", "pingora/kc", "tokio/kc"
    );
    for row in rows {
        println!(
            "{:<30} {:>12.1} {:>12.1} {:>12.1} {:>11.2}x {:>11.1}x",
            row.scenario,
            row.keepcount,
            row.pingora,
            row.tokio,
            row.pingora / row.keepcount,
            row.tokio / row.keepcount,
        );
    }
    let bare = median((0..SAMPLES).map(|_| ready_timeout::bare()).collect());
    println!("loop overhead in the timeout(ready) rows (bare await, 1 thread): {bare:.1} ns/op");
}
