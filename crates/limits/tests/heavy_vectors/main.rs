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
//!
//! The two vector groups are built in [`streams`] (`runs`) and [`corrupt`] (`corrupt`), over the
//! keys of [`keys`] and the cores of [`cores`]; this file renders them and holds the tests.
//!
//! [`HeavyHitters`]: keepcount_limits::heavy::HeavyHitters

mod cores;
mod corrupt;
mod keys;
mod streams;

use crate::cores::{Config, absorb};
use crate::corrupt::corrupt_cases;
use crate::keys::hex;
use crate::streams::{edge_run, random_run};
use keepcount_limits::heavy::Summary;
use std::fmt::Write as _;

fn render() -> String {
    let mut j = String::new();
    j.push_str("{\n  \"spec\": \"docs/format.md §6, §6.1\",\n");
    j.push_str("  \"generator\": \"crates/limits/tests/heavy_vectors/main.rs\",\n");
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
        "negative-counter",
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
