//! The mismatch error of a shared segment opened with other options than it was created with,
//! in the words of the JavaScript call that opened it: the crate shows values as Rust users give
//! them (an interval in nanoseconds), where `openShared` took `intervalMs`, and the fix (which
//! `unlink` call) depends on the class and options the segment was opened with.

use crate::error::{Class, Failure};
use keepcount_limits::limiter::{Limit, Quota};
use keepcount_limits::shared::SharedError;
use std::borrow::Cow;

/// The package call that opened a shared segment, for the fix its mismatch errors name: `class`
/// is the JavaScript class (`Rate` for `Rate.openShared`), `name` and `dir` are as it was given.
pub(crate) struct Opener<'a> {
    pub(crate) class: &'static str,
    pub(crate) name: &'a str,
    pub(crate) dir: Option<&'a str>,
    /// A limiter's `quota` and `bestEffort` as the call gave them, which a mismatch of either
    /// shows as given: the crate shows both quotas as the segment keeps them, a limit too wide
    /// for its bucket as written in lowest terms (a million a day as 1 per 86.4 ms). `None` for
    /// the classes without quotas.
    pub(crate) quotas: Option<(Quota, Quota)>,
}

impl Opener<'_> {
    /// The failure for `err`, met opening the segment. A mismatch names the field as the option
    /// `openShared` takes it (`intervalMs`, in milliseconds) and says how to go on; every other
    /// error is as `From<SharedError>` makes it.
    pub(crate) fn failure(&self, err: SharedError) -> Failure {
        let SharedError::Mismatch {
            path,
            field,
            existing,
            requested,
        } = &err
        else {
            return err.into();
        };
        let path = path.display();
        let unlink = self.unlink_call();
        let fix = format!(
            "to change them, call {unlink} once no process has it open (or use a new name)"
        );
        let message = match *field {
            "layout version" => format!(
                "{path} was made by another version of keepcount, with segment layout {existing} \
                 where this one reads layout {requested}. A segment outlives its processes: once \
                 no process of that version has it open, call {unlink} to start afresh (or use a \
                 new name)"
            ),
            // Another kind of segment has the name: other processes may be counting in it, so the
            // fix is another name, never unlinking theirs.
            "kind" => {
                let (name, class) = (js_string(self.name), self.class);
                match class_of_kind(existing) {
                    Some(existing) => {
                        let a = if existing.starts_with(['A', 'E', 'I']) {
                            "an"
                        } else {
                            "a"
                        };
                        format!(
                            "the name {name} is taken by {a} {existing} segment: use another \
                             name ({path} was created by {existing}.openShared, not \
                             {class}.openShared as requested)"
                        )
                    }
                    None => format!(
                        "the name {name} is taken by a segment of another kind ({existing}, not \
                         {requested}): use another name ({path} was not created by \
                         {class}.openShared)"
                    ),
                }
            }
            // The seed is secret: never in a message (messages end up in logs).
            "seed" => format!(
                "{path} was created with another seed than the one requested (seeds are secret: \
                 neither is shown): every process must open it with the same options; {fix}"
            ),
            _ => {
                let given = match (*field, self.quotas) {
                    ("quota", Some((quota, _))) | ("bestEffort", Some((_, quota))) => Some(quota),
                    _ => None,
                };
                let (field, existing, requested) = option_values(field, existing, requested, given);
                format!(
                    "{path} was created with {field} {existing}, not {requested} as requested: \
                     every process must open it with the same options; {fix}"
                )
            }
        };
        Failure {
            class: Class::Error,
            code: "ERR_KEEPCOUNT_MISMATCH",
            message: format!("Cannot open the shared segment: {message}"),
        }
    }

    /// The call that removes the segment, as the user would write it: `Rate.unlink('name')`,
    /// with `{ dir: '…' }` if the segment is not in the default directory.
    fn unlink_call(&self) -> String {
        let name = js_string(self.name);
        match self.dir {
            Some(dir) => format!(
                "{}.unlink({name}, {{ dir: {} }})",
                self.class,
                js_string(dir)
            ),
            None => format!("{}.unlink({name})", self.class),
        }
    }
}

