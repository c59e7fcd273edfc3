//! A scratch directory for a unit test's segments, for the shared structures' tests.

use super::SharedOptions;
use std::path::PathBuf;

/// An empty directory of one test's segments, removed when dropped (also when the test fails).
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A fresh directory for test `test` of the structure `kind`: the unit tests of every shared
    /// structure run in one process, where two may name a test alike.
    pub(crate) fn new(kind: &str, test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("keepcount-{kind}-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    /// Options that put segments in this directory.
    pub(crate) fn options(&self) -> SharedOptions {
        SharedOptions::new().dir(&self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
