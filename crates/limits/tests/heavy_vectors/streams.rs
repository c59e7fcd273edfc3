//! The first vector group, `runs`: operation streams on `HeavyHitters` cores on manual clocks,
//! each operation recorded with its answer. One run counts every edge key; the others are fixed
//! random streams of every operation.

use crate::cores::{Config, MAX_SAFE, absorb};
use crate::keys::{Key, decoded_json, edge_keys, hex, s};
use keepcount_limits::clock::ManualClock;
use keepcount_limits::heavy::{Count, HeavyHitters, Standing, Summary, Window};
use std::sync::Arc;
use std::time::Duration;

/// splitmix64: a tiny deterministic generator, so every stream is fixed.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n`.
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The cores of the vectors: byte-string keys, as the Node backends store them, on a clock the
/// recorder moves.
type Heavy = HeavyHitters<Vec<u8>, Arc<ManualClock>>;

/// `HeavyHitters` on manual clocks at `now` milliseconds (the core under test, and others whose
/// summaries it merges), recording each operation with its result as a JSON array whose second
/// element names the core.
struct Recorder {
    cores: Vec<(Heavy, Arc<ManualClock>)>,
    now: u64,
    ops: Vec<String>,
}

fn window(w: u8) -> Window {
    match w {
        0 => Window::Current,
        1 => Window::Previous,
        _ => Window::Both,
    }
}

fn safe(n: u64) -> u64 {
    assert!(n <= MAX_SAFE, "{n} does not fit a JavaScript number");
    n
}

fn standing(count: &Count) -> u8 {
    match count.standing {
        Standing::Tracked => 0,
        Standing::BelowThreshold => 1,
        Standing::Overflow => 2,
    }
}

impl Recorder {
    fn new(configs: &[Config]) -> Self {
        let cores = configs
            .iter()
            .map(|config| {
                let clock = Arc::new(ManualClock::new());
                let interval = Duration::from_millis(config.interval_ms);
                let heavy =
                    HeavyHitters::with_clock(config.settings(), interval, Arc::clone(&clock))
                        .expect("a valid interval");
                (heavy, clock)
            })
            .collect();
        Self {
            cores,
            now: 0,
            ops: Vec::new(),
        }
    }

    fn at(&mut self, now: u64) {
        assert!(now >= self.now);
        for (_, clock) in &self.cores {
            clock.advance(Duration::from_millis(now - self.now));
        }
        self.now = now;
    }

    fn heavy(&self, core: usize) -> &Heavy {
        &self.cores[core].0
    }

    /// The core's `incr` result: the exact count if tracked, else `−1 − estimate`.
    fn incr(&mut self, core: usize, key: &Key, value: u32) {
        let count = self.heavy(core).incr(&key.stored()[..], value);
        let result = match count.standing {
            Standing::Tracked => i128::from(safe(count.lower)),
            _ => -1 - i128::from(safe(count.upper)),
        };
        self.ops.push(format!(
            "[\"incr\", {core}, {}, {value}, {}, {result}]",
            key.json(),
            self.now
        ));
    }

    fn decr(&mut self, core: usize, key: &Key, value: u32) {
        self.heavy(core).decr(&key.stored()[..], value);
        self.ops.push(format!(
            "[\"decr\", {core}, {}, {value}, {}]",
            key.json(),
            self.now
        ));
    }

    fn count(&mut self, core: usize, key: &Key, w: u8) {
        let count = self.heavy(core).count(&key.stored()[..], window(w));
        self.ops.push(format!(
            "[\"count\", {core}, {}, {w}, {}, {}, {}, {}]",
            key.json(),
            self.now,
            safe(count.lower),
            safe(count.upper),
            standing(&count)
        ));
    }

    fn top(&mut self, core: usize, n: usize, w: u8) {
        let rows: Vec<String> = self
            .heavy(core)
            .top(n, window(w))
            .iter()
            .map(|talker| {
                format!(
                    "[{}, {}, {}]",
                    decoded_json(&talker.key),
                    safe(talker.count.lower),
                    safe(talker.count.upper)
                )
            })
            .collect();
        self.ops.push(format!(
            "[\"top\", {core}, {n}, {w}, {}, [{}]]",
            self.now,
            rows.join(", ")
        ));
    }

    fn summary(&self, core: usize, w: u8) -> &Summary<Vec<u8>> {
        if w == 0 {
            self.heavy(core).current()
        } else {
            self.heavy(core).previous()
        }
    }

    fn stats(&mut self, core: usize, w: u8) {
        let stats = self.summary(core, w).stats();
        self.ops.push(format!(
            "[\"stats\", {core}, {w}, {}, {}, {}, {}, {}, {}, {}]",
            self.now,
            stats.tracked,
            stats.capacity,
            safe(stats.total),
            safe(stats.overflow_events),
            safe(stats.overflow_weight),
            safe(stats.merge_dropped)
        ));
    }

