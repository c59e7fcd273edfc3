//! What the shared-segment test binaries (`shared.rs`, `shared_inflight.rs`, `shared_rate.rs`)
//! have in common: the seed and shape of their segments, a scratch directory per test, and
//! running a binary's `child` test as another process playing a role.
// Each binary uses its part of it.
#![allow(dead_code)]

use keepcount_limits::Shape;
use keepcount_limits::shared::SharedOptions;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The seed of every test segment.
pub const SEED: u64 = 42;

/// The shape of most test segments.
pub fn shape() -> Shape {
    Shape::new(4, 1024).unwrap()
}

/// A fresh directory for one test's segments, removed when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    pub fn new(test: &str) -> Self {
        let path =
            std::env::temp_dir().join(format!("keepcount-shared-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn options(&self) -> SharedOptions {
        SharedOptions::new().dir(&self.0)
    }

    pub fn go(&self) -> PathBuf {
        self.0.join("go")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// The environment variable that makes a test binary's `child` test play a role.
pub const CHILD: &str = "KEEPCOUNT_SHARED_CHILD";
/// Runs `role` in a child process of this test binary, in `dir`, on segment `name`.
pub fn spawn(role: &str, dir: &Dir, name: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, role)
        .env("KEEPCOUNT_SHARED_DIR", &dir.0)
        .env("KEEPCOUNT_SHARED_NAME", name)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The `RESULT` line a finished child printed.
pub fn result(child: Child) -> String {
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "child failed: {output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    stdout
        .lines()
        .find_map(|line| line.split_once("RESULT ").map(|(_, result)| result))
        .unwrap_or_else(|| panic!("no result in {stdout:?}"))
        .to_owned()
}

/// Waits (bounded) for the parent's start signal, so that children race for real.
pub fn wait_for(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no start signal");
        std::thread::yield_now();
    }
}

/// Waits for the child's `RESULT <line>`.
pub fn wait_for_line(child: &mut Child, line: &str) {
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let found = std::io::BufRead::lines(stdout).find(|read| {
        read.as_ref()
            .is_ok_and(|read| read.ends_with(&format!("RESULT {line}")))
    });
    assert!(found.is_some(), "child never said {line}");
}

/// What this process was started to do by [`spawn`]: its role, the test's directory and the
/// segment's name; `None` in a normal test run (the `child` test then does nothing).
pub fn role() -> Option<(String, PathBuf, String)> {
    let role = std::env::var(CHILD).ok()?;
    let dir = PathBuf::from(std::env::var("KEEPCOUNT_SHARED_DIR").unwrap());
    let name = std::env::var("KEEPCOUNT_SHARED_NAME").unwrap();
    Some((role, dir, name))
}

/// Tells the parent `result`: the line [`result`] and [`wait_for_line`] read.
pub fn say(result: String) {
    println!("RESULT {result}");
    std::io::stdout().flush().unwrap();
}
