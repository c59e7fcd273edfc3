//! What tracking heavy hitters costs per update: `Summary::incr` and the windowed
//! `HeavyHitters::incr` against a plain `Estimator::incr` (the sketch alone) and an exact
//! `HashMap<u64, u64>` (std's SipHash-1-3, alone and behind a `Mutex`), single-threaded, on two
//! streams of `u64` keys:
//!
//! - Zipf(1.1) over 10^5 keys, the top-100 test's stream: most events belong to the few keys
//!   that are tracked, so most updates take the table's shared lock;
//! - uniform over 10^6 keys, pingora's blog stream: with 2·10^6 events every counter of the
//!   4 × 4096 sketch passes the threshold, so the table fills and the rest of the stream is
//!   overflow — the saturated case.
//!
//! The summaries use the top-100 test's budget: a 4 × 4096 sketch, threshold 128, 1,024
//! entries. Keys are generated before timing; each figure is the median of
//! `KEEPCOUNT_BENCH_ROUNDS` (default 5) interleaved rounds of `KEEPCOUNT_BENCH_EVENTS`
//! (default 2·10^6) events.
//!
//! ```text
//! cargo bench -p keepcount-limits --bench heavy
//! ```

use keepcount_limits::Shape;
use keepcount_limits::estimator::Estimator;
use keepcount_limits::heavy::{HeavyHitters, Settings, Summary};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const HASHES: usize = 4;
const SLOTS: usize = 4096;
const THRESHOLD: u64 = 128;
const CAPACITY: usize = 1024;
const SEED: u64 = 7;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn zipf(s: f64, keys: usize, events: usize) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(keys);
    let mut total = 0.0;
    for rank in 1..=keys {
        total += (rank as f64).powf(-s);
        cdf.push(total);
    }
    let mut state = 1;
    (0..events)
        .map(|_| {
            let u = (splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64 * total;
            cdf.partition_point(|&c| c < u) as u64
        })
        .collect()
}

fn uniform(keys: u64, events: usize) -> Vec<u64> {
    let mut state = 2;
    (0..events).map(|_| splitmix(&mut state) % keys).collect()
}

fn settings() -> Settings {
    Settings::new(
        Shape::new(HASHES, SLOTS).unwrap(),
        SEED,
        THRESHOLD,
        CAPACITY,
    )
    .unwrap()
}

/// One contender: a fresh structure per round, fed the whole stream.
struct Contender {
    name: &'static str,
    run: fn(&[u64]) -> Duration,
}

fn estimator(stream: &[u64]) -> Duration {
    let est = Estimator::with_seed(HASHES, SLOTS, SEED).unwrap();
    let start = Instant::now();
    for key in stream {
        black_box(est.incr(key, 1));
    }
    start.elapsed()
}

fn summary(stream: &[u64]) -> Duration {
    let summary = Summary::<u64>::new(settings());
    let start = Instant::now();
    for key in stream {
        black_box(summary.incr(key, 1));
    }
    start.elapsed()
}

fn windowed(stream: &[u64]) -> Duration {
    let heavy = HeavyHitters::<u64>::new(settings(), Duration::from_secs(60)).unwrap();
    let start = Instant::now();
    for key in stream {
        black_box(heavy.incr(key, 1));
    }
    start.elapsed()
}

fn hash_map(stream: &[u64]) -> Duration {
    let mut map: HashMap<u64, u64> = HashMap::new();
    let start = Instant::now();
    for key in stream {
        *map.entry(*key).or_default() += 1;
    }
    black_box(&map);
    start.elapsed()
}

fn mutex_hash_map(stream: &[u64]) -> Duration {
    let map: Mutex<HashMap<u64, u64>> = Mutex::new(HashMap::new());
    let start = Instant::now();
    for key in stream {
        *map.lock().unwrap().entry(*key).or_default() += 1;
    }
    black_box(&map);
    start.elapsed()
}

const CONTENDERS: [Contender; 5] = [
    Contender {
        name: "Estimator::incr",
        run: estimator,
    },
    Contender {
        name: "Summary::incr",
        run: summary,
    },
    Contender {
        name: "HeavyHitters::incr",
        run: windowed,
    },
    Contender {
        name: "HashMap",
        run: hash_map,
    },
    Contender {
        name: "Mutex<HashMap>",
        run: mutex_hash_map,
    },
];

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort_unstable();
    times[times.len() / 2]
}

fn main() {
    let events = env("KEEPCOUNT_BENCH_EVENTS", 2_000_000);
    let rounds = env("KEEPCOUNT_BENCH_ROUNDS", 5).max(1);
    let streams = [
        ("Zipf(1.1), 10^5 keys", zipf(1.1, 100_000, events)),
        ("uniform, 10^6 keys", uniform(1_000_000, events)),
    ];
    println!("{events} events, median of {rounds} interleaved rounds, single thread\n");
    println!("| stream               | contender            | ns/event | × Estimator::incr |");
    println!("|----------------------|----------------------|---------:|------------------:|");
    for (name, stream) in &streams {
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); CONTENDERS.len()];
        for _ in 0..rounds {
            for (contender, times) in CONTENDERS.iter().zip(&mut times) {
                times.push((contender.run)(stream));
            }
        }
        let per_event: Vec<f64> = times
            .into_iter()
            .map(|t| median(t).as_nanos() as f64 / events as f64)
            .collect();
        for (contender, ns) in CONTENDERS.iter().zip(&per_event) {
            println!(
                "| {name:<20} | {:<20} | {ns:>8.1} | {:>17.2} |",
                contender.name,
                ns / per_event[0]
            );
        }
    }
    let summary = Summary::<u64>::new(settings());
    for key in &streams[0].1 {
        summary.incr(key, 1);
    }
    let stats = summary.stats();
    println!(
        "\nSummary after the Zipf stream: {} B, {} keys tracked, {} overflow events",
        summary.memory_bytes(),
        stats.tracked,
        stats.overflow_events
    );
}