    /// The serialized bytes in full.
    fn serialize(&mut self, core: usize, w: u8) {
        let bytes = self.summary(core, w).to_bytes();
        self.ops.push(format!(
            "[\"serialize\", {core}, {w}, {}, \"{}\"]",
            self.now,
            hex(&bytes)
        ));
    }

    /// The serialized bytes' length and trailing CRC-32 (of every byte before it), which keeps the
    /// vectors small and still tells any difference.
    fn checksum(&mut self, core: usize, w: u8) {
        let bytes = self.summary(core, w).to_bytes();
        let (body, tail) = bytes.split_at(bytes.len() - 4);
        let crc = u32::from_le_bytes(tail.try_into().unwrap());
        assert_eq!(crc, crc32fast::hash(body));
        self.ops.push(format!(
            "[\"checksum\", {core}, {w}, {}, {}, {crc}]",
            self.now,
            bytes.len()
        ));
    }

    /// Serializes `from`'s window `from_w` and merges it into `core`'s window `w`, as the Node
    /// core's `absorb` does.
    fn absorb(&mut self, core: usize, from: usize, from_w: u8, w: u8) {
        let bytes = self.summary(from, from_w).to_bytes();
        let result = match absorb(self.summary(core, w), &bytes) {
            None => "null".to_string(),
            Some(reason) => format!("\"{reason}\""),
        };
        self.ops.push(format!(
            "[\"absorb\", {core}, {from}, {from_w}, {w}, {}, {result}]",
            self.now
        ));
    }
}

/// Every edge key counted once with threshold 1, so each is tracked and its stored form is in
/// the serialized bytes; then read back in both intervals.
pub(crate) fn edge_run() -> (Vec<Config>, Vec<String>) {
    let config = Config {
        interval_ms: 1000,
        hashes: 4,
        slots: 64,
        seed: 7,
        threshold: 1,
        capacity: 64,
    };
    let mut r = Recorder::new(&[config]);
    let keys = edge_keys();
    for (i, key) in keys.iter().enumerate() {
        r.incr(0, key, i as u32 + 1);
    }
    for key in &keys {
        r.count(0, key, 0);
    }
    r.top(0, 64, 0);
    r.serialize(0, 0);
    r.stats(0, 0);
    r.at(1000);
    for key in &keys {
        r.incr(0, key, 1);
        r.count(0, key, 2);
    }
    r.top(0, 64, 1);
    r.top(0, 64, 2);
    r.serialize(0, 1);
    r.serialize(0, 0);
    (vec![config], r.ops)
}

/// A random stream of every operation over a skewed choice of keys: increments (some of the
/// largest value), refunds, reads of each window, time steps (some over two intervals), and
/// merges of a peer's summaries (core 1, counting its own stream), of the core's own other
/// window, and of a summary with another threshold (core 2).
pub(crate) fn random_run(config: Config, seed: u64, ops: usize) -> (Vec<Config>, Vec<String>) {
    let mut random = Random(seed);
    let mut keys: Vec<Key> = (0..12).map(|i| s(&format!("k{i}"))).collect();
    keys.extend((0..8).map(|i| Key::Int(i * 7 - 20)));
    keys.extend((0..4).map(|i| Key::Bytes(vec![i, i + 1])));
    keys.extend(edge_keys().into_iter().step_by(4));
    let configs = [
        config,
        config,
        Config {
            threshold: config.threshold + 1,
            ..config
        },
    ];
    let mut r = Recorder::new(&configs);
    for _ in 0..ops {
        let n = keys.len() as u64;
        let key = keys[random.below(n).min(random.below(n)) as usize].clone();
        if random.chance(3) {
            let longest = if random.chance(20) {
                3 * config.interval_ms
            } else {
                config.interval_ms
            };
            let step = random.below(longest);
            r.at(r.now + step);
        }
        let w = random.below(3) as u8;
        match random.below(100) {
            0..=64 => {
                let value = if random.chance(5) {
                    u32::MAX
                } else {
                    1 + random.below(3) as u32
                };
                r.incr(0, &key, value);
            }
            65..=69 => r.incr(1, &key, 1 + random.below(4) as u32),
            70..=74 => r.decr(0, &key, 1 + random.below(4) as u32),
            75..=84 => r.count(0, &key, w),
            85..=89 => r.top(0, random.below(config.capacity as u64 + 2) as usize, w),
            90..=93 => {
                let w = w % 2;
                r.stats(0, w);
                r.checksum(0, w);
                r.absorb(0, 0, w, 1 - w);
            }
            94..=97 => r.absorb(0, 1, w % 2, w % 2),
            _ => r.absorb(0, 2, 0, w % 2),
        }
    }
    r.top(0, config.capacity, 2);
    r.serialize(0, 0);
    r.serialize(0, 1);
    (configs.to_vec(), r.ops)
}
