//! Heavy-hitter vectors (docs/format.md §6 and §6.1), shared with the Node backends through
//! `heavy_vectors.json`: operation streams on [`HeavyHitters`] over keys in their stored form,
//! with every answer and every serialized byte this crate gives, and corrupt summaries with the
//! first check each fails. `__test__/heavy-vectors.spec.ts` replays them on the backend under
//! test, so the TypeScript fallback is checked against this crate itself, not only against the
//! native binding.
//!
//! `heavy_vectors_json_is_up_to_date` renders the vectors and compares them with the committed
//! `tests/heavy_vectors.json`; after a deliberate change of behaviour or format, run
//! `KEEPCOUNT_BLESS=1 cargo test -p keepcount-limits --test heavy_vectors` to rewrite it and its
//! copy `__test__/heavy-vectors.json`.

use keepcount_limits::Shape;
use keepcount_limits::clock::ManualClock;
use keepcount_limits::heavy::{Count, HeavyHitters, Settings, Standing, Summary, Window};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// Tags of the stored form (§6.1).
const TAG_STR: u8 = 0;
const TAG_BYTES: u8 = 1;
const TAG_INT: u8 = 2;
/// Counts Node reads exactly (`Number.MAX_SAFE_INTEGER`); every number in the vectors is below.
const MAX_SAFE: u64 = (1 << 53) - 1;

/// A key as a JavaScript caller passes it: a string as UTF-16 code units (so lone surrogates can
/// be written), bytes, or an integer.
#[derive(Clone, Debug)]
enum Key {
    Str(Vec<u16>),
    Bytes(Vec<u8>),
    Int(i64),
}

fn s(text: &str) -> Key {
    Key::Str(text.encode_utf16().collect())
}

impl Key {
    /// The stored form: the tag, then UTF-8 (lone surrogates as U+FFFD, as `TextEncoder`), the
    /// bytes, or the i64 little endian.
    fn stored(&self) -> Vec<u8> {
        match self {
            Key::Str(units) => {
                let mut out = vec![TAG_STR];
                out.extend_from_slice(String::from_utf16_lossy(units).as_bytes());
                out
            }
            Key::Bytes(bytes) => {
                let mut out = vec![TAG_BYTES];
                out.extend_from_slice(bytes);
                out
            }
            Key::Int(i) => {
                let mut out = vec![TAG_INT];
                out.extend_from_slice(&i.to_le_bytes());
                out
            }
        }
    }

    /// `"type", key` for the JSON: strings as JSON strings (non-ASCII as `\u` escapes of their
    /// UTF-16 units), bytes as hex, integers as decimal strings.
    fn json(&self) -> String {
        match self {
            Key::Str(units) => format!("\"string\", {}", json_units(units)),
            Key::Bytes(bytes) => format!("\"bytes\", \"{}\"", hex(bytes)),
            Key::Int(i) => format!("\"i64\", \"{i}\""),
        }
    }
}

/// A stored key as `top` gives it back in Node (a string decoded from UTF-8, bytes, an integer),
/// in the JSON form of [`Key::json`].
fn decoded_json(stored: &[u8]) -> String {
    let (&tag, payload) = stored.split_first().expect("stored keys have a tag");
    match tag {
        TAG_STR => {
            let text = std::str::from_utf8(payload).expect("stored strings are UTF-8");
            Key::Str(text.encode_utf16().collect()).json()
        }
        TAG_BYTES => Key::Bytes(payload.to_vec()).json(),
        TAG_INT => Key::Int(i64::from_le_bytes(payload.try_into().expect("8 bytes"))).json(),
        _ => panic!("no key has tag {tag}"),
    }
}

