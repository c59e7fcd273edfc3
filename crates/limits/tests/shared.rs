//! Shared segments across real processes: this test binary re-runs itself as the child
//! processes (`child`, selected by the `KEEPCOUNT_SHARED_CHILD` environment variable), so every
//! "process" below is a separate address space mapping the same file.

use keepcount_limits::Shape;
use keepcount_limits::shared::{
    CorruptReason, SharedError, SharedOptions, SharedRate, open_estimator, unlink,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{Dir, SEED, result, role, say, shape, spawn, wait_for};

/// Increments per thread in `incr` children.
const PER_THREAD: isize = 50_000;
/// Threads per `incr` child.
const THREADS: usize = 2;

/// The child side: does nothing in a normal test run.
#[test]
fn child() {
    let Some((role, dir, name)) = role() else {
        return;
    };
    let options = SharedOptions::new().dir(&dir);
    match role.as_str() {
        "incr" => {
            let est = open_estimator(&name, shape(), SEED, &options).unwrap();
            wait_for(&dir.join("go"));
            std::thread::scope(|scope| {
                for _ in 0..THREADS {
                    scope.spawn(|| {
                        for _ in 0..PER_THREAD {
                            est.incr("hot", 1);
                        }
                    });
                }
            });
            say(est.get("hot").to_string());
        }
        "read" => {
            let est = open_estimator(&name, shape(), SEED, &options).unwrap();
            say(est.get("hot").to_string());
        }
        "create-big" => {
            // 4 × 2^24 counters: 512 MiB to reserve, which takes a tmpfs a tenth of a second.
            let big = Shape::new(4, 1 << 24).unwrap();
            let outcome = open_estimator(&name, big, SEED, &options).map(|est| est.incr("k", 1));
            say(format!("{outcome:?}"));
        }
        "open" => {
            wait_for(&dir.join("go"));
            let outcome =
                open_estimator(&name, shape(), SEED, &options).map(|est| est.incr("k", 1));
            say(format!("{outcome:?}"));
        }
        "hold" => {
            let est = open_estimator(&name, shape(), SEED, &options).unwrap();
            est.incr("k", 5);
            say("holding".into());
            // Killed by the parent.
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown role {other}"),
    }
}

#[test]
fn four_processes_incrementing_one_key_reach_the_exact_total() {
    let dir = Dir::new("four");
    let children: Vec<_> = (0..4).map(|_| spawn("incr", &dir, "hits")).collect();
    fs::write(dir.go(), b"").unwrap();
    let total = 4 * THREADS as isize * PER_THREAD;
    for child in children {
        let seen: isize = result(child).parse().unwrap();
        assert!(seen > 0 && seen <= total, "{seen}");
    }
    let est = open_estimator("hits", shape(), SEED, &dir.options()).unwrap();
    assert_eq!(est.get("hot"), total);
    // Every process reads the same estimate afterwards.
    let readers: Vec<_> = (0..4).map(|_| spawn("read", &dir, "hits")).collect();
    for reader in readers {
        assert_eq!(result(reader), total.to_string());
    }
}

#[test]
fn eight_simultaneous_openers_share_one_segment() {
    let dir = Dir::new("eight");
    let children: Vec<_> = (0..8).map(|_| spawn("open", &dir, "race")).collect();
    // Give them time to reach the start line, so they create-or-open together.
    std::thread::sleep(Duration::from_millis(200));
    fs::write(dir.go(), b"").unwrap();
    for child in children {
        let outcome = result(child);
        assert!(outcome.starts_with("Ok("), "{outcome}");
    }
    let est = open_estimator("race", shape(), SEED, &dir.options()).unwrap();
    assert_eq!(est.get("k"), 8);
    // Only the segment and the start signal: every creator's temporary file is gone.
    let mut names: Vec<_> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["go", "keepcount.race"]);
}

#[test]
fn a_stale_segment_from_a_killed_run_is_reused_until_unlinked() {
    let dir = Dir::new("stale");
    let mut child = spawn("hold", &dir, "stale");
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let holding = std::io::BufRead::lines(stdout).find(|line| {
        line.as_ref()
            .is_ok_and(|line| line.ends_with("RESULT holding"))
    });
    assert!(holding.is_some());
    child.kill().unwrap();
    child.wait().unwrap();

    let options = dir.options();
    let est = open_estimator("stale", shape(), SEED, &options).unwrap();
    assert_eq!(est.get("k"), 5);
    unlink("stale", &options).unwrap();
    // This process still maps the old segment; a new open starts afresh.
    assert_eq!(est.get("k"), 5);
    let fresh = open_estimator("stale", shape(), SEED, &options).unwrap();
    assert_eq!(fresh.get("k"), 0);
    unlink("stale", &options).unwrap();
    unlink("stale", &options).unwrap();
}

#[test]
fn a_different_configuration_is_a_mismatch_naming_the_field() {
    let dir = Dir::new("mismatch");
    let options = dir.options();
    let _est = open_estimator("m", shape(), SEED, &options).unwrap();
    let mismatch = |err: SharedError| match err {
        SharedError::Mismatch {
            field,
            existing,
            requested,
            ..
        } => (field, existing, requested),
        other => panic!("{other:?}"),
    };
    let other = Shape::new(4, 2048).unwrap();
    let err = open_estimator("m", other, SEED, &options).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("was created with slots 1024, not 2048 as requested")
    );
    assert_eq!(mismatch(err), ("slots", "1024".into(), "2048".into()));
    let err = open_estimator("m", Shape::new(3, 1024).unwrap(), SEED, &options).unwrap_err();
    assert_eq!(mismatch(err).0, "hashes");
    let err = open_estimator("m", shape(), 7, &options).unwrap_err();
    // Neither seed in the error: it is secret, and messages end up in logs.
    assert!(err.to_string().ends_with(
        "was created with another seed than the one requested (seeds are secret: neither is shown)"
    ));
    assert_eq!(mismatch(err), ("seed", String::new(), String::new()));
    let second = Duration::from_secs(1);
    let err = SharedRate::open("m", second, shape(), SEED, &options).unwrap_err();
    assert_eq!(mismatch(err), ("kind", "estimator".into(), "rate".into()));
    let _rate = SharedRate::open("r", second, shape(), SEED, &options).unwrap();
    let err = SharedRate::open("r", second * 2, shape(), SEED, &options).unwrap_err();
    assert_eq!(
        mismatch(err),
        ("interval", "1000000000 ns".into(), "2000000000 ns".into())
    );
}

