//! `SharedLimiter`'s quotas kept in lowest terms: day and month quotas that do not fit 64 bits as
//! written, equivalent quotas opening one segment, and what still does not fit.

use super::*;

/// Checks `steps` of a fixed pseudo-random walk (keys `a` and `b`, costs up to `max_cost`, clock
/// steps up to `max_step`) against each segment of `segments` and against the local limiter under
/// `quota`, all on `clock`: every decision must be the local limiter's. A segment is checked once
/// a step, through each of its handles (processes, say) in turn. Returns how many the local
/// limiter refused, so a caller can check that both kinds of decision were compared.
fn decide_alike(
    segments: &[&[&SharedLimiter<Arc<ManualClock>>]],
    quota: Quota,
    clock: &Arc<ManualClock>,
    steps: usize,
    max_cost: u64,
    max_step: Duration,
) -> usize {
    let local: Limiter<Vec<u8>, _> = Limiter::with_clock(quota, Arc::clone(clock));
    local
        .replace_keys([(b"a".to_vec(), quota), (b"b".to_vec(), quota)])
        .unwrap();
    let max_step = u64::try_from(max_step.as_nanos()).unwrap();
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut refused = 0;
    for step in 0..steps {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let key: &[u8] = if state & 1 == 0 { b"a" } else { b"b" };
        let cost = (state >> 8) % (max_cost + 1);
        clock.advance(Duration::from_nanos((state >> 20) % max_step));
        let want = local.check(key, cost);
        refused += usize::from(!want.is_allowed());
        for (n, handles) in segments.iter().enumerate() {
            let limiter = handles[step % handles.len()];
            assert_eq!(limiter.check(key, cost), want, "segment {n}, step {step}");
        }
    }
    refused
}

#[test]
fn day_and_month_quotas_open_and_decide_as_the_local_limiter() {
    // Each full bucket is 2^64 units or more as written (burst × period in nanoseconds), so
    // opening them failed (WideQuota) where the local limiter took them; in lowest terms each
    // fits. A check takes one request whatever its cost, and at most `max_cost` units; between
    // two checks of a key about an eighth of a request refills, or an eighth of `max_cost` units:
    // each walk spends its buckets, then is refused about as often as the refill says. A million
    // requests outlast a walk this test can afford (every check is admitted, alike).
    let requests =
        |amount, period, burst| Quota::new(Some(Limit::new(amount, period, burst).unwrap()), None);
    let units = |limit| Quota::new(None, Some(limit));
    let cases = [
        // A million requests a day, bursts of a million.
        (requests(1_000_000, DAY, 1_000_000), 1, 4000, 0),
        // Ten thousand requests every 30 days.
        (requests(10_000, DAY * 30, 10_000), 1, 30_000, 5000),
        // 5 GB a day of units.
        (
            units(Limit::new(5_000_000_000, DAY, 5_000_000_000).unwrap()),
            200_000_000,
            4000,
            2000,
        ),
        // 100 MB a second, bursts of 100 GB.
        (
            units(Limit::per_second(100_000_000, 100_000_000_000)),
            4_000_000_000,
            4000,
            2000,
        ),
    ];
    for (n, (quota, max_cost, checks, min_refused)) in cases.into_iter().enumerate() {
        let limit = quota.dimensions().into_iter().flatten().next().unwrap();
        assert!(
            limit.capacity() > u128::from(u64::MAX),
            "case {n} fits as written"
        );
        let scratch = Scratch::new("slimiter", &format!("long-{n}"));
        let clock = Arc::new(ManualClock::new());
        let shared = open(&scratch, quota, 8, &clock);
        // A second process with the same options: the same segment, the same buckets.
        let again = open(&scratch, quota, 8, &clock);
        let per_token = limit.period_nanos() / limit.amount();
        let step = if quota.requests().is_some() {
            per_token / 8
        } else {
            max_cost / 8 * per_token
        };
        let refused = decide_alike(
            &[&[&shared, &again]],
            quota,
            &clock,
            checks,
            max_cost,
            Duration::from_nanos(step),
        );
        assert!(
            refused >= min_refused,
            "case {n}: {refused} of {checks} refused"
        );
    }
}