/// The JavaScript class that opens segments of the crate's `kind` (`Layout`'s kind names).
fn class_of_kind(kind: &str) -> Option<&'static str> {
    match kind {
        "estimator" => Some("Estimator"),
        "rate" => Some("Rate"),
        "in-flight" => Some("Inflight"),
        "limiter" => Some("Limiter"),
        _ => None,
    }
}

/// What follows a segment's quota in a mismatch when a limit of it is in lowest terms: the segment
/// keeps a limit whose full bucket would not fit its 64-bit word as written in lowest terms, and
/// keeps only that form, so a quota created as a million a day reads 1 per 86.4 ms, which nobody
/// wrote. The segment cannot tell whether a limit in lowest terms was written so: any brings the
/// note, which states the rule rather than that it applied (as to 1 per second, written so).
const LOWEST_TERMS_NOTE: &str = " (as the segment keeps it: a limit whose full bucket would not \
     fit 64 bits as written is kept in lowest terms, amount and periodMs divided by their greatest \
     common divisor, which decides alike)";

/// A mismatched `field` and its two values as `openShared` takes them: the interval as
/// `intervalMs` in milliseconds, quotas as the limiter's `quota` reports them, the segment's
/// followed by [`LOWEST_TERMS_NOTE`] when a limit of it is in lowest terms, the requested one as
/// `given` when the opener knows it. Values the crate shows in a way this does not know are left
/// as they are.
fn option_values<'a>(
    field: &'a str,
    existing: &'a str,
    requested: &'a str,
    given: Option<Quota>,
) -> (&'a str, Cow<'a, str>, Cow<'a, str>) {
    let converted = match field {
        "interval" => interval_ms(existing)
            .zip(interval_ms(requested))
            .map(|pair| ("intervalMs", pair)),
        "quota" | "bestEffort" => {
            let requested = match given {
                Some(quota) => Some(js_quota(&limits_of(&quota))),
                None => crate_limits(requested).map(|limits| js_quota(&limits)),
            };
            crate_limits(existing)
                .zip(requested)
                .map(|(limits, requested)| {
                    let note = if limits.iter().any(|limit| gcd(limit.1, limit.2) == 1) {
                        LOWEST_TERMS_NOTE
                    } else {
                        ""
                    };
                    (field, (format!("{}{note}", js_quota(&limits)), requested))
                })
        }
        _ => None,
    };
    match converted {
        Some((field, (existing, requested))) => (field, existing.into(), requested.into()),
        None => (field, existing.into(), requested.into()),
    }
}

/// An interval as the crate's mismatch shows it (`1000000000 ns`) in milliseconds.
fn interval_ms(nanos: &str) -> Option<String> {
    Some(millis(nanos.strip_suffix(" ns")?.parse().ok()?))
}

