//! `SharedRate`'s unit tests: rotations, a stalled claimant taken over, rotations after idleness
//! and their carry, and starts ahead of a reading.

use super::*;
use crate::clock::ManualClock;
use crate::shared::scratch::Scratch;

const SECOND: Duration = Duration::from_secs(1);

fn open<'c>(dir: &Scratch, clock: &'c ManualClock) -> SharedRate<&'c ManualClock> {
    let shape = Shape::new(2, 64).unwrap();
    SharedRate::with_clock("rate", SECOND, shape, 1, &dir.options(), clock).unwrap()
}

#[test]
fn readers_during_a_rotation_see_the_ended_interval_whole() {
    let dir = Scratch::new("rate", "rotating");
    let clock = ManualClock::new();
    clock.advance(SECOND * 10);
    let rate = open(&dir, &clock);
    rate.observe(&"k", 3);
    // A claimant that has not finished: rotating, first sketch still the one counted into.
    let start = clock.now_nanos() & !LOW_BITS;
    rate.word().store(start | ROTATING, Ordering::SeqCst);
    assert_eq!(
        rate.rate_with(&"k", |p| (p.prev_samples, p.curr_samples)),
        (3, 0)
    );
    // Writers keep counting into the ended interval rather than waiting.
    assert_eq!(rate.observe(&"k", 1), 4);
}

#[test]
fn refunds_stop_at_zero_and_take_nothing_while_a_rotation_runs() {
    let dir = Scratch::new("rate", "refund");
    let clock = ManualClock::new();
    clock.advance(SECOND * 10);
    let rate = open(&dir, &clock);
    rate.observe(&"k", 3);
    assert_eq!(rate.refund(&"k", 2), 1);
    assert_eq!(rate.refund(&"k", 2), 0);
    rate.observe(&"k", 3);
    // Readers see 0 in the new interval while a rotation runs: a refund takes nothing either.
    let start = clock.now_nanos() & !LOW_BITS;
    rate.word().store(start | ROTATING, Ordering::SeqCst);
    assert_eq!(rate.refund(&"k", 3), 0);
    rate.word().store(start, Ordering::SeqCst);
    assert_eq!(rate.observe(&"k", 0), 3);
}

#[test]
fn refunds_racing_across_handles_take_each_count_once() {
    // Two handles of one segment, as two processes have: each thread adds 1, then takes back 2.
    let dir = Scratch::new("rate", "refund-race");
    let clock = ManualClock::new();
    clock.advance(SECOND * 10);
    let rates = [open(&dir, &clock), open(&dir, &clock)];
    std::thread::scope(|scope| {
        for rate in &rates {
            scope.spawn(move || {
                for _ in 0..10_000 {
                    rate.observe(&"k", 1);
                    assert!(rate.refund(&"k", 2) >= 0);
                }
            });
        }
    });
    assert_eq!(rates[0].observe(&"k", 0), 0);
}

#[test]
fn observe_in_interval_counts_and_tells_how_far_into_the_interval() {
    let dir = Scratch::new("rate", "in-interval");
    let clock = ManualClock::new();
    clock.advance(SECOND * 10);
    let rate = open(&dir, &clock);
    clock.advance(Duration::from_millis(250));
    let key = rate.hash_key("k");
    assert_eq!(rate.observe_hash_in_interval(key, 2), (2, 250_000_000));
    clock.advance(SECOND);
    // A new interval: the count starts over, and the elapsed part is the one rate_with sees.
    let (count, past) = rate.observe_hash_in_interval(key, 1);
    assert_eq!(count, 1);
    assert!(past < SECOND.as_nanos() as u64);
    let fraction = rate.rate_with(&"k", |p| p.current_interval_fraction);
    assert_eq!(past as f64 / 1e9, fraction);
}

#[test]
fn a_rotation_stalled_for_an_interval_is_taken_over() {
    let dir = Scratch::new("rate", "stalled");
    let clock = ManualClock::new();
    clock.advance(SECOND * 10);
    let rate = open(&dir, &clock);
    rate.observe(&"k", 3);
    let start = clock.now_nanos() & !LOW_BITS;
    rate.word().store(start | ROTATING, Ordering::SeqCst);
    clock.advance(SECOND);
    // The claimant died: this call takes over, clears and finishes.
    assert_eq!(rate.rate(&"k"), 3.0);
    let word = rate.word().load(Ordering::SeqCst);
    assert_eq!(word & (ROTATING | FLAG), FLAG);
    // The claimant's late finish cannot undo the takeover.
    rate.rotate(start | ROTATING, None);
    assert_eq!(rate.word().load(Ordering::SeqCst), word);
}