#[test]
fn damaged_files_are_refused_without_a_panic() {
    let dir = Dir::new("corrupt");
    let options = dir.options();
    let corrupt = |name: &str| match open_estimator(name, shape(), SEED, &options) {
        Err(SharedError::Corrupt { reason, .. }) => reason,
        other => panic!("{other:?}"),
    };
    let path = |name: &str| options.path(name).unwrap();

    drop(open_estimator("flipped", shape(), SEED, &options).unwrap());
    let mut bytes = fs::read(path("flipped")).unwrap();
    bytes[25] ^= 1; // a bit of the seed
    fs::write(path("flipped"), &bytes).unwrap();
    assert_eq!(corrupt("flipped"), CorruptReason::Checksum);

    // Owner-only, as a segment file is: a file more open than that is refused before it is read.
    let private = |name: &str, bytes: &[u8]| {
        fs::write(path(name), bytes).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(path(name), fs::Permissions::from_mode(0o600)).unwrap();
        }
    };
    private("empty", b"");
    assert_eq!(corrupt("empty"), CorruptReason::Short);
    private("foreign", &[7u8; 4096]);
    assert_eq!(corrupt("foreign"), CorruptReason::Magic);

    drop(open_estimator("cut", shape(), SEED, &options).unwrap());
    let bytes = fs::read(path("cut")).unwrap();
    fs::write(path("cut"), &bytes[..bytes.len() - 8]).unwrap();
    assert_eq!(corrupt("cut"), CorruptReason::Length);
    let err = open_estimator("cut", shape(), SEED, &options).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("(length check failed); remove it to start afresh")
    );

    // Unlinking is the way out.
    unlink("cut", &options).unwrap();
    assert!(open_estimator("cut", shape(), SEED, &options).is_ok());
}

#[test]
fn a_segment_another_keepcount_made_is_a_mismatch_that_says_what_to_do() {
    // After an upgrade that changed the layout, the segment the old build left in /dev/shm (it
    // outlives its processes) is not damaged: the new build must say so, and how to go on.
    let dir = Dir::new("version");
    let options = dir.options();
    let est = open_estimator("older", shape(), SEED, &options).unwrap();
    est.incr("k", 3);
    drop(est);
    let path = options.path("older").unwrap();
    let mut bytes = fs::read(&path).unwrap();
    bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
    // Version 2 wrote a consistent header: its checksum over its own version.
    let checksum = crc32fast::hash(&bytes[..60]);
    bytes[60..64].copy_from_slice(&checksum.to_le_bytes());
    fs::write(&path, &bytes).unwrap();

    let err = open_estimator("older", shape(), SEED, &options).unwrap_err();
    let message = err.to_string();
    match err {
        SharedError::Mismatch {
            field,
            existing,
            requested,
            ..
        } => assert_eq!(
            (field, existing.as_str(), requested.as_str()),
            ("layout version", "2", "5")
        ),
        other => panic!("{other:?}"),
    }
    assert!(
        message.ends_with(
            "keepcount.older was made by another version of keepcount, with segment layout 2 where \
             this one reads layout 5. A segment outlives its processes: once no process of that \
             version has it open, unlink it to start afresh (or open another name)"
        ),
        "{message}"
    );
    // Every kind says the same, before comparing anything else.
    let err = SharedRate::open("older", Duration::from_secs(1), shape(), 7, &options).unwrap_err();
    assert!(matches!(
        err,
        SharedError::Mismatch {
            field: "layout version",
            ..
        }
    ));

    unlink("older", &options).unwrap();
    assert_eq!(
        open_estimator("older", shape(), SEED, &options)
            .unwrap()
            .get("k"),
        0
    );
}

