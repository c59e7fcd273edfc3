//! Heavy hitters (docs/format.md §6, the `heavy` module's guarantees): exactness, the saturation
//! flood, slack, merging, serialization, top-100 quality on Zipf streams and a multi-thread
//! stress test.

use keepcount_limits::Shape;
use keepcount_limits::heavy::codec::DecodeError;
use keepcount_limits::heavy::{HeapBytes, Settings, Standing, Summary};
use std::collections::HashMap;
use std::sync::Arc;

/// splitmix64: a tiny deterministic generator, so every stream here is fixed.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `events` draws from Zipf(`s`) over keys `0..keys` (key 0 the most frequent), by inverting
/// the cumulative distribution.
fn zipf(s: f64, keys: usize, events: usize, seed: u64) -> Vec<u64> {
    let mut cdf = Vec::with_capacity(keys);
    let mut total = 0.0;
    for rank in 1..=keys {
        total += (rank as f64).powf(-s);
        cdf.push(total);
    }
    let mut state = seed;
    (0..events)
        .map(|_| {
            let u = (splitmix(&mut state) >> 11) as f64 / (1u64 << 53) as f64 * total;
            cdf.partition_point(|&c| c < u) as u64
        })
        .collect()
}

fn exact_counts(stream: &[u64]) -> HashMap<u64, u64> {
    let mut counts = HashMap::new();
    for &key in stream {
        *counts.entry(key).or_default() += 1;
    }
    counts
}

fn summary<K: std::hash::Hash + Eq + Clone + HeapBytes>(
    hashes: usize,
    slots: usize,
    threshold: u64,
    capacity: usize,
) -> Summary<K> {
    Summary::new(
        Settings::new(Shape::new(hashes, slots).unwrap(), 17, threshold, capacity).unwrap(),
    )
}

/// Every key's bounds contain its true count; tracked keys entered by an increment have a
/// slack below the threshold.
fn assert_bounds(summary: &Summary<u64>, truth: &HashMap<u64, u64>, max_slack: u64) {
    for (&key, &count) in truth {
        let bounds = summary.count(&key);
        assert!(
            bounds.lower <= count && count <= bounds.upper,
            "key {key}: {count} outside {bounds:?}"
        );
        if bounds.standing == Standing::Tracked {
            assert!(bounds.slack() <= max_slack, "key {key}: {bounds:?}");
        }
    }
}

#[test]
fn tracked_keys_are_exact_from_entry_and_every_bound_holds() {
    // A small sketch so that collisions are common: the bounds must hold anyway.
    let s = summary::<u64>(3, 64, 20, 256);
    let stream = zipf(1.0, 2_000, 50_000, 1);
    for &key in &stream {
        s.incr(&key, 1);
    }
    let truth = exact_counts(&stream);
    assert_bounds(&s, &truth, 19);
    assert_eq!(s.stats().total, 50_000);
    // The hottest key entered early: its count is exact to within the threshold.
    let hottest = s.count(&0);
    assert_eq!(hottest.standing, Standing::Tracked);
    assert!(truth[&0] - hottest.lower < 20);
}

#[test]
fn refunds_keep_every_bound_sound() {
    // Each event is counted, and a third of them are taken back later (as a rate limit refunds
    // successful requests): bounds must contain the refunded counts, before and after entry.
    let s = summary::<u64>(3, 64, 20, 256);
    let stream = zipf(1.0, 2_000, 50_000, 5);
    let mut truth: HashMap<u64, u64> = HashMap::new();
    let mut pending = Vec::new();
    for (i, &key) in stream.iter().enumerate() {
        s.incr(&key, 1);
        *truth.entry(key).or_default() += 1;
        if i % 3 == 0 {
            pending.push(key);
        }
        if i % 7 == 0
            && let Some(back) = pending.pop()
        {
            s.decr(&back, 1);
            *truth.get_mut(&back).unwrap() -= 1;
        }
    }
    assert_bounds(&s, &truth, 19);
    // A refund of a key never seen changes nothing.
    let before = s.stats();
    assert_eq!(s.decr(&u64::MAX, 3).lower, 0);
    assert_eq!(s.stats(), before);
}

