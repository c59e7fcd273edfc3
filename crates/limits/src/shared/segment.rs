//! The segment file: its name and place, race-free create-or-open, the mapping, and the
//! [`Counters`] it lends to sketches.

use crate::shared::error::{CorruptReason, SharedError};
use crate::shared::layout::{
    FIXED_BYTES, FORMAT_VERSION, HEADER_BYTES, Kind, LIMITER_BLOCK_BYTES, LIMITER_BLOCK_OFFSET,
    Layout, LimiterLayout, Refusal, SLOT_BYTES,
};
use memmap2::MmapRaw;
use portable_atomic::AtomicU128;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

mod file;

use file::{Temporary, check_owner, map, open_options, reserve, set_mode, valid_mode};

/// Longest segment name: the file name adds `keepcount.` and a creator's temporary name
/// `.keepcount.<name>.<pid>.<16 hex digits>.tmp` adds at most 43 bytes, within the usual 255-byte
/// limit.
pub const MAX_NAME_BYTES: usize = 200;
/// Default permissions of a new segment file: its owner reads and writes, nobody else.
pub const DEFAULT_MODE: u32 = 0o600;
/// Every segment file is named this prefix followed by the segment name.
const FILE_PREFIX: &str = "keepcount.";

/// Where segment files live and how they are created.
///
/// - **Directory**: `/dev/shm` on Linux (memory-backed, cleared at reboot), the system's
///   temporary directory elsewhere; or the one you choose with [`dir`](Self::dir). Processes share
///   a segment when they open the same name in the same directory: containers need the directory
///   shared between them (`--ipc=host`, or a volume mounted in each).
/// - **File**: `<dir>/keepcount.<name>`.
/// - **Mode**: [`DEFAULT_MODE`] (0600) unless [`mode`](Self::mode) says otherwise; applied
///   exactly, whatever the process umask. An existing file is opened only if it grants no bits
///   beyond `mode` and, unless `mode` lets other users in, belongs to this process's user.
///
/// A name is 1 to [`MAX_NAME_BYTES`] ASCII letters, digits, `.`, `_` and `-`, not starting with
/// `.` and not containing `..`: it can name no other file or directory.
///
/// ```
/// use keepcount_limits::shared::SharedOptions;
/// let options = SharedOptions::new().dir("/tmp").mode(0o660);
/// assert_eq!(options.path("hits").unwrap(), std::path::Path::new("/tmp/keepcount.hits"));
/// ```
#[derive(Debug, Clone)]
pub struct SharedOptions {
    dir: Option<PathBuf>,
    mode: u32,
}

impl Default for SharedOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl SharedOptions {
    /// The default directory and mode.
    pub fn new() -> Self {
        Self {
            dir: None,
            mode: DEFAULT_MODE,
        }
    }

    /// Keep segment files in `dir` instead of the default.
    pub fn dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Create segment files with permissions `mode` (at most `0o777`; checked when a segment is
    /// opened), and open only existing ones no more open than that: a file with other bits, or
    /// owned by another user while `mode` lets none in, is a [`SharedError::Mismatch`] on
    /// `"mode"` or `"owner"` (another user could rewrite or truncate it).
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode;
        self
    }

    /// The file of segment `name`, or why the name is refused.
    pub fn path(&self, name: &str) -> Result<PathBuf, SharedError> {
        check_name(name)?;
        Ok(self.directory().join(format!("{FILE_PREFIX}{name}")))
    }

    fn directory(&self) -> PathBuf {
        match &self.dir {
            Some(dir) => dir.clone(),
            None if cfg!(target_os = "linux") => PathBuf::from("/dev/shm"),
            None => std::env::temp_dir(),
        }
    }
}