/// A rate in its first interval with "k" counted 3 times and "other" 5 times, then idle for
/// three intervals, and a claimant that copied the stale sketch and claimed the rotation but
/// has neither cleared nor finished: (rate, claimed word, baseline, a writer's view of it).
fn idle_rotation<'c>(
    dir: &Scratch,
    clock: &'c ManualClock,
) -> (SharedRate<&'c ManualClock>, u64, Baseline, View) {
    clock.advance(SECOND * 10);
    let rate = open(dir, clock);
    rate.observe(&"k", 3);
    rate.observe(&"other", 5);
    clock.advance(SECOND * 3);
    let baseline = rate.sketches[0].snapshot();
    let claimed = (clock.now_nanos() & !LOW_BITS) | ROTATING | STALE;
    rate.word().store(claimed, Ordering::SeqCst);
    let during = rate.view();
    assert!(during.rotating && during.stale);
    (rate, claimed, baseline, during)
}

fn samples(rate: &SharedRate<&ManualClock>, key: &str) -> (isize, isize) {
    rate.rate_with(&key, |c| (c.prev_samples, c.curr_samples))
}

#[test]
fn a_rotation_after_idleness_carries_the_events_counted_during_it() {
    let dir = Scratch::new("rate", "idle-carry");
    let clock = ManualClock::new();
    let (rate, claimed, baseline, during) = idle_rotation(&dir, &clock);
    let k = rate.hash_key("k");
    // Counted into the stale sketch, so the count returned includes the old 3 (documented).
    assert_eq!(rate.count(k, 2, during), 5);
    assert_eq!(samples(&rate, "k"), (0, 0));
    rate.rotate(claimed, Some(&baseline));
    assert_eq!(samples(&rate, "k"), (0, 2));
    assert_eq!(samples(&rate, "other"), (0, 0));
    // A writer that read the rotating word and counts after the carry passed its counters
    // sees the rotation finished and carries them itself.
    assert_eq!(rate.count(k, 4, during), 4);
    assert_eq!(samples(&rate, "k"), (0, 6));
    assert_eq!(rate.observe(&"k", 1), 7);
}

#[test]
fn a_late_writer_moves_its_own_events_and_never_the_stale_counts() {
    let dir = Scratch::new("rate", "idle-late");
    let clock = ManualClock::new();
    let (rate, claimed, baseline, during) = idle_rotation(&dir, &clock);
    // The claimant has cleared and finished but not carried yet.
    rate.sketches[1].reset();
    rate.word().store(finished(claimed), Ordering::SeqCst);
    // A late writer moves the 4 it counted, not the stale 3 its counters also hold...
    assert_eq!(rate.count(rate.hash_key("k"), 4, during), 7);
    assert_eq!(samples(&rate, "k"), (0, 4));
    // ...and the carry adds what is left of the gain over its copy: nothing.
    rate.carry(0, &baseline, finished(claimed));
    assert_eq!(samples(&rate, "k"), (0, 4));
    assert_eq!(samples(&rate, "other"), (0, 0));
}

#[test]
fn a_refund_between_a_late_writer_and_the_carry_leaves_no_counter_below_zero() {
    let dir = Scratch::new("rate", "idle-refund");
    let clock = ManualClock::new();
    let (rate, claimed, baseline, during) = idle_rotation(&dir, &clock);
    rate.sketches[1].reset();
    rate.word().store(finished(claimed), Ordering::SeqCst);
    // A writer counted during the rotation and moves its counts late; a refund then takes back
    // what "k" reads in the new interval, before the carry reaches its counters.
    assert_eq!(rate.count(rate.hash_key("k"), 4, during), 7);
    let read = rate.observe(&"k", 0);
    assert_eq!(rate.refund(&"k", read), 0);
    // The carry only adds to the new sketch: each counter stays where the refund stopped it. (When
    // the late writer moved the stale 3 too, the refund took them and the carry then subtracted
    // them: "k" read -3.)
    rate.carry(0, &baseline, finished(claimed));
    assert_eq!(samples(&rate, "k"), (0, 0));
    assert!(
        rate.sketches[1]
            .snapshot()
            .iter()
            .all(|&(_, count)| count >= 0)
    );
}