#[test]
fn a_flood_of_distinct_keys_does_not_make_a_fresh_key_look_heavy() {
    // The attack from issue 17: 2,048 addresses × 6 requests against a limit of 5, on the
    // 4 × 1024 sketch behind rateLimit, which then read over 5 for about half of 300 fresh
    // clients. With the table, a fresh client's certain count is its own increments.
    let s = summary::<u64>(4, 1024, 5, 4096);
    for round in 0..6 {
        for address in 0..2_048u64 {
            let count = s.incr(&address, 1);
            assert!(count.lower <= round + 1);
        }
    }
    for address in 0..2_048u64 {
        let count = s.count(&address);
        assert_eq!(count.standing, Standing::Tracked);
        assert!(count.lower <= 6 && 6 <= count.upper);
    }
    let mut looked_heavy_to_the_sketch = 0;
    for fresh in 1_000_000..1_000_300u64 {
        if s.sketch().get(fresh) >= 5 {
            looked_heavy_to_the_sketch += 1;
        }
        let count = s.incr(&fresh, 1);
        // Below the threshold (no lower bound), or entered with its own increment as lower.
        assert!(count.lower <= 1, "fresh key {fresh}: {count:?}");
        assert_ne!(count.standing, Standing::Overflow);
        // Its count before this increment was 0, so its slack is capped at threshold − 1.
        assert!(count.upper <= 5, "fresh key {fresh}: {count:?}");
    }
    // The saturated sketch alone reads 5 or more for 164 of the 300 (deterministic for seed
    // 17): a sketch-only limit of 5 would refuse them; the table gives them their own count.
    assert!(
        looked_heavy_to_the_sketch > 100,
        "{looked_heavy_to_the_sketch}"
    );
    assert_eq!(s.stats().overflow_events, 0);
}

#[test]
fn beyond_capacity_the_flood_overflows_visibly() {
    let s = summary::<u64>(4, 1024, 5, 1_024);
    for _ in 0..6 {
        for address in 0..2_048u64 {
            s.incr(&address, 1);
        }
    }
    let stats = s.stats();
    assert_eq!(stats.tracked, 1_024);
    assert!(stats.overflow_events > 0);
    let overflowed = (0..2_048u64)
        .filter(|a| s.count(a).standing == Standing::Overflow)
        .count();
    assert!(overflowed > 0);
    // An overflow key has no lower bound: never "certainly over the limit".
    for address in 0..2_048u64 {
        let count = s.count(&address);
        if count.standing == Standing::Overflow {
            assert_eq!(count.lower, 0);
            assert!(count.upper >= 6);
        }
    }
}

#[test]
fn heavy_keys_have_slack_below_the_threshold() {
    let threshold = 50;
    let s = summary::<u64>(4, 512, threshold, 512);
    let stream = zipf(1.2, 10_000, 200_000, 2);
    for &key in &stream {
        s.incr(&key, 1);
    }
    let truth = exact_counts(&stream);
    for talker in s.top(50) {
        assert!(talker.count.slack() < threshold, "{talker:?}");
        let count = truth[&talker.key];
        assert!(talker.count.lower <= count && count <= talker.count.upper);
    }
}

#[test]
fn merge_equals_the_concatenated_stream_within_the_bounds() {
    let (a, b, both) = (
        summary::<u64>(4, 1024, 30, 512),
        summary::<u64>(4, 1024, 30, 512),
        summary::<u64>(4, 1024, 30, 512),
    );
    let first = zipf(1.1, 5_000, 60_000, 3);
    let second = zipf(1.1, 5_000, 40_000, 4);
    for &key in &first {
        a.incr(&key, 1);
        both.incr(&key, 1);
    }
    for &key in &second {
        // The second stream's popular keys are other keys: offset its ranks.
        let key = (key + 100) % 5_000;
        b.incr(&key, 1);
        both.incr(&key, 1);
    }
    a.merge(&b).unwrap();
    // The sketches are exactly the concatenation's.
    assert_eq!(a.sketch().to_bytes(), both.sketch().to_bytes());
    let mut truth = exact_counts(&first);
    for &key in &second {
        *truth.entry((key + 100) % 5_000).or_default() += 1;
    }
    // Every bound holds. Slack: each side's entry slack (< 30) plus the other side's estimate.
    for (&key, &count) in &truth {
        let merged = a.count(&key);
        assert!(
            merged.lower <= count && count <= merged.upper,
            "{key}: {merged:?}"
        );
        let concatenated = both.count(&key);
        assert!(concatenated.lower <= count && count <= concatenated.upper);
    }
    // The same heavy keys lead both.
    let top = |s: &Summary<u64>| -> Vec<u64> { s.top(10).into_iter().map(|t| t.key).collect() };
    let (merged_top, concatenated_top) = (top(&a), top(&both));
    let shared = merged_top
        .iter()
        .filter(|k| concatenated_top.contains(k))
        .count();
    assert!(shared >= 9, "{merged_top:?} vs {concatenated_top:?}");
    assert_eq!(a.stats().total, 100_000);
}

