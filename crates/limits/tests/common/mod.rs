//! What the shared-segment test binaries (`shared.rs`, `shared_rate.rs`) have in common: the
//! seed and shape of their segments and a scratch directory per test.
// Each binary uses its part of it.
#![allow(dead_code)]

use keepcount_limits::Shape;
use keepcount_limits::shared::SharedOptions;
use std::fs;
use std::path::PathBuf;

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
