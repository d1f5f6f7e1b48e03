//! Temporary directories for tests that leave files behind (snapshots, disk tiers).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A new, empty directory under the system temp dir, removed with everything in it when dropped.
pub struct TempDir(PathBuf);

static MADE: AtomicUsize = AtomicUsize::new(0);

impl TempDir {
    /// `bloomgate-<name>-<pid>-<n>`: unique within and across test processes.
    pub fn new(name: &str) -> TempDir {
        TempDir::new_in(&std::env::temp_dir(), name)
    }

    /// [`TempDir::new`] on `/dev/shm`, a memory-backed file system (tmpfs on Linux).
    pub fn in_memory(name: &str) -> TempDir {
        TempDir::new_in(Path::new("/dev/shm"), name)
    }

    fn new_in(base: &Path, name: &str) -> TempDir {
        let path = base.join(format!(
            "bloomgate-{name}-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|error| panic!("create temp dir {}: {error}", path.display()));
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
