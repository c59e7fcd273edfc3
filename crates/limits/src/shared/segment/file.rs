//! The segment's file as the system sees it: a creator's unnamed or temporary file, the open flags and
//! permissions, the space reserved for it, and its mapping.

use super::{DEFAULT_MODE, FILE_PREFIX, SharedOptions};
use crate::shared::error::SharedError;
use memmap2::MmapRaw;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A creator's file before it has its name. On Linux it is an unnamed file in the directory
/// (`O_TMPFILE`): a creator killed before linking it (while reserving a large segment, say) leaves
/// nothing behind, where a named temporary file stayed as garbage holding its whole size of
/// `/dev/shm` until someone deleted it. Elsewhere, or where the filesystem has no unnamed files
/// (or `/proc`, through which one is linked, is not mounted), it has a temporary name and is
/// removed when dropped (after the link, or on error).
pub(super) struct Temporary {
    pub(super) file: File,
    /// The temporary name, or the directory of an unnamed file: what errors name.
    pub(super) path: PathBuf,
    named: bool,
}

/// Set once this process failed to link an unnamed file (a `/proc` that is not procfs, a sandbox
/// that refuses the link): its later creators go straight to named files.
static UNNAMED_UNLINKABLE: AtomicBool = AtomicBool::new(false);

impl Temporary {
    pub(super) fn create(name: &str, options: &SharedOptions) -> Result<Self, SharedError> {
        let dir = options.directory();
        // Relaxed: a hint; a creator that misses it fails its link and falls back the same way.
        if !UNNAMED_UNLINKABLE.load(Ordering::Relaxed)
            && let Some(temporary) = Self::unnamed(&dir)
        {
            return Ok(temporary);
        }
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        // Relaxed: only uniqueness within the process matters.
        let n = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        // A pid alone does not make the name unique: a container restarted after a creator was
        // killed mid-create gets the same pid (often 1) and found its name taken ("File exists")
        // on every start, and containers sharing the directory can run the same pid at once.
        // The process's random number, plus the sequence, can do neither.
        let unique = process_random().wrapping_add(n);
        let path = dir.join(format!(
            ".{FILE_PREFIX}{name}.{}.{unique:016x}.tmp",
            std::process::id()
        ));
        // The directory, not the temporary name, is what the caller gave and what to fix (an
        // unnamed file's failure, ignored above, is the same refusal).
        let file = open_options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| SharedError::Create {
                dir: dir.clone(),
                source,
            })?;
        Ok(Self {
            file,
            path,
            named: true,
        })
    }

    /// An unnamed file in `dir`, or `None` where there can be none: any failure falls back to a
    /// named file, whose errors (a missing directory, a refused permission) say the same.
    #[cfg(target_os = "linux")]
    fn unnamed(dir: &Path) -> Option<Self> {
        use std::os::unix::fs::OpenOptionsExt;
        if !Path::new(PROC_FDS).is_dir() {
            return None;
        }
        let file = open_options()
            .read(true)
            .write(true)
            .custom_flags(libc::O_TMPFILE)
            .open(dir)
            .ok()?;
        Some(Self {
            file,
            path: dir.into(),
            named: false,
        })
    }

    #[cfg(not(target_os = "linux"))]
    fn unnamed(_dir: &Path) -> Option<Self> {
        None
    }

    /// Whether the file has a temporary name (else it is unnamed).
    pub(super) fn is_named(&self) -> bool {
        self.named
    }

    /// Gives the file the name `to`; `AlreadyExists` if another process got there first. An
    /// unnamed file that cannot be linked for another reason than either or a lack of room makes
    /// this process's later creators use named files: the caller builds its segment again under
    /// one.
    pub(super) fn link(&self, to: &Path) -> io::Result<()> {
        if self.named {
            return fs::hard_link(&self.path, to);
        }
        let linked = link_unnamed(&self.file, to);
        if linked
            .as_ref()
            .is_err_and(|err| err.kind() != io::ErrorKind::AlreadyExists && !out_of_room(err))
        {
            UNNAMED_UNLINKABLE.store(true, Ordering::Relaxed);
        }
        linked
    }
}