fn json_units(units: &[u16]) -> String {
    let mut out = String::from("\"");
    for &u in units {
        match u {
            0x20..=0x7e if u != u16::from(b'"') && u != u16::from(b'\\') => {
                out.push(char::from(u as u8));
            }
            _ => {
                let _ = write!(out, "\\u{u:04x}");
            }
        }
    }
    out.push('"');
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The keys whose stored form is worth pinning down: empty ones, multi-byte and lone-surrogate
/// strings (which become U+FFFD, so `"\u{d800}"` and `"\u{fffd}"` are one key), a leading BOM
/// (which a UTF-8 decoder must keep), bytes equal to a string's UTF-8 or stored form, and the
/// integers at the edges of safe numbers and of i64.
fn edge_keys() -> Vec<Key> {
    vec![
        s(""),
        s("a"),
        s("10.0.0.1"),
        s("żółw 🐢"),
        Key::Str(vec![0xd800]),
        Key::Str(vec![u16::from(b'x'), 0xdc00, u16::from(b'y')]),
        Key::Str(vec![u16::from(b'z'), 0xd83d]),
        s("\u{fffd}"),
        s("\u{feff}bom"),
        s("\u{0}nul\"\\"),
        Key::Bytes(vec![]),
        Key::Bytes(vec![0x61]),
        Key::Bytes(vec![TAG_STR, 0x61]),
        Key::Bytes(vec![0xff, 0xfe, 0x00]),
        Key::Int(0),
        Key::Int(1),
        Key::Int(-1),
        Key::Int((1 << 53) - 1),
        Key::Int(-((1 << 53) - 1)),
        Key::Int(1 << 53),
        Key::Int(i64::MIN),
        Key::Int(i64::MAX),
    ]
}

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

/// One configuration of the vectors.
#[derive(Clone, Copy)]
struct Config {
    interval_ms: u64,
    hashes: usize,
    slots: usize,
    seed: u64,
    threshold: u64,
    capacity: usize,
}

impl Config {
    fn settings(self) -> Settings {
        let shape = Shape::new(self.hashes, self.slots).unwrap();
        Settings::new(shape, self.seed, self.threshold, self.capacity).unwrap()
    }

    fn json(self) -> String {
        format!(
            "\"intervalMs\": {}, \"hashes\": {}, \"slots\": {}, \"seed\": \"{}\", \"threshold\": {}, \"capacity\": {}",
            self.interval_ms, self.hashes, self.slots, self.seed, self.threshold, self.capacity
        )
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

/// The Node core's `absorb`: the §6 decoder, then the §6.1 checks (stored keys, counts Node holds
/// exactly), then the settings; `None` when merged.
fn absorb(into: &Summary<Vec<u8>>, bytes: &[u8]) -> Option<&'static str> {
    let other = match Summary::<Vec<u8>>::from_bytes(bytes) {
        Ok(other) => other,
        Err(err) => return Some(err.check()),
    };
    let talkers = other.top(usize::MAX);
    if !talkers.iter().all(|t| is_stored_form(&t.key)) {
        return Some("key");
    }
    let stats = other.stats();
    let counts = talkers
        .iter()
        .flat_map(|t| [t.count.lower, t.count.slack()])
        .chain([
            stats.overflow_events,
            stats.overflow_weight,
            stats.merge_dropped,
        ]);
    if !counts.into_iter().all(|n| n <= MAX_SAFE) {
        return Some("counts");
    }
    into.merge(&other).err().map(|_| "mismatch")
}

/// Whether `bytes` is a stored form some JavaScript key has (§6.1).
fn is_stored_form(bytes: &[u8]) -> bool {
    match bytes.split_first() {
        Some((&TAG_STR, payload)) => std::str::from_utf8(payload).is_ok(),
        Some((&TAG_BYTES, _)) => true,
        Some((&TAG_INT, payload)) => payload.len() == 8,
        _ => false,
    }
}

/// Every edge key counted once with threshold 1, so each is tracked and its stored form is in
/// the serialized bytes; then read back in both intervals.
fn edge_run() -> (Vec<Config>, Vec<String>) {
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
fn random_run(config: Config, seed: u64, ops: usize) -> (Vec<Config>, Vec<String>) {
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

/// The fields of a serialized summary, to write valid and invalid ones at will.
#[derive(Clone)]
struct Parts {
    magic: [u8; 4],
    version: u16,
    flags: u16,
    /// `None`: the real length.
    length: Option<u64>,
    threshold: u64,
    capacity: u32,
    /// `None`: the number of `entries`.
    count: Option<u32>,
    overflow: [u64; 3],
    /// `None`: the length of `sketch`.
    sketch_len: Option<u32>,
    sketch: Vec<u8>,
    entries: Vec<(Vec<u8>, u64, u64)>,
    trailing: Vec<u8>,
    /// `false`: the checksum is left wrong.
    seal: bool,
}

impl Parts {
    /// Splits a summary's bytes into its fields.
    fn of(bytes: &[u8]) -> Self {
        let u16_at = |at: usize| u16::from_le_bytes(bytes[at..at + 2].try_into().unwrap());
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap());
        let sketch_len = u32_at(56) as usize;
        let mut entries = Vec::new();
        let mut at = 60 + sketch_len;
        for _ in 0..u32_at(28) {
            let len = u32_at(at) as usize;
            let key = bytes[at + 4..at + 4 + len].to_vec();
            at += 4 + len;
            entries.push((key, u64_at(at), u64_at(at + 8)));
            at += 16;
        }
        Self {
            magic: bytes[..4].try_into().unwrap(),
            version: u16_at(4),
            flags: u16_at(6),
            length: None,
            threshold: u64_at(16),
            capacity: u32_at(24),
            count: None,
            overflow: [u64_at(32), u64_at(40), u64_at(48)],
            sketch_len: None,
            sketch: bytes[60..60 + sketch_len].to_vec(),
            entries,
            trailing: Vec::new(),
            seal: true,
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.magic);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&[0; 8]);
        out.extend_from_slice(&self.threshold.to_le_bytes());
        out.extend_from_slice(&self.capacity.to_le_bytes());
        let count = self.count.unwrap_or(self.entries.len() as u32);
        out.extend_from_slice(&count.to_le_bytes());
        for n in self.overflow {
            out.extend_from_slice(&n.to_le_bytes());
        }
        let sketch_len = self.sketch_len.unwrap_or(self.sketch.len() as u32);
        out.extend_from_slice(&sketch_len.to_le_bytes());
        out.extend_from_slice(&self.sketch);
        for (key, exact, slack) in &self.entries {
            out.extend_from_slice(&(key.len() as u32).to_le_bytes());
            out.extend_from_slice(key);
            out.extend_from_slice(&exact.to_le_bytes());
            out.extend_from_slice(&slack.to_le_bytes());
        }
        out.extend_from_slice(&self.trailing);
        let length = self.length.unwrap_or(out.len() as u64 + 4);
        out[8..16].copy_from_slice(&length.to_le_bytes());
        let checksum = crc32fast::hash(&out);
        let checksum = if self.seal { checksum } else { !checksum };
        out.extend_from_slice(&checksum.to_le_bytes());
        out
    }
}

/// Re-seals a §5 sketch after an edit (its CRC-32 is the last four bytes).
fn reseal_sketch(sketch: &mut [u8]) {
    let end = sketch.len() - 4;
    let checksum = crc32fast::hash(&sketch[..end]);
    sketch[end..].copy_from_slice(&checksum.to_le_bytes());
}

/// A summary of `config` tracking each of `keys` (stored forms or not), serialized.
fn tracking(config: Config, keys: &[Vec<u8>]) -> Vec<u8> {
    let summary = Summary::<Vec<u8>>::new(config.settings());
    for key in keys {
        summary.incr(&key[..], config.threshold as u32);
    }
    summary.to_bytes()
}

/// Adds an entry for `key` where the key order puts it.
fn insert(parts: &mut Parts, key: Vec<u8>) {
    parts.entries.push((key, 1, 0));
    parts.entries.sort();
}

/// Invalid summaries, one or more per check of §6 and §6.1 in the decoder's order, and valid
/// ones (merged, or refused as a mismatch), each with what absorbing it into an empty summary of
/// `config` gives.
fn corrupt_cases(config: Config) -> Vec<(&'static str, Vec<u8>)> {
    let source = Summary::<Vec<u8>>::new(config.settings());
    for (i, key) in edge_keys().iter().enumerate().step_by(3) {
        source.incr(&key.stored()[..], 2 + i as u32);
    }
    source.incr(&s("below").stored()[..], 1);
    let good = Parts::of(&source.to_bytes());
    assert_eq!(
        good.bytes(),
        source.to_bytes(),
        "Parts reads what it writes"
    );
    let edit = |f: &dyn Fn(&mut Parts)| {
        let mut parts = good.clone();
        f(&mut parts);
        parts.bytes()
    };
    let full = good.bytes();
    // The first entry's key length, set past the end of the input.
    let mut long_key = full.clone();
    let first_entry = 60 + good.sketch.len();
    long_key[first_entry..first_entry + 4].copy_from_slice(&1000u32.to_le_bytes());
    let end = long_key.len() - 4;
    let checksum = crc32fast::hash(&long_key[..end]);
    long_key[end..].copy_from_slice(&checksum.to_le_bytes());
    let mut cases: Vec<(&'static str, Vec<u8>)> = vec![
        ("valid", full.clone()),
        ("empty input", Vec::new()),
        ("63 bytes", full[..63].to_vec()),
        ("magic", edit(&|p| p.magic = *b"KCCM")),
        ("version 2", edit(&|p| p.version = 2)),
        ("version 0", edit(&|p| p.version = 0)),
        ("reserved flag", edit(&|p| p.flags = 2)),
        ("merged flag", edit(&|p| p.flags = 1)),
        (
            "declared one byte longer",
            edit(&|p| p.length = Some(full.len() as u64 + 1)),
        ),
        ("declared 2^64 - 1", edit(&|p| p.length = Some(u64::MAX))),
        ("one byte cut", full[..full.len() - 1].to_vec()),
        ("checksum", edit(&|p| p.seal = false)),
        (
            "sketch past the end",
            edit(&|p| p.sketch_len = Some(u32::MAX)),
        ),
        ("sketch magic", edit(&|p| p.sketch[0] ^= 1)),
        ("sketch checksum", edit(&|p| p.sketch[30] ^= 1)),
        (
            "sketch one byte short",
            edit(&|p| p.sketch_len = Some(p.sketch.len() as u32 - 1)),
        ),
        ("threshold 0", edit(&|p| p.threshold = 0)),
        ("capacity 0", edit(&|p| p.capacity = 0)),
        ("capacity 2^24 + 1", edit(&|p| p.capacity = (1 << 24) + 1)),
        ("more entries than capacity", edit(&|p| p.capacity = 2)),
        (
            "entry count past the input",
            edit(&|p| {
                p.capacity = 1 << 24;
                p.count = Some(p.entries.len() as u32 + 40);
            }),
        ),
        (
            "one entry more",
            edit(&|p| p.count = Some(p.entries.len() as u32 + 1)),
        ),
        ("key length past the input", long_key),
        (
            "entry count one short",
            edit(&|p| p.count = Some(p.entries.len() as u32 - 1)),
        ),
        ("trailing byte", edit(&|p| p.trailing = vec![0])),
        (
            "duplicate key",
            edit(&|p| p.entries[1] = p.entries[0].clone()),
        ),
        ("keys descending", edit(&|p| p.entries.swap(0, 1))),
        ("untracked key", edit(&|p| insert(p, s("never").stored()))),
        (
            "key below the threshold",
            edit(&|p| insert(p, s("below").stored())),
        ),
        ("empty key", tracking(config, &[vec![]])),
        ("unknown tag", tracking(config, &[vec![3, 1]])),
        (
            "integer of 7 bytes",
            tracking(config, &[vec![TAG_INT, 1, 2, 3, 4, 5, 6, 7]]),
        ),
        ("string not UTF-8", tracking(config, &[vec![TAG_STR, 0xc3]])),
        (
            "every kind of key",
            tracking(
                config,
                &edge_keys().iter().map(Key::stored).collect::<Vec<_>>(),
            ),
        ),
        ("exact 2^53", edit(&|p| p.entries[0].1 = 1 << 53)),
        ("exact 2^53 - 1", edit(&|p| p.entries[0].1 = MAX_SAFE)),
        ("slack 2^64 - 1", edit(&|p| p.entries[0].2 = u64::MAX)),
        ("overflow weight 2^53", edit(&|p| p.overflow[1] = 1 << 53)),
        (
            "merge-dropped 2^53 - 1",
            edit(&|p| p.overflow[2] = MAX_SAFE),
        ),
        ("another threshold", edit(&|p| p.threshold -= 1)),
    ];
    let other_seed = Summary::<Vec<u8>>::new(Config { seed: 8, ..config }.settings());
    cases.push(("another seed", other_seed.to_bytes()));
    let other_shape = Summary::<Vec<u8>>::new(
        Config {
            slots: config.slots + 1,
            ..config
        }
        .settings(),
    );
    cases.push(("another shape", other_shape.to_bytes()));
    let mut resealed = good.clone();
    resealed.sketch[8] = 0;
    reseal_sketch(&mut resealed.sketch);
    cases.push(("sketch of no rows", resealed.bytes()));
    cases
}

fn render() -> String {
    let mut j = String::new();
    j.push_str("{\n  \"spec\": \"docs/format.md §6, §6.1\",\n");
    j.push_str("  \"generator\": \"crates/limits/tests/heavy_vectors.rs\",\n");
    j.push_str("  \"notes\": \"each run has cores (HeavyCore settings) and ops on them; keys are type, key: strings as JSON strings, bytes as hex, i64 as decimal strings; windows and standings as lib/core.ts numbers them; ops: [incr, core, type, key, value, nowMs, result], [decr, core, type, key, value, nowMs], [count, core, type, key, window, nowMs, lower, upper, standing], [top, core, n, window, nowMs, [[type, key, lower, upper]...]], [stats, core, window, nowMs, tracked, capacity, total, overflowEvents, overflowWeight, mergeDropped], [serialize, core, window, nowMs, hex], [checksum, core, window, nowMs, length, crc32 of the serialized bytes], [absorb, core, fromCore, fromWindow, window, nowMs, result]; corrupt cases are absorbed into window 0 of an empty core with the corrupt settings\",\n");
    let runs = [
        ("edge keys", edge_run()),
        (
            "small sketch, small table",
            random_run(
                Config {
                    interval_ms: 100,
                    hashes: 4,
                    slots: 64,
                    seed: 7,
                    threshold: 3,
                    capacity: 8,
                },
                1,
                500,
            ),
        ),
        (
            "one counter: every key collides",
            random_run(
                Config {
                    interval_ms: 50,
                    hashes: 1,
                    slots: 1,
                    seed: 0,
                    threshold: 5,
                    capacity: 4,
                },
                2,
                300,
            ),
        ),
        (
            "derived rows, odd width, largest seed",
            random_run(
                Config {
                    interval_ms: 1000,
                    hashes: 5,
                    slots: 37,
                    seed: u64::MAX,
                    threshold: 10,
                    capacity: 16,
                },
                3,
                500,
            ),
        ),
        (
            "overflowing table",
            random_run(
                Config {
                    interval_ms: 30,
                    hashes: 2,
                    slots: 16,
                    seed: 1 << 63,
                    threshold: 2,
                    capacity: 3,
                },
                4,
                400,
            ),
        ),
    ];
    j.push_str("  \"runs\": [\n");
    let rendered: Vec<String> = runs
        .iter()
        .map(|(name, (configs, ops))| {
            let cores: Vec<String> = configs
                .iter()
                .map(|c| format!("{{{}}}", c.json()))
                .collect();
            format!(
                "    {{\"name\": \"{name}\", \"cores\": [{}],\n     \"ops\": [\n      {}\n    ]}}",
                cores.join(", "),
                ops.join(",\n      ")
            )
        })
        .collect();
    j.push_str(&rendered.join(",\n"));
    j.push_str("\n  ],\n");
    let config = Config {
        interval_ms: 1000,
        hashes: 3,
        slots: 16,
        seed: 5,
        threshold: 2,
        capacity: 16,
    };
    let _ = writeln!(j, "  \"corrupt\": {{{}, \"cases\": [", config.json());
    let cases: Vec<String> = corrupt_cases(config)
        .iter()
        .map(|(name, bytes)| {
            let into = Summary::<Vec<u8>>::new(config.settings());
            let result = match absorb(&into, bytes) {
                None => "null".to_string(),
                Some(reason) => format!("\"{reason}\""),
            };
            format!(
                "    {{\"name\": \"{name}\", \"bytes\": \"{}\", \"result\": {result}}}",
                hex(bytes)
            )
        })
        .collect();
    j.push_str(&cases.join(",\n"));
    j.push_str("\n  ]}\n}\n");
    j
}

#[test]
fn heavy_vectors_json_is_up_to_date() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/heavy_vectors.json");
    let copy = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../__test__/heavy-vectors.json"
    );
    let rendered = render();
    if std::env::var_os("KEEPCOUNT_BLESS").is_some() {
        std::fs::write(path, &rendered).unwrap();
        std::fs::write(copy, &rendered).unwrap();
    }
    let committed = std::fs::read_to_string(path).unwrap_or_default();
    assert!(
        committed == rendered,
        "tests/heavy_vectors.json differs from the implementation; rerun with KEEPCOUNT_BLESS=1 only if the behaviour or format changed on purpose"
    );
    assert!(
        rendered.len() < 400_000,
        "heavy_vectors.json should stay small"
    );
}

#[test]
fn every_reason_is_covered_by_a_corrupt_case() {
    let config = Config {
        interval_ms: 1000,
        hashes: 3,
        slots: 16,
        seed: 5,
        threshold: 2,
        capacity: 16,
    };
    let results: std::collections::HashSet<Option<&str>> = corrupt_cases(config)
        .iter()
        .map(|(_, bytes)| absorb(&Summary::new(config.settings()), bytes))
        .collect();
    for reason in [
        "short",
        "magic",
        "version",
        "flags",
        "length",
        "checksum",
        "sketch-length",
        "sketch",
        "config",
        "entries",
        "entry",
        "trailing",
        "order",
        "below-threshold",
        "key",
        "counts",
        "mismatch",
    ] {
        assert!(
            results.contains(&Some(reason)),
            "no case fails with {reason}"
        );
    }
    assert!(results.contains(&None));
}