/// A quota's limits: dimension name, amount, period in nanoseconds and burst.
type Limits = Vec<(&'static str, u64, u64, u64)>;

/// `quota`'s limits.
fn limits_of(quota: &Quota) -> Limits {
    let dimensions: [(&str, Option<Limit>); 2] =
        [("requests", quota.requests()), ("units", quota.units())];
    dimensions
        .into_iter()
        .filter_map(|(name, limit)| {
            let limit = limit?;
            // A limit's period is made from whole nanoseconds in a u64: `as_nanos` fits one.
            let period = u64::try_from(limit.period().as_nanos()).unwrap_or(u64::MAX);
            Some((name, limit.amount(), period, limit.burst()))
        })
        .collect()
}

/// `nanos` in milliseconds as JavaScript prints the number.
fn millis(nanos: u64) -> String {
    if nanos.is_multiple_of(1_000_000) {
        (nanos / 1_000_000).to_string()
    } else {
        // Below 2^64 ns: Rust prints the f64 without an exponent, as JavaScript does below 1e21.
        (nanos as f64 / 1e6).to_string()
    }
}

/// The limits of a quota as the crate's mismatch shows it: `(requests 10 per 1000000000 ns,
/// burst 20; units unlimited)`.
fn crate_limits(quota: &str) -> Option<Limits> {
    let inner = quota.strip_prefix("(requests ")?.strip_suffix(')')?;
    let (requests, units) = inner.split_once("; units ")?;
    let mut limits = Vec::new();
    for (name, limit) in [("requests", requests), ("units", units)] {
        if limit == "unlimited" {
            continue;
        }
        let (amount, rest) = limit.split_once(" per ")?;
        let (period, burst) = rest.split_once(" ns, burst ")?;
        limits.push((
            name,
            amount.parse().ok()?,
            period.parse().ok()?,
            burst.parse().ok()?,
        ));
    }
    Some(limits)
}

/// A quota's `limits` as `Limiter`'s `quota` reports them: `{ requests: { amount: 10, periodMs:
/// 1000, burst: 20 } }`.
fn js_quota(limits: &Limits) -> String {
    if limits.is_empty() {
        return "{}".into();
    }
    let limits: Vec<String> = limits
        .iter()
        .map(|&(name, amount, period, burst)| {
            let period = millis(period);
            format!("{name}: {{ amount: {amount}, periodMs: {period}, burst: {burst} }}")
        })
        .collect();
    format!("{{ {} }}", limits.join(", "))
}

/// The greatest common divisor of `a` and `b` (Euclid's): 1 for a limit in lowest terms.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `text` as a single-quoted JavaScript string literal.
fn js_string(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('\'');
    for c in text.chars() {
        match c {
            '\'' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    quoted.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => quoted.push(c),
        }
    }
    quoted.push('\'');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn mismatch(field: &'static str, existing: &str, requested: &str) -> SharedError {
        SharedError::Mismatch {
            path: "/dev/shm/keepcount.api".into(),
            field,
            existing: existing.into(),
            requested: requested.into(),
        }
    }

    #[test]
    fn a_mismatch_speaks_the_options_of_open_shared_and_names_the_unlink() {
        let rate = Opener {
            class: "Rate",
            name: "api",
            dir: None,
            quotas: None,
        };
        let failure = rate.failure(mismatch("interval", "1000000000 ns", "60000000000 ns"));
        assert_eq!(
            (failure.class, failure.code),
            (Class::Error, "ERR_KEEPCOUNT_MISMATCH")
        );
        assert_eq!(
            failure.message,
            "Cannot open the shared segment: /dev/shm/keepcount.api was created with intervalMs \
             1000, not 60000 as requested: every process must open it with the same options; to \
             change them, call Rate.unlink('api') once no process has it open (or use a new name)"
        );
        let limiter = Opener {
            class: "Limiter",
            name: "api",
            dir: Some("/run/it's"),
            quotas: None,
        };
        let failure = limiter.failure(mismatch(
            "quota",
            "(requests 10 per 1000000000 ns, burst 20; units 5 per 1500000 ns, burst 5)",
            "(requests unlimited; units unlimited)",
        ));
        assert_eq!(
            failure.message,
            "Cannot open the shared segment: /dev/shm/keepcount.api was created with quota \
             { requests: { amount: 10, periodMs: 1000, burst: 20 }, units: { amount: 5, periodMs: \
             1.5, burst: 5 } }, not {} as requested: every process must open it with the same \
             options; to change them, call Limiter.unlink('api', { dir: '/run/it\\'s' }) once no \
             process has it open (or use a new name)"
        );
        // A segment's limit in lowest terms is said to be, and the requested quota is shown as
        // given where the opener knows it: a million a day, not the segment's 1 per 86.4 ms.
        let day = |burst| Limit::new(1_000_000, Duration::from_secs(86_400), burst).unwrap();
        let given = Opener {
            quotas: Some((Quota::new(Some(day(999_999)), None), Quota::UNLIMITED)),
            ..limiter
        };
        let failure = given.failure(mismatch(
            "quota",
            "(requests 1 per 86400000 ns, burst 1000000; units unlimited)",
            "(requests 1 per 86400000 ns, burst 999999; units unlimited)",
        ));
        assert!(failure.message.contains(
            "created with quota { requests: { amount: 1, periodMs: 86.4, burst: 1000000 } } (as \
             the segment keeps it: a limit whose full bucket would not fit 64 bits as written is \
             kept in lowest terms, amount and periodMs divided by their greatest common divisor, \
             which decides alike), not { requests: { amount: 1000000, periodMs: 86400000, burst: \
             999999 } } as requested: every process"
        ));
        // Best effort's given quota is the second; a segment limit not in lowest terms, no note.
        let failure = given.failure(mismatch(
            "bestEffort",
            "(requests unlimited; units 10 per 1000000000 ns, burst 20)",
            "(requests unlimited; units unlimited)",
        ));
        assert!(failure.message.contains(
            "created with bestEffort { units: { amount: 10, periodMs: 1000, burst: 20 } }, not {} \
             as requested"
        ));
        assert_eq!(
            (gcd(0, 7), gcd(86_400_000_000_000, 1_000_000)),
            (7, 1_000_000)
        );
        // Another kind's segment: the fix is another name, never unlinking the other kind's.
        let kind = rate.failure(mismatch("kind", "in-flight", "rate"));
        assert_eq!(
            kind.message,
            "Cannot open the shared segment: the name 'api' is taken by an Inflight segment: use \
             another name (/dev/shm/keepcount.api was created by Inflight.openShared, not \
             Rate.openShared as requested)"
        );
        let kind = limiter.failure(mismatch("kind", "limiter", "rate"));
        assert!(
            kind.message
                .contains("the name 'api' is taken by a Limiter segment: use another name (")
        );
        let kind = rate.failure(mismatch("kind", "gauge", "rate"));
        assert_eq!(
            kind.message,
            "Cannot open the shared segment: the name 'api' is taken by a segment of another kind \
             (gauge, not rate): use another name (/dev/shm/keepcount.api was not created by \
             Rate.openShared)"
        );
        let seed = rate.failure(mismatch("seed", "", ""));
        assert!(
            seed.message
                .contains("(seeds are secret: neither is shown): every process")
        );
        let layout = rate.failure(mismatch("layout version", "2", "4"));
        assert!(layout.message.ends_with(
            "once no process of that version has it open, call Rate.unlink('api') to start \
             afresh (or use a new name)"
        ));
        // Values shown in a way this does not know stay as the crate shows them.
        let odd = rate.failure(mismatch("interval", "1 s", "2 s"));
        assert!(
            odd.message
                .contains("was created with interval 1 s, not 2 s as requested")
        );
        let odd = rate.failure(mismatch(
            "quota",
            "(requests a lot)",
            "(requests unlimited; units unlimited)",
        ));
        assert!(
            odd.message
                .contains("with quota (requests a lot), not (requests unlimited; units")
        );
        // Other errors are as `From<SharedError>` makes them.
        assert_eq!(
            rate.failure(SharedError::Unsupported).code,
            "ERR_KEEPCOUNT_UNSUPPORTED"
        );
    }

    #[test]
    fn js_strings_escape_what_a_literal_cannot_hold() {
        assert_eq!(
            js_string("a'b\\c\nd\u{7}\u{2028}é"),
            "'a\\'b\\\\c\\nd\\u0007\\u2028é'"
        );
        assert_eq!(millis(250_000), "0.25");
        assert_eq!(
            millis(u64::MAX / 1_000_000 * 1_000_000),
            (u64::MAX / 1_000_000).to_string()
        );
    }
}
