//! Temporary directories for tests that leave files behind (snapshots, disk tiers).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A new, empty directory under the system temp dir, removed with everything in it when dropped.
pub struct TempDir(PathBuf);

static MADE: AtomicUsize = AtomicUsize::new(0);

impl TempDir {
    /// `bloomgate-<name>-<pid>-<n>`: unique within and across test processes.
    pub fn new(name: &str) -> TempDir {
        let path = std::env::temp_dir().join(format!(
            "bloomgate-{name}-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    /// [`TempDir::new`] on `/dev/shm`, a memory-backed file system (tmpfs on Linux).
    pub fn in_memory(name: &str) -> TempDir {
        let path = Path::new("/dev/shm").join(format!(
            "bloomgate-{name}-{}-{}",
            std::process::id(),
            MADE.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create a temp dir on /dev/shm");
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