#[test]
fn a_quota_in_lowest_terms_decides_as_the_one_written() {
    // Both forms fit: each is stored as written, and every decision is the same (and the local
    // limiter's), the reduced form's units being the written form's divided by the gcd.
    let written = Quota::new(
        Some(Limit::new(6, Duration::from_millis(4), 9).unwrap()),
        Some(Limit::per_second(10, 25)),
    );
    let lowest = Quota::new(
        Some(Limit::new(3, Duration::from_millis(2), 9).unwrap()),
        Some(Limit::new(1, Duration::from_millis(100), 25).unwrap()),
    );
    let (a, b) = (
        Scratch::new("slimiter", "written"),
        Scratch::new("slimiter", "lowest"),
    );
    let clock = Arc::new(ManualClock::new());
    let written_limiter = open(&a, written, 8, &clock);
    let lowest_limiter = open(&b, lowest, 8, &clock);
    assert_eq!(written_limiter.quota(), written);
    assert_eq!(lowest_limiter.quota(), lowest);
    let refused = decide_alike(
        &[&[&written_limiter], &[&lowest_limiter]],
        written,
        &clock,
        4000,
        4,
        Duration::from_millis(150),
    );
    assert!((400..3600).contains(&refused), "{refused} of 4000 refused");
}

#[test]
fn equivalent_quotas_open_one_segment_in_the_form_it_was_created_with() {
    let scratch = Scratch::new("slimiter", "equivalent");
    let clock = Arc::new(ManualClock::new());
    let first = open(&scratch, requests(10, 20), 8, &clock);
    // 20 every 2 s is 10 a second: the same buckets, whichever form each process wrote.
    let twenty = Quota::new(
        Some(Limit::new(20, Duration::from_secs(2), 20).unwrap()),
        None,
    );
    let second = open(&scratch, twenty, 8, &clock);
    assert_eq!(second.quota(), requests(10, 20), "the segment's own form");
    for _ in 0..10 {
        assert!(first.check(b"k", 1).is_allowed());
        assert!(second.check(b"k", 1).is_allowed());
    }
    assert_eq!(
        first.check(b"k", 1).retry_after(),
        Some(Duration::from_millis(100))
    );
    // Another burst is another quota.
    let other = SharedLimiter::with_clock(
        "buckets",
        requests(10, 21),
        requests(10, 20),
        8,
        7,
        &scratch.options(),
        Arc::clone(&clock),
    );
    assert!(
        matches!(other, Err(SharedError::Mismatch { field: "quota", .. })),
        "{other:?}"
    );
    // A day quota is stored in lowest terms: it opens with its written form and with that one.
    let day = Quota::new(Some(Limit::new(1_000_000, DAY, 1_000_000).unwrap()), None);
    let lowest = Quota::new(
        Some(Limit::new(1, Duration::from_micros(86_400), 1_000_000).unwrap()),
        None,
    );
    let written_first = Scratch::new("slimiter", "day");
    assert_eq!(open(&written_first, day, 8, &clock).quota(), lowest);
    assert_eq!(open(&written_first, lowest, 8, &clock).quota(), lowest);
    let lowest_first = Scratch::new("slimiter", "day-lowest");
    assert_eq!(open(&lowest_first, lowest, 8, &clock).quota(), lowest);
    assert_eq!(open(&lowest_first, day, 8, &clock).quota(), lowest);
}

#[test]
fn a_quota_that_does_not_fit_even_in_lowest_terms_is_refused() {
    let scratch = Scratch::new("slimiter", "too-wide");
    // One a day, bursts of a million: 8.64 × 10^19 units in lowest terms (gcd 1).
    let wide = Quota::new(Some(Limit::new(1, DAY, 1_000_000).unwrap()), None);
    let q = requests(1, 1);
    for (quota, best_effort) in [(wide, q), (q, wide)] {
        assert!(matches!(
            SharedLimiter::open("x", quota, best_effort, 1, 1, &scratch.options()),
            Err(SharedError::WideQuota)
        ));
    }
    // A burst one lower than the most that fits at that rate opens.
    let most = u64::MAX / 86_400_000_000_000;
    let fits = Quota::new(Some(Limit::new(1, DAY, most).unwrap()), None);
    assert!(SharedLimiter::open("x", fits, q, 1, 1, &scratch.options()).is_ok());
    let over = Quota::new(Some(Limit::new(1, DAY, most + 1).unwrap()), None);
    assert!(matches!(
        SharedLimiter::open("y", over, q, 1, 1, &scratch.options()),
        Err(SharedError::WideQuota)
    ));
}