fn sample_bytes() -> Vec<u8> {
    let s = summary::<Vec<u8>>(2, 8, 3, 4);
    for (key, times) in [(&b"alpha"[..], 5), (b"", 4), (b"gamma", 1), (b"delta", 9)] {
        for _ in 0..times {
            s.incr(key, 1);
        }
    }
    s.to_bytes()
}

#[test]
fn serialization_round_trips() {
    let bytes = sample_bytes();
    let decoded = Summary::<Vec<u8>>::from_bytes(&bytes).unwrap();
    assert_eq!(decoded.to_bytes(), bytes);
    assert_eq!(decoded.settings().threshold(), 3);
    assert_eq!(decoded.settings().capacity(), 4);
    let alpha = decoded.count(&b"alpha"[..]);
    assert_eq!(alpha.standing, Standing::Tracked);
    assert!(alpha.lower <= 5 && 5 <= alpha.upper);
    assert_eq!(decoded.top(10).len(), decoded.stats().tracked);
}

#[test]
fn every_truncation_is_refused() {
    let bytes = sample_bytes();
    for len in 0..bytes.len() {
        let err = Summary::<Vec<u8>>::from_bytes(&bytes[..len]).unwrap_err();
        if len < 64 {
            assert_eq!(err, DecodeError::Truncated { len });
        } else {
            assert!(matches!(err, DecodeError::Length { actual, .. } if actual == len));
        }
    }
}

#[test]
fn every_bit_flip_is_refused() {
    let bytes = sample_bytes();
    for byte in 0..bytes.len() {
        for bit in 0..8 {
            let mut corrupt = bytes.clone();
            corrupt[byte] ^= 1 << bit;
            assert!(
                Summary::<Vec<u8>>::from_bytes(&corrupt).is_err(),
                "flip of bit {bit} of byte {byte} was accepted"
            );
        }
    }
}

/// `bytes` with its length field and checksum made consistent again, to reach the checks
/// behind them.
fn resealed(mut bytes: Vec<u8>) -> Vec<u8> {
    bytes.truncate(bytes.len() - 4);
    let len = (bytes.len() + 4) as u64;
    bytes[8..16].copy_from_slice(&len.to_le_bytes());
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

#[test]
fn consistent_but_invalid_content_is_refused() {
    let bytes = sample_bytes();
    let decode = |b: Vec<u8>| Summary::<Vec<u8>>::from_bytes(&resealed(b)).unwrap_err();
    let sketch_len = u32::from_le_bytes(bytes[56..60].try_into().unwrap()) as usize;
    let entries_at = 60 + sketch_len;

    let mut zero_threshold = bytes.clone();
    zero_threshold[16..24].fill(0);
    let err = decode(zero_threshold);
    assert_eq!(
        err.to_string(),
        "bad heavy-hitter settings: the heavy-hitter threshold must be at least 1"
    );

    let mut small_capacity = bytes.clone();
    small_capacity[24..28].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(
        decode(small_capacity),
        DecodeError::TooManyEntries { capacity: 1, .. }
    ));

    let mut long_sketch = bytes.clone();
    long_sketch[56..60].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        decode(long_sketch),
        DecodeError::SketchLength { .. }
    ));

    let mut bad_sketch = bytes.clone();
    bad_sketch[60] = b'X';
    assert!(matches!(decode(bad_sketch), DecodeError::Sketch(_)));

    let mut trailing = bytes.clone();
    trailing.insert(trailing.len() - 4, 0);
    assert_eq!(decode(trailing), DecodeError::TrailingBytes { extra: 1 });

    let mut many_entries = bytes.clone();
    many_entries[28..32].copy_from_slice(&4u32.to_le_bytes());
    assert!(matches!(
        decode(many_entries),
        DecodeError::EntryTruncated { .. }
    ));

    // The first entry is the empty key (keys ascend): its length prefix, made huge.
    let mut long_key = bytes.clone();
    long_key[entries_at..entries_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(decode(long_key), DecodeError::EntryTruncated { index: 0 });

    // Swap the first two entries: the empty key (20 bytes) and "alpha" (25 bytes).
    let mut unordered = bytes.clone();
    let first = bytes[entries_at..entries_at + 20].to_vec();
    let second = bytes[entries_at + 20..entries_at + 45].to_vec();
    unordered[entries_at..entries_at + 25].copy_from_slice(&second);
    unordered[entries_at + 25..entries_at + 45].copy_from_slice(&first);
    assert_eq!(decode(unordered), DecodeError::Unordered { index: 1 });

    // An entry for a key the sketch never saw.
    let mut untracked = bytes.clone();
    untracked[entries_at + 20 + 4..entries_at + 20 + 9].copy_from_slice(b"alphz");
    let err = decode(untracked);
    assert!(
        matches!(err, DecodeError::BelowThreshold { index: 1 }),
        "{err}"
    );
}