/// Refuses names that could leave the directory or clash with a creator's temporary file.
fn check_name(name: &str) -> Result<(), SharedError> {
    let refuse = |reason| {
        Err(SharedError::Name {
            name: name.into(),
            reason,
        })
    };
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return refuse("it must be 1 to 200 bytes long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return refuse("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    if name.starts_with('.') || name.contains("..") {
        return refuse("it must not start with '.' or contain '..'");
    }
    Ok(())
}

/// Removes segment `name`'s file. Processes that have it open keep their mapping (and counts)
/// until they close it; the next open creates a fresh segment. Removing a segment that does not
/// exist is not an error.
///
/// ```
/// use keepcount_limits::shared::{unlink, SharedOptions};
/// unlink("never-created", &SharedOptions::new().dir(std::env::temp_dir())).unwrap();
/// ```
pub fn unlink(name: &str, options: &SharedOptions) -> Result<(), SharedError> {
    let path = options.path(name)?;
    match fs::remove_file(&path) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(SharedError::io(path, err)),
        _ => Ok(()),
    }
}

/// What errors name as the "path" of lent memory, which has none.
pub(crate) const LENT_PATH: &str = "<shared buffer>";

/// The bytes of a segment: a mapped file, or memory its owner lends (in the Node binding, a
/// JavaScript `SharedArrayBuffer` that worker threads share).
enum Memory {
    Mapped(MmapRaw),
    Lent { start: NonNull<u8>, len: usize },
}

// SAFETY: lent memory is only reached through atomics (as a mapping is), and whoever lent it
// guarantees it outlives the segment (`Segment::lent`'s contract), whichever thread drops it.
unsafe impl Send for Memory {}
// SAFETY: as for Send: shared access is atomic access.
unsafe impl Sync for Memory {}

impl Memory {
    fn as_ptr(&self) -> *mut u8 {
        match self {
            Self::Mapped(map) => map.as_mut_ptr(),
            Self::Lent { start, .. } => start.as_ptr(),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Mapped(map) => map.len(),
            Self::Lent { len, .. } => *len,
        }
    }
}

/// One process's mapping of a segment file, or memory lent to be used as one.
///
/// # Safety of the mapping
/// The mapping is shared with other processes, so Rust reaches it only through atomics
/// (`AtomicI64`, `AtomicU64`), never through plain references to its bytes. A process that
/// truncates the file while others map it makes their next access fault (`SIGBUS`): keepcount
/// never does, and the file's mode keeps other users out.
pub(crate) struct Segment {
    map: Memory,
    layout: Layout,
    path: PathBuf,
    /// An in-flight segment's file, open until [`take_file`](Self::take_file) takes it: this
    /// opening's own open file description, whose locks tell live slot holders
    /// (crate::shared::inflight, "Slot table"). `None` for other kinds and lent memory.
    file: Option<File>,
}

impl Segment {
    /// Opens segment `name` with `layout`, creating it if it does not exist; a creator calls
    /// `initialise` to set the mutable header words before the segment gets its name.
    ///
    /// Race-free: a creator builds the whole file before it has a name (unnamed on Linux, else
    /// under a temporary name) and then gives it its name with `link(2)`/`linkat(2)`, which fail
    /// if the name exists; so no opener ever sees a partly
    /// written file, and of many simultaneous creators exactly one wins while the others open
    /// the winner's file. An existing file is validated (magic, version, header checksum, length)
    /// and compared with `layout`. An in-flight segment keeps the file it was opened through
    /// for its holder ([`take_file`](Self::take_file)): a new open file description per open,
    /// whose locks tell the holder alive (crate::shared::inflight, "Slot table").
    pub(crate) fn open(
        name: &str,
        layout: Layout,
        options: &SharedOptions,
        initialise: &dyn Fn(&Segment),
    ) -> Result<Self, SharedError> {
        if cfg!(not(unix)) {
            return Err(SharedError::Unsupported);
        }
        if !valid_mode(options.mode) {
            return Err(SharedError::Mode(options.mode));
        }
        let path = options.path(name)?;
        // Two rounds: a file unlinked between our failed link and our open is created again.
        for _ in 0..2 {
            match Self::open_existing(&path, options.mode) {
                Ok(segment) => return segment.check(layout),
                Err(SharedError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                }
                Err(err) => return Err(err),
            }
            if let Some(segment) = Self::create(name, &path, layout, options, initialise)? {
                return Ok(segment);
            }
        }
        Self::open_existing(&path, options.mode)?.check(layout)
    }