#[cfg(unix)]
#[test]
fn files_get_exactly_the_mode_asked_for() {
    use std::os::unix::fs::PermissionsExt;
    let dir = Dir::new("mode");
    let mode = |name: &str| {
        let path = dir.options().path(name).unwrap();
        fs::metadata(path).unwrap().permissions().mode() & 0o777
    };
    open_estimator("private", shape(), SEED, &dir.options()).unwrap();
    assert_eq!(mode("private"), 0o600);
    // 0o666 is above a usual umask (0o022): the mode is applied exactly all the same.
    open_estimator("open", shape(), SEED, &dir.options().mode(0o666)).unwrap();
    assert_eq!(mode("open"), 0o666);
    let err = open_estimator("bad", shape(), SEED, &dir.options().mode(0o4755)).unwrap_err();
    assert!(matches!(err, SharedError::Mode(0o4755)));
    // Read without write for the group or others: such a user could still lock an in-flight
    // segment's slot bytes.
    for mode in [0o640, 0o604, 0o620, 0o644] {
        let err = open_estimator("readable", shape(), SEED, &dir.options().mode(mode)).unwrap_err();
        assert!(
            matches!(err, SharedError::Mode(m) if m == mode),
            "{mode:#o}"
        );
    }
}

#[cfg(unix)]
#[test]
fn a_file_more_open_than_the_mode_asked_for_is_refused() {
    let dir = Dir::new("open-mode");
    // Another user creating the name first, world-writable, could rewrite the counts or truncate
    // the file under the processes that map it.
    open_estimator("wide", shape(), SEED, &dir.options().mode(0o666)).unwrap();
    let err = open_estimator("wide", shape(), SEED, &dir.options()).unwrap_err();
    assert!(
        matches!(&err, SharedError::Mismatch { field: "mode", existing, requested, .. }
            if existing == "0o666" && requested == "0o600"),
        "{err:?}"
    );
    assert!(
        err.to_string()
            .ends_with("was created with mode 0o666, not 0o600 as requested")
    );
    // A file no more open than asked for opens: 0600 under a group mode of 0660.
    open_estimator("narrow", shape(), SEED, &dir.options()).unwrap();
    open_estimator("narrow", shape(), SEED, &dir.options().mode(0o660)).unwrap();
}

#[cfg(unix)]
#[test]
fn a_symlink_in_place_of_a_segment_is_not_followed() {
    let dir = Dir::new("symlink");
    let target = dir.0.join("target");
    fs::write(&target, b"precious").unwrap();
    std::os::unix::fs::symlink(&target, dir.options().path("link").unwrap()).unwrap();
    assert!(matches!(
        open_estimator("link", shape(), SEED, &dir.options()),
        Err(SharedError::Io { .. })
    ));
    assert_eq!(fs::read(&target).unwrap(), b"precious");
}

#[cfg(target_os = "linux")]
#[test]
fn the_default_directory_is_dev_shm() {
    let name = format!("test-default-{}", std::process::id());
    let options = SharedOptions::new();
    let est = open_estimator(&name, shape(), SEED, &options).unwrap();
    assert!(Path::new(&format!("/dev/shm/keepcount.{name}")).exists());
    drop(est);
    unlink(&name, &options).unwrap();
    assert!(!Path::new(&format!("/dev/shm/keepcount.{name}")).exists());
}

#[test]
fn a_dead_creators_temporary_file_with_this_pid_does_not_block_creation() {
    // A creator killed mid-create leaves `.keepcount.<name>.<pid>.<n>.tmp`; the next process
    // given the same pid (a restarted container's) found its own temporary name taken and every
    // open failed with "File exists". Planted for every number this process could have used.
    let dir = Dir::new("stale-temporary");
    let pid = std::process::id();
    for n in 0..1024 {
        fs::write(
            dir.0.join(format!(".keepcount.left.{pid}.{n}.tmp")),
            b"partial",
        )
        .unwrap();
    }
    let est = open_estimator("left", shape(), SEED, &dir.options()).unwrap();
    assert_eq!(est.incr("k", 2), 2);
}