#[test]
fn top_100_of_zipf_1_1_is_precise_within_256_kib() {
    // 10^6 events over 10^5 keys. Budget: a 4 × 4096 sketch (128 KiB) and a table of 1,024
    // entries at threshold 128. The 100th key's expected count is about 850, so the top 100
    // enter early (at ~15 % of the stream) with little sketch noise in their slack, and about
    // 560 keys ever reach 128, so the table never overflows.
    //
    // Deterministic (fixed stream and seed), so it cannot fail by chance; over 20 stream seeds
    // (release build, 2026-11-23) precision and recall were ≥ 0.99 every time, 1.00 in 13.
    // "Hit": a reported key whose true count is at least the 100th largest (ties count).
    let s = summary::<u64>(4, 4096, 128, 1_024);
    let stream = zipf(1.1, 100_000, 1_000_000, 5);
    for &key in &stream {
        s.incr(&key, 1);
    }
    assert!(s.memory_bytes() <= 256 * 1024, "{}", s.memory_bytes());
    assert_eq!(s.stats().overflow_events, 0);
    let truth = exact_counts(&stream);
    let mut counts: Vec<u64> = truth.values().copied().collect();
    counts.sort_unstable_by(|a, b| b.cmp(a));
    let hundredth = counts[99];
    let top = s.top(100);
    let hits = top.iter().filter(|t| truth[&t.key] >= hundredth).count();
    let precision = hits as f64 / top.len() as f64;
    let recall = hits as f64 / 100.0;
    assert!(precision >= 0.99 && recall >= 0.99, "{precision} {recall}");
}

#[test]
fn concurrent_writers_keep_lower_bounds_exact_and_upper_bounds_within_the_race() {
    // 4 threads, each its own deterministic Zipf stream over the same keys; afterwards every
    // lower bound is at most the true count, and every upper bound at least the true count
    // minus the documented race (one in-flight increment per other thread at entry).
    const THREADS: u64 = 4;
    let s = Arc::new(summary::<u64>(4, 1024, 10, 1_024));
    let streams: Vec<Vec<u64>> = (0..THREADS)
        .map(|t| zipf(1.1, 3_000, 50_000, 10 + t))
        .collect();
    let handles: Vec<_> = streams
        .iter()
        .cloned()
        .map(|stream| {
            let s = Arc::clone(&s);
            std::thread::spawn(move || {
                for key in stream {
                    s.incr(&key, 1);
                    if key == 0 {
                        let _ = s.top(5);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.join().unwrap();
    }
    let truth = exact_counts(&streams.concat());
    for (&key, &count) in &truth {
        let bounds = s.count(&key);
        assert!(bounds.lower <= count, "{key}: {count} < {bounds:?}");
        assert!(
            count <= bounds.upper + (THREADS - 1),
            "{key}: {count} > {bounds:?}"
        );
        assert!(count <= s.sketch().get(key) as u64);
    }
    assert_eq!(s.stats().total, THREADS * 50_000);
}