    /// The file an in-flight segment was opened through (`None` after the first call, or for
    /// another kind): its holder keeps it open while it holds a slot.
    pub(crate) fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }

    /// Maps the file at `path`, if its owner and permissions are what `mode` allows
    /// ([`check_owner`]), and validates its header.
    fn open_existing(path: &Path, mode: u32) -> Result<Self, SharedError> {
        let file = open_options()
            .read(true)
            .write(true)
            .open(path)
            .map_err(|err| SharedError::io(path, err))?;
        check_owner(&file, path, mode)?;
        let len = file
            .metadata()
            .map_err(|err| SharedError::io(path, err))?
            .len();
        let corrupt = |reason| SharedError::Corrupt {
            path: path.into(),
            reason,
        };
        if len < HEADER_BYTES as u64 {
            return Err(corrupt(CorruptReason::Short));
        }
        let map = Memory::Mapped(map(&file, path)?);
        let mut segment = Self::validated(map, path.into())?;
        if segment.layout.kind == Kind::Inflight {
            segment.file = Some(file);
        }
        Ok(segment)
    }

    /// `len` bytes at `start`, lent by the caller, as a segment of `layout`: validated (magic,
    /// version, header checksum, length equal to the layout's) and compared with `layout`, as an
    /// opened file is. Errors name the memory [`LENT_PATH`].
    ///
    /// # Safety
    /// `start` must be aligned to 8 bytes and valid for reads and writes of `len` bytes until the
    /// segment is dropped, and every other access to those bytes while it lives must be atomic.
    pub(crate) unsafe fn lent(
        start: NonNull<u8>,
        len: usize,
        layout: Layout,
    ) -> Result<Self, SharedError> {
        debug_assert!((start.as_ptr() as usize).is_multiple_of(8));
        if len < HEADER_BYTES {
            return Err(SharedError::Corrupt {
                path: LENT_PATH.into(),
                reason: CorruptReason::Short,
            });
        }
        Self::validated(Memory::Lent { start, len }, LENT_PATH.into())?.check(layout)
    }

    /// `map` (at least a header long) with its header validated.
    fn validated(map: Memory, path: PathBuf) -> Result<Self, SharedError> {
        let mut header = [0u8; FIXED_BYTES];
        for (chunk, word) in header
            .chunks_exact_mut(8)
            .zip(words(&map, 0, FIXED_BYTES / 8))
        {
            // Acquire: pairs with nothing a live process writes (the header is immutable once
            // named); a plain atomic read keeps a damaged file from being a data race.
            chunk.copy_from_slice(&word.load(Ordering::Acquire).to_ne_bytes());
        }
        let corrupt = |reason| SharedError::Corrupt {
            path: path.clone(),
            reason,
        };
        let (mut layout, _created) =
            Layout::decode(&header, map.len() as u64).map_err(|refusal| match refusal {
                Refusal::Corrupt(reason) => corrupt(reason),
                Refusal::Version(version) => SharedError::Mismatch {
                    path: path.clone(),
                    field: "layout version",
                    existing: version.to_string(),
                    requested: FORMAT_VERSION.to_string(),
                },
            })?;
        if layout.kind == Kind::Limiter {
            // Layout::decode checked the length against the layout, block included.
            let mut block = [0u8; LIMITER_BLOCK_BYTES];
            for (chunk, word) in block.chunks_exact_mut(8).zip(region(
                &map,
                LIMITER_BLOCK_OFFSET,
                LIMITER_BLOCK_BYTES / 8,
            )) {
                // Acquire, atomic: as for the header above.
                chunk.copy_from_slice(&word.load(Ordering::Acquire).to_ne_bytes());
            }
            let block = LimiterLayout::decode(&block, layout.shape.slots()).map_err(corrupt)?;
            layout.limiter = Some(block);
        }
        Ok(Self {
            map,
            layout,
            path,
            file: None,
        })
    }

    /// Builds the file unnamed (or under a temporary name) and links it into place; `None` if
    /// another process linked first.
    fn create(
        name: &str,
        path: &Path,
        layout: Layout,
        options: &SharedOptions,
        initialise: &dyn Fn(&Segment),
    ) -> Result<Option<Self>, SharedError> {
        let temporary = Temporary::create(name, options)?;
        let file = &temporary.file;
        let io = |err| SharedError::io(&temporary.path, err);
        set_mode(file, options.mode).map_err(io)?;
        // set_len zero-fills: every counter starts at 0.
        file.set_len(layout.total_bytes() as u64).map_err(io)?;
        reserve(file, layout.total_bytes()).map_err(io)?;
        let map = Memory::Mapped(map(file, &temporary.path)?);
        let created = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let header = layout.encode(created);
        let block = layout.limiter.map(|block| block.encode());
        let blocks = [(0, &header[..])]
            .into_iter()
            .chain(block.iter().map(|b| (LIMITER_BLOCK_OFFSET, &b[..])));
        for (offset, bytes) in blocks {
            for (chunk, word) in bytes
                .chunks_exact(8)
                .zip(region(&map, offset, bytes.len() / 8))
            {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(chunk);
                // Release: the link below publishes the file; openers map it afresh and read the
                // words from the page cache, so any ordering would do.
                word.store(u64::from_ne_bytes(bytes), Ordering::Release);
            }
        }
        // Another descriptor of the same open file description: the temporary one goes.
        let file = if layout.kind == Kind::Inflight {
            Some(file.try_clone().map_err(io)?)
        } else {
            None
        };
        let segment = Self {
            map,
            layout,
            path: path.into(),
            file,
        };
        initialise(&segment);
        match temporary.link(path) {
            Ok(()) => Ok(Some(segment)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => Ok(None),
            // The system would not link the unnamed file (see `Temporary::link`): build the
            // segment again under a temporary name, which this process now uses, once this
            // attempt's mapping and file (and the space reserved for it) are gone.
            Err(err) if !temporary.is_named() && !file::out_of_room(&err) => {
                drop(segment);
                drop(temporary);
                Self::create(name, path, layout, options, initialise)
            }
            Err(err) => Err(SharedError::io(path, err)),
        }
    }

    /// This segment, or a mismatch error if its layout is not `requested`.
    fn check(self, requested: Layout) -> Result<Self, SharedError> {
        match self.layout.difference(&requested) {
            None => Ok(self),
            Some((field, existing, requested)) => Err(SharedError::Mismatch {
                path: self.path,
                field,
                existing,
                requested,
            }),
        }
    }

    pub(crate) fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The segment file.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The header word at `offset` (a multiple of 8 below [`HEADER_BYTES`]).
    pub(crate) fn word(&self, offset: usize) -> &AtomicU64 {
        &words(&self.map, offset, 1)[0]
    }

    /// In-flight slot `index`'s words (crate::shared::inflight), `index < processes`.
    pub(crate) fn slot_words(&self, index: usize) -> &[AtomicU64] {
        let start = self.layout.slots_offset() + index * SLOT_BYTES;
        debug_assert!(index < self.layout.processes as usize);
        // SAFETY: the slot table is inside the file (total_bytes counts it) for index <
        // processes, at a multiple of 64 bytes from the (8-aligned) start, so aligned for
        // AtomicU64, and accessed only atomically.
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_ptr().add(start).cast::<AtomicU64>(),
                SLOT_BYTES / 8,
            )
        }
    }

    /// Sketch `index`'s counters (`index` below the layout's sketch count), `shape.counters()`
    /// of them.
    pub(crate) fn sketch(&self, index: usize) -> &[AtomicI64] {
        let len = self.layout.shape.counters();
        let start = HEADER_BYTES + index * len * 8;
        debug_assert!(start + len * 8 <= self.map.len());
        // SAFETY: the file is `total_bytes` long (checked when opened, set when created), and
        // `index` is below the layout's sketch count, so the range is inside the mapping (lent
        // memory: its length was checked against the layout); the mapping is page-aligned, lent
        // memory aligned to 8, so `start` (a multiple of 8) is aligned for AtomicI64, and the
        // memory lives as long as `self`. Every access through the slice is atomic.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().add(start).cast::<AtomicI64>(), len) }
    }

    /// The 16-byte word at `offset` of a limiter segment: a bucket dimension or a key identity
    /// (`crate::shared::limiter`).
    pub(crate) fn wide_word(&self, offset: usize) -> &AtomicU128 {
        assert!(offset.is_multiple_of(16) && offset + 16 <= self.map.len());
        // SAFETY: in bounds and 16-byte aligned (asserted; the mapping is page-aligned), alive
        // while `self` is; accessed only atomically. `AtomicU128` has the size and alignment of
        // `u128`, and the caller checked that it is lock-free (a lock would be this process's
        // alone).
        unsafe { AtomicU128::from_ptr(self.map.as_ptr().add(offset).cast::<u128>()) }
    }
}