#[test]
fn a_segment_that_does_not_fit_its_filesystem_is_refused_at_creation() {
    // A sparse file maps fine, then the first write to a page the filesystem cannot allocate
    // is a SIGBUS that kills the process (and every later opener). Needs a small tmpfs, which
    // only root can mount: skipped, and said so, where mounting is refused.
    let dir = Dir::new("small-tmpfs");
    let Some(_mount) = Tmpfs::mount(&dir.0, "size=1m") else {
        eprintln!("skipped: cannot mount a 1 MiB tmpfs here (needs root)");
        return;
    };
    // 4 x 65,536 counters: 2 MiB on a 1 MiB filesystem.
    match open_estimator("big", Shape::new(4, 65_536).unwrap(), SEED, &dir.options()) {
        Err(SharedError::Io { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ENOSPC), "{source}");
        }
        other => panic!("expected ERR_KEEPCOUNT_IO (no space), got {other:?}"),
    }
    // The refused segment left nothing behind: a small one still fits.
    let est = open_estimator("small", shape(), SEED, &dir.options()).unwrap();
    assert_eq!(est.incr("k", 1), 1);
}

#[test]
fn a_directory_that_refuses_a_new_segment_is_named_not_the_temporary_file() {
    // Creating there failed naming the creator's temporary file (`.keepcount.x.<pid>.<hex>.tmp`),
    // a path the caller never gave: the directory is what to fix.
    let dir = Dir::new("refusing");
    let refused = |at: &Path, errno: i32| match open_estimator(
        "x",
        shape(),
        SEED,
        &SharedOptions::new().dir(at),
    ) {
        Err(err @ SharedError::Create { .. }) => {
            let SharedError::Create { dir, source } = &err else {
                unreachable!()
            };
            assert_eq!((dir.as_path(), source.raw_os_error()), (at, Some(errno)));
            assert_eq!(
                err.to_string(),
                format!("cannot create a segment file in {}: {source}", at.display())
            );
        }
        other => panic!(
            "expected a refused creation in {}, got {other:?}",
            at.display()
        ),
    };
    refused(&dir.0.join("missing"), libc::ENOENT);
    // A directory this process cannot write: read-only (root writes anywhere else), or, for
    // anyone else, one without write permission.
    let read_only = dir.0.join("read-only");
    fs::create_dir(&read_only).unwrap();
    if let Some(_mount) = Tmpfs::mount(&read_only, "size=1m,ro") {
        refused(&read_only, libc::EROFS);
    // SAFETY: geteuid has no preconditions and cannot fail.
    } else if unsafe { libc::geteuid() } != 0 {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&read_only, fs::Permissions::from_mode(0o555)).unwrap();
        refused(&read_only, libc::EACCES);
        fs::set_permissions(&read_only, fs::Permissions::from_mode(0o755)).unwrap();
    } else {
        eprintln!("skipped the unwritable directory: root, and cannot mount a read-only tmpfs");
    }
}

#[test]
fn a_creator_killed_mid_create_leaves_nothing_behind() {
    // Reserving a large segment takes a while; a creator killed then left a temporary file
    // holding what it had reserved (of /dev/shm: memory) until someone deleted it. Killed once
    // its reservation shows in the filesystem's use, which needs a tmpfs of its own: skipped
    // where mounting is refused.
    let dir = Dir::new("killed-creator");
    let Some(_mount) = Tmpfs::mount(&dir.0, "size=1g") else {
        eprintln!("skipped: cannot mount a tmpfs here (needs root)");
        return;
    };
    let mut child = spawn("create-big", &dir, "big");
    let deadline = Instant::now() + Duration::from_secs(30);
    while used_bytes(&dir.0) < 16 << 20 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the creator finished before it could be killed"
        );
        assert!(Instant::now() < deadline, "the creator never reserved");
        std::thread::sleep(Duration::from_micros(200));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let left: Vec<_> = fs::read_dir(&dir.0)
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert!(
        used_bytes(&dir.0) < 1 << 20,
        "{} bytes still used",
        used_bytes(&dir.0)
    );
    // The next creator starts afresh.
    let est = open_estimator("big", shape(), SEED, &dir.options()).unwrap();
    assert_eq!(est.incr("k", 1), 1);
}

/// Bytes in use on the filesystem holding `dir`.
fn used_bytes(dir: &Path) -> u64 {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed struct for statvfs to fill.
    let mut stats: libc::statvfs = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::statvfs(path.as_ptr(), &mut stats) }, 0);
    (stats.f_blocks - stats.f_bfree) * stats.f_frsize
}

/// A tmpfs mounted on a directory, unmounted when dropped (after what was mapped from it).
struct Tmpfs(PathBuf);

impl Tmpfs {
    /// A tmpfs mounted on `dir` with mount `options` (`size=1m`, say), unmounted when dropped;
    /// `None` where mounting is refused (it needs root).
    fn mount(dir: &Path, options: &str) -> Option<Self> {
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
            .then(|| Self(dir.into()))
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}