/// Whether `err` says the filesystem or the system is out of room (space, quota, memory): a
/// named file would fail the same, so it is no reason to give up unnamed ones.
pub(super) fn out_of_room(err: &io::Error) -> bool {
    matches!(
        err.kind(),
        io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded | io::ErrorKind::OutOfMemory
    )
}

/// Where Linux lists this process's open files, one symbolic link per descriptor.
#[cfg(target_os = "linux")]
const PROC_FDS: &str = "/proc/self/fd";

/// Links the unnamed file `file` as `to`. `linkat` with `AT_EMPTY_PATH` would need
/// `CAP_DAC_READ_SEARCH`; through the descriptor's entry in `/proc` it needs nothing.
#[cfg(target_os = "linux")]
fn link_unnamed(file: &File, to: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStrExt;
    let from = CString::new(format!("{PROC_FDS}/{}", file.as_raw_fd()))?;
    let to = CString::new(to.as_os_str().as_bytes())?;
    // SAFETY: both paths are NUL-terminated and live across the call; linkat touches nothing
    // but the filesystem.
    let linked = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    if linked == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Never called: only Linux makes unnamed files.
#[cfg(not(target_os = "linux"))]
fn link_unnamed(_file: &File, _to: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// A random number drawn once per process, from the standard library's per-process hash keys
/// (seeded by the system's random source).
fn process_random() -> u64 {
    use std::hash::{BuildHasher, RandomState};
    static RANDOM: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *RANDOM.get_or_init(|| RandomState::new().hash_one(std::process::id()))
}

impl Drop for Temporary {
    fn drop(&mut self) {
        // Best effort: a leftover temporary file is garbage, never mistaken for a segment. An
        // unnamed one goes with its descriptor.
        if self.named {
            let _ = fs::remove_file(&self.path);
        }
    }
}

#[cfg(unix)]
pub(super) fn open_options() -> OpenOptions {
    use std::os::unix::fs::OpenOptionsExt;
    let mut options = OpenOptions::new();
    // Owner-only while it is being built; O_NOFOLLOW: a symlink planted under a segment's name
    // in a shared directory is refused, not followed.
    options.mode(DEFAULT_MODE).custom_flags(libc::O_NOFOLLOW);
    options
}

#[cfg(not(unix))]
pub(super) fn open_options() -> OpenOptions {
    OpenOptions::new()
}

/// Allocates the file's `len` bytes on its filesystem now. `set_len` makes a sparse file, whose
/// pages a tmpfs (`/dev/shm`, 64 MiB in a default Docker container) or a full disk allocates
/// only when first written through the mapping, and a page it cannot allocate then is a `SIGBUS`
/// that kills every process counting in it. Allocated here, a segment that does not fit is an
/// `ERR_KEEPCOUNT_IO` error at creation (`No space left on device`) instead.
///
/// A filesystem that cannot reserve space (`EOPNOTSUPP` or `EINVAL`: some NFS and FUSE mounts,
/// where musl does not emulate it as glibc does) keeps the sparse file, as before; a signal during
/// the call (`EINTR`, which tmpfs returns while it zeroes a large file) retries it.
#[cfg(target_os = "linux")]
pub(super) fn reserve(file: &File, len: usize) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len =
        libc::off_t::try_from(len).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    loop {
        // SAFETY: the descriptor is open for writing for the duration of the call;
        // posix_fallocate touches nothing but the file.
        match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
            0 => return Ok(()),
            libc::EINTR => {}
            libc::EOPNOTSUPP | libc::EINVAL => return Ok(()),
            // posix_fallocate returns the error number rather than setting errno.
            errno => return Err(io::Error::from_raw_os_error(errno)),
        }
    }
}

/// Elsewhere the file stays sparse: see the Linux version.
#[cfg(not(target_os = "linux"))]
pub(super) fn reserve(_file: &File, _len: usize) -> io::Result<()> {
    Ok(())
}

#[cfg(unix)]
pub(super) fn set_mode(file: &File, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Exactly `mode`: creation masks it with the umask.
    file.set_permissions(fs::Permissions::from_mode(mode))
}

