//! What the vectors run on: a core's configuration (the Node `HeavyCore` settings), the largest
//! count Node reads exactly, and the Node core's `absorb`, which both vector groups use.

use crate::keys::is_stored_form;
use keepcount_limits::Shape;
use keepcount_limits::heavy::codec::ReadError;
use keepcount_limits::heavy::{Settings, Summary};

/// Counts Node reads exactly (`Number.MAX_SAFE_INTEGER`); every number in the vectors is below.
pub(crate) const MAX_SAFE: u64 = (1 << 53) - 1;

/// One configuration of the vectors.
#[derive(Clone, Copy)]
pub(crate) struct Config {
    pub(crate) interval_ms: u64,
    pub(crate) hashes: usize,
    pub(crate) slots: usize,
    pub(crate) seed: u64,
    pub(crate) threshold: u64,
    pub(crate) capacity: usize,
}

impl Config {
    pub(crate) fn settings(self) -> Settings {
        let shape = Shape::new(self.hashes, self.slots).unwrap();
        Settings::new(shape, self.seed, self.threshold, self.capacity).unwrap()
    }

    pub(crate) fn json(self) -> String {
        format!(
            "\"intervalMs\": {}, \"hashes\": {}, \"slots\": {}, \"seed\": \"{}\", \"threshold\": {}, \"capacity\": {}",
            self.interval_ms, self.hashes, self.slots, self.seed, self.threshold, self.capacity
        )
    }
}

/// The Node core's `absorb` (src/heavy.rs): the §6 decoder, which refuses other settings right
/// after the checksum, then the §6.1 checks (stored keys, counts Node holds exactly); `None` when
/// merged.
pub(crate) fn absorb(into: &Summary<Vec<u8>>, bytes: &[u8]) -> Option<&'static str> {
    let other = match Summary::<Vec<u8>>::from_bytes_for(bytes, into.settings()) {
        Ok(other) => other,
        Err(ReadError::Corrupt(err)) => return Some(err.check()),
        Err(ReadError::Mismatch(_)) => return Some("mismatch"),
    };
    if !other.all_tracked(|key, _| is_stored_form(key)) {
        return Some("key");
    }
    let stats = other.stats();
    let safe = |n: u64| n <= MAX_SAFE;
    if !other.all_tracked(|_, count| safe(count.lower) && safe(count.slack()))
        || ![
            stats.overflow_events,
            stats.overflow_weight,
            stats.merge_dropped,
        ]
        .into_iter()
        .all(safe)
    {
        return Some("counts");
    }
    into.merge(&other).err().map(|_| "mismatch")
}