#[test]
fn a_late_writer_whose_events_the_carry_took_moves_only_what_is_left() {
    let dir = Scratch::new("rate", "idle-taken");
    let clock = ManualClock::new();
    let (rate, claimed, baseline, during) = idle_rotation(&dir, &clock);
    let k = rate.hash_key("k");
    // Writer A counts 2 during the rotation, but checks the word only after the carry took them.
    rate.sketches[0].incr_hash(k, 2);
    rate.rotate(claimed, Some(&baseline));
    assert_eq!(samples(&rate, "k"), (0, 2));
    // Writer B counts 1 after the carry passed; A's check comes first and takes B's 1 (A cannot
    // tell whose events are left), B's finds nothing left: each event moved once.
    rate.sketches[0].incr_hash(k, 1);
    rate.carry_late(k, 2, during);
    rate.carry_late(k, 1, during);
    assert_eq!(samples(&rate, "k"), (0, 3));
    assert_eq!(samples(&rate, "other"), (0, 0));
    assert_eq!(rate.sketches[0].get_hash(k), 0);
}

#[test]
fn a_carry_stops_when_a_later_rotation_has_begun() {
    let dir = Scratch::new("rate", "idle-stopped");
    let clock = ManualClock::new();
    let (rate, claimed, baseline, during) = idle_rotation(&dir, &clock);
    assert_eq!(rate.count(rate.hash_key("k"), 2, during), 5);
    rate.sketches[1].reset();
    // The claimant stalled after finishing for a whole interval and the next rotation began:
    // carrying now would add into a sketch that is no longer current, so it does nothing.
    rate.word().store(finished(claimed) + 8, Ordering::SeqCst);
    rate.carry(0, &baseline, finished(claimed));
    assert_eq!(rate.sketches[1].get("k"), 0);
}

#[test]
fn a_start_a_moment_ahead_is_no_time_passed_and_one_far_ahead_is_another_clock() {
    let dir = Scratch::new("rate", "ahead");
    let ahead = ManualClock::new();
    ahead.advance(SECOND * 10);
    let rate = open(&dir, &ahead);
    rate.observe(&"k", 4);
    ahead.advance(SECOND);
    assert_eq!(rate.observe(&"k", 1), 1, "a new interval from 11 s");
    assert_eq!(samples(&rate, "k"), (4, 1));
    // A reading of 10.5 s reaching the word after the interval began at 11 s.
    let behind = ManualClock::new();
    behind.advance(SECOND * 10 + SECOND / 2);
    let late = open(&dir, &behind);
    assert_eq!(
        late.observe(&"k", 1),
        2,
        "counted in the interval under way"
    );
    assert_eq!(samples(&rate, "k"), (4, 2), "the ended interval whole");
    // More than a second ahead: another clock's start, long past.
    let other = ManualClock::new();
    other.advance(SECOND * 9);
    let elsewhere = open(&dir, &other);
    elsewhere.observe(&"k", 1);
    assert_eq!(
        samples(&elsewhere, "k"),
        (0, 1),
        "stale, and a new interval"
    );
}

#[test]
fn an_interval_beyond_64_bit_nanoseconds_is_refused_not_saturated() {
    let dir = Scratch::new("rate", "long");
    let shape = Shape::new(1, 8).unwrap();
    let longest = Duration::from_nanos(u64::MAX);
    // Each used to be stored as 2^64 − 1 ns: the same segment as `longest`, whatever the interval.
    for interval in [longest + Duration::from_nanos(1), Duration::MAX] {
        assert!(matches!(
            SharedRate::open("long", interval, shape, 1, &dir.options()),
            Err(SharedError::LongInterval)
        ));
    }
    let rate = SharedRate::open("long", longest, shape, 1, &dir.options()).unwrap();
    assert_eq!(rate.interval_nanos, u64::MAX);
}