/// `count` 8-byte words of `map` from byte `offset` (a multiple of 8), anywhere in the mapping.
fn region(map: &Memory, offset: usize, count: usize) -> &[AtomicU64] {
    assert!(offset.is_multiple_of(8) && offset + count * 8 <= map.len());
    // SAFETY: as `words`.
    unsafe { std::slice::from_raw_parts(map.as_ptr().add(offset).cast::<AtomicU64>(), count) }
}

/// `count` 8-byte words of `map` from byte `offset`, as atomics.
fn words(map: &Memory, offset: usize, count: usize) -> &[AtomicU64] {
    assert!(offset.is_multiple_of(8) && offset + count * 8 <= HEADER_BYTES.min(map.len()));
    // SAFETY: in bounds (asserted: callers pass constants within the header, and every segment is
    // at least a header long), aligned (a page-aligned mapping, or lent memory aligned to 8 as
    // `Segment::lent` requires; offset a multiple of 8), alive while `map` is borrowed; accessed
    // only atomically.
    unsafe { std::slice::from_raw_parts(map.as_ptr().add(offset).cast::<AtomicU64>(), count) }
}

/// Sketch counters inside a shared segment: the [`CounterStore`](crate::CounterStore) of
/// [`open_estimator`](crate::shared::open_estimator)'s sketches and of
/// [`SharedRate`](crate::shared::SharedRate).
///
/// Keeps its segment mapped: the mapping is unmapped when the last sketch over it is dropped.
pub struct Counters {
    segment: Arc<Segment>,
    index: usize,
}