/// Whether `mode` is one segments are made and opened with: within `0o777`, and giving the group
/// and others read and write together or neither. Read alone serves no keepcount process (they
/// open segments to write), and it would let a user who cannot write the file still lock an
/// in-flight segment's slot bytes (filling every slot, or keeping a dead holder's counts for good:
/// `shared::inflight`, "Slot table") and read its seed.
pub(super) fn valid_mode(mode: u32) -> bool {
    mode <= 0o777
        && [(mode >> 3) & 0o6, mode & 0o6]
            .iter()
            .all(|rw| matches!(rw, 0 | 0o6))
}

/// Refuses a file that users other than those `mode` lets in could write, truncate or lock: one
/// with permission bits `mode` does not grant (or that give the group or others read without
/// write, [`valid_mode`]), or one owned by another user unless `mode` lets that user in (others
/// read and write: anyone; the group's: a file of one of this process's groups). Anyone can create
/// files in `/dev/shm`: another local user creating the segment's name first, world-writable, for
/// the shape and seed a service uses (seeds sit in config files), could otherwise rewrite its
/// counts, or truncate the file and kill it with `SIGBUS`; and root opens any file.
#[cfg(unix)]
pub(super) fn check_owner(file: &File, path: &Path, mode: u32) -> Result<(), SharedError> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata().map_err(|err| SharedError::io(path, err))?;
    let bits = meta.mode() & 0o777;
    let mismatch = |field, existing: String, requested: String| SharedError::Mismatch {
        path: path.into(),
        field,
        existing,
        requested,
    };
    if bits & !mode != 0 || !valid_mode(bits) {
        return Err(mismatch("mode", format!("{bits:#o}"), format!("{mode:#o}")));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let trusted = meta.uid() == me
        || mode & 0o006 == 0o006
        || (mode & 0o060 == 0o060 && in_my_groups(meta.gid()));
    if !trusted {
        return Err(mismatch(
            "owner",
            format!("uid {} (group {})", meta.uid(), meta.gid()),
            format!("uid {me}"),
        ));
    }
    Ok(())
}

/// Whether `gid` is this process's effective group or one of its supplementary groups.
#[cfg(unix)]
fn in_my_groups(gid: u32) -> bool {
    // SAFETY: getegid has no preconditions and cannot fail.
    if unsafe { libc::getegid() } == gid {
        return true;
    }
    // SAFETY: a zero-length query writes nothing and returns the count.
    let count = unsafe { libc::getgroups(0, std::ptr::null_mut()) };
    let Ok(len) = usize::try_from(count) else {
        return false;
    };
    let mut groups = vec![0 as libc::gid_t; len];
    // SAFETY: `groups` has room for `count` entries.
    let got = unsafe { libc::getgroups(count, groups.as_mut_ptr()) };
    usize::try_from(got).is_ok_and(|got| groups[..got.min(len)].contains(&gid))
}

#[cfg(not(unix))]
pub(super) fn check_owner(_file: &File, _path: &Path, _mode: u32) -> Result<(), SharedError> {
    Ok(())
}

#[cfg(not(unix))]
pub(super) fn set_mode(_file: &File, _mode: u32) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

pub(super) fn map(file: &File, path: &Path) -> Result<MmapRaw, SharedError> {
    MmapRaw::map_raw(file).map_err(|err| SharedError::io(path, err))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn an_unnamed_file_that_cannot_be_linked_turns_later_creators_to_named_files() {
        // /dev/shm and the temporary directory are usually different filesystems, and a link
        // across them fails (EXDEV), as a link through a fake /proc does.
        let shm = SharedOptions::new().dir("/dev/shm");
        let elsewhere = std::env::temp_dir().join(format!("kc-unlinkable-{}", std::process::id()));
        let Ok(temporary) = Temporary::create("unlinkable", &shm) else {
            return;
        };
        if temporary.is_named() {
            eprintln!("skipped: no unnamed files in /dev/shm here");
            return;
        }
        match temporary.link(&elsewhere) {
            Err(err) if err.raw_os_error() == Some(libc::EXDEV) => {}
            other => {
                let _ = fs::remove_file(&elsewhere);
                eprintln!(
                    "skipped: /dev/shm and {} link ({other:?})",
                    elsewhere.display()
                );
                return;
            }
        }
        let next = Temporary::create("unlinkable", &shm).unwrap();
        assert!(
            next.is_named(),
            "after a failed link, creators use named files"
        );
        UNNAMED_UNLINKABLE.store(false, Ordering::Relaxed);
    }
}
