//! [`SharedError`]: why a shared segment could not be opened or removed.

use crate::shape::ShapeError;
use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a shared segment could not be opened, created or removed.
///
/// ```
/// use keepcount_limits::shared::{SharedError, unlink, SharedOptions};
/// let err = unlink("../etc", &SharedOptions::new()).unwrap_err();
/// assert!(matches!(err, SharedError::Name { .. }));
/// assert_eq!(
///     err.to_string(),
///     "invalid shared segment name \"../etc\": only ASCII letters, digits, '.', '_' and '-' are allowed"
/// );
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SharedError {
    /// The name could reach outside the directory or is not a plain file name (see
    /// [`SharedOptions`](crate::shared::SharedOptions) for the rules).
    Name {
        /// The name as given.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// The file exists but is not a keepcount segment, or its header is damaged: it is never
    /// reinterpreted. Remove it with [`unlink`](crate::shared::unlink) and open again.
    Corrupt {
        /// The segment file.
        path: PathBuf,
        /// The first check it failed.
        reason: CorruptReason,
    },
    /// The segment exists with a different configuration from the one asked for.
    Mismatch {
        /// The segment file.
        path: PathBuf,
        /// The first field that differs: `"layout version"` (another keepcount made the file),
        /// `"kind"`, `"hashes"`, `"slots"`, `"seed"`, `"interval"`, `"processes"`, or a limiter's
        /// `"capacity"`, `"quota"` or `"bestEffort"`.
        field: &'static str,
        /// The field's value in the file; empty for `"seed"`, which is secret (error messages
        /// end up in logs, and whoever knows the seed can aim keys at one counter).
        existing: String,
        /// The value asked for; empty for `"seed"`.
        requested: String,
    },
    /// Every process slot of a shared in-flight segment is held by a live process.
    Full {
        /// The segment file.
        path: PathBuf,
        /// Its process slots.
        processes: u32,
    },
    /// The sketch shape is outside the limits.
    Shape(ShapeError),
    /// A shared in-flight segment's process slots are not in `1..=MAX_PROCESSES`.
    Processes(u32),
    /// A shared rate's interval is zero.
    ZeroInterval,
    /// A shared rate's interval is longer than the segment's 64 bits of nanoseconds hold
    /// (`u64::MAX` ns, 584 years): stored saturated, different intervals would open one segment.
    LongInterval,
    /// A shared limiter's capacity is not in `1..=MAX_CAPACITY`.
    Capacity(u32),
    /// A shared limiter's full bucket would be `2^64` units or more even in lowest terms
    /// (`burst × period / gcd(amount, period)`, the period in nanoseconds): more than a bucket
    /// word holds.
    WideQuota,
    /// The mode asks for bits beyond `0o777`, or lets the group or others read the file without
    /// writing it (see [`SharedOptions::mode`](crate::shared::SharedOptions::mode)).
    Mode(u32),
    /// This platform has no shared segments (only Unix-like systems do).
    Unsupported,
    /// This CPU has no lock-free 128-bit compare-and-swap, which a shared limiter's buckets need
    /// (only the earliest AMD64 processors lack it).
    NoWideAtomics,
    /// The directory refused the new file a segment is created in (no write permission, a
    /// read-only filesystem, no such directory): named rather than the creator's temporary file,
    /// a name the caller never gave.
    Create {
        /// The directory.
        dir: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The operating system refused an operation on the file.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

/// The header check a segment file failed, in the order they are made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptReason {
    /// Shorter than the header.
    Short,
    /// Does not start with the segment magic: not a keepcount segment.
    Magic,
    /// The header checksum does not match its contents.
    Checksum,
    /// The header names an unknown kind or an invalid shape.
    Layout,
    /// The file's length is not what its header says.
    Length,
}

impl CorruptReason {
    /// A short name for the check, as the Node binding reports it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Short => "short",
            Self::Magic => "magic",
            Self::Checksum => "checksum",
            Self::Layout => "layout",
            Self::Length => "length",
        }
    }
}

impl SharedError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io {
            path: path.into(),
            source,
        }
    }
}

impl fmt::Display for SharedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name { name, reason } => {
                write!(f, "invalid shared segment name {name:?}: {reason}")
            }
            Self::Corrupt { path, reason } => write!(
                f,
                "{} is not a valid keepcount segment ({} check failed); remove it to start afresh",
                path.display(),
                reason.as_str()
            ),
            Self::Mismatch { path, field, .. } if *field == "seed" => write!(
                f,
                "{} was created with another seed than the one requested (seeds are secret: neither is shown)",
                path.display()
            ),
            Self::Mismatch {
                path,
                field,
                existing,
                requested,
            } if *field == "layout version" => write!(
                f,
                "{} was made by another version of keepcount, with segment layout {existing} where \
                 this one reads layout {requested}. A segment outlives its processes: once no \
                 process of that version has it open, unlink it to start afresh (or open another name)",
                path.display()
            ),
            Self::Mismatch {
                path,
                field,
                existing,
                requested,
            } => write!(
                f,
                "{} was created with {field} {existing}, not {requested} as requested",
                path.display()
            ),
            Self::Full { path, processes } => write!(
                f,
                "all {processes} process slots of {} are held by live processes",
                path.display()
            ),
            Self::Shape(err) => write!(f, "bad shared sketch shape: {err}"),
            Self::Processes(processes) => write!(
                f,
                "process slots must be between 1 and {}, got {processes}",
                crate::shared::inflight::MAX_PROCESSES
            ),
            Self::ZeroInterval => f.write_str("the rate interval must be longer than zero"),
            Self::LongInterval => f.write_str(
                "the rate interval must be at most 2^64 - 1 nanoseconds (about 584 years)",
            ),
            Self::Capacity(capacity) => write!(
                f,
                "the key capacity must be between 1 and {}, got {capacity}",
                crate::shared::limiter::MAX_CAPACITY
            ),
            Self::WideQuota => f.write_str(
                "a shared limiter's full bucket, burst × period in nanoseconds / gcd(amount, \
                 period), must be below 2^64",
            ),
            Self::Mode(mode) => write!(
                f,
                "the file mode must be within 0o777 and give the group and others read and write \
                 together or neither, got {mode:#o}"
            ),
            Self::Unsupported => {
                f.write_str("shared segments need a Unix-like system (Linux, macOS)")
            }
            Self::NoWideAtomics => f.write_str(
                "a shared limiter needs a CPU with a lock-free 128-bit compare-and-swap",
            ),
            Self::Create { dir, source } => write!(
                f,
                "cannot create a segment file in {}: {source}",
                dir.display()
            ),
            Self::Io { path, source } => write!(f, "{}: {source}", path.display()),
        }
    }
}

impl std::error::Error for SharedError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } | Self::Create { source, .. } => Some(source),
            Self::Shape(err) => Some(err),
            _ => None,
        }
    }
}

impl From<ShapeError> for SharedError {
    fn from(err: ShapeError) -> Self {
        Self::Shape(err)
    }
}