impl Counters {
    pub(crate) fn new(segment: Arc<Segment>, index: usize) -> Self {
        Self { segment, index }
    }

    /// The segment file these counters live in.
    pub fn path(&self) -> &Path {
        &self.segment.path
    }
}

impl crate::CounterStore for Counters {
    #[inline]
    fn counters(&self) -> &[AtomicI64] {
        self.segment.sketch(self.index)
    }
}

impl std::fmt::Debug for Counters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counters")
            .field("path", &self.segment.path)
            .field("index", &self.index)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_cannot_leave_the_directory() {
        for bad in [
            "",
            "a/b",
            "..",
            "../x",
            "a..b",
            ".hidden",
            "a\0b",
            "é",
            &"x".repeat(201),
        ] {
            assert!(
                matches!(check_name(bad), Err(SharedError::Name { .. })),
                "{bad:?}"
            );
        }
        for good in ["a", "hits", "api.rate-limit_2", &"x".repeat(200)] {
            assert!(check_name(good).is_ok(), "{good:?}");
        }
    }

    #[test]
    fn files_are_prefixed_in_the_chosen_directory() {
        let options = SharedOptions::new().dir("/somewhere");
        assert_eq!(
            options.path("x").unwrap(),
            PathBuf::from("/somewhere/keepcount.x")
        );
    }
}
