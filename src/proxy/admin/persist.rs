//! Doorkeeper snapshots on disk: restored at start, saved every `admission.snapshot_interval` and
//! at graceful shutdown.
//!
//! A save writes `<path>.tmp`, fsyncs it, renames it over `<path>` and fsyncs the directory, so a
//! crash at any moment leaves at `<path>` either the previous snapshot or the new one, never a mix;
//! a `.tmp` left by a crash is ignored and overwritten by the next save.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError};

use metrics::counter;

use crate::admission::{Doorkeeper, DoorkeeperConfig, DoorkeeperSnapshotError};
use crate::config::Config;
use crate::proxy::{Proxy, new_doorkeeper};
use crate::telemetry::FILTER_SNAPSHOTS_TOTAL;

/// Why a snapshot file could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotLoadError {
    #[error("cannot read doorkeeper snapshot {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("doorkeeper snapshot {} is unusable: {source}", path.display())]
    Invalid {
        path: PathBuf,
        source: DoorkeeperSnapshotError,
    },
}

/// Why a snapshot could not be saved; the previous snapshot file, if any, is left as it was.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotSaveError {
    #[error("cannot save doorkeeper snapshot {}: {step} failed: {source}", path.display())]
    Io {
        /// What was being done: "write", "fsync", "rename" or "fsync the directory of".
        step: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot save doorkeeper snapshot: the writer task failed: {0}")]
    Task(String),
}

/// Reads the snapshot at `path` and restores a doorkeeper from it, if it fits `config`.
pub fn load(path: &Path, config: DoorkeeperConfig) -> Result<Doorkeeper, SnapshotLoadError> {
    let bytes = fs::read(path).map_err(|source| SnapshotLoadError::Read {
        path: path.to_owned(),
        source,
    })?;
    Doorkeeper::builder(config)
        .restore(&bytes)
        .map_err(|source| SnapshotLoadError::Invalid {
            path: path.to_owned(),
            source,
        })
}

/// Replaces the file at `path` with `bytes` so that a crash leaves the old file or the new one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), SnapshotSaveError> {
    let temporary = temporary_path(path);
    let written = (|| {
        // The snapshot holds the filters' hash keys: keep it from other users.
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temporary)
            .map_err(failed("write", &temporary))?;
        file.write_all(bytes).map_err(failed("write", &temporary))?;
        file.sync_all().map_err(failed("fsync", &temporary))?;
        fs::rename(&temporary, path).map_err(failed("rename", &temporary))
    })();
    if written.is_err() {
        let _ = fs::remove_file(&temporary);
        return written;
    }
    // The rename is durable only once the directory entry is.
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    File::open(directory)
        .and_then(|dir| dir.sync_all())
        .map_err(failed("fsync the directory of", path))
}

fn failed(step: &'static str, path: &Path) -> impl FnOnce(io::Error) -> SnapshotSaveError {
    move |source| SnapshotSaveError::Io {
        step,
        path: path.to_owned(),
        source,
    }
}

fn temporary_path(path: &Path) -> PathBuf {
    let mut name = OsString::from(path.as_os_str());
    name.push(".tmp");
    PathBuf::from(name)
}

/// The doorkeeper a starting proxy uses: the one saved at `admission.snapshot_path` when it fits
/// the configuration, otherwise fresh filters. A missing or unusable snapshot is logged, never fatal.
pub(crate) fn restore_or_new(config: &Config) -> Option<Arc<Doorkeeper>> {
    if !config.uses_doorkeeper() {
        return None;
    }
    let admission = &config.admission;
    let Some(path) = &admission.snapshot_path else {
        return new_doorkeeper(config);
    };
    match load(path, admission.doorkeeper.clone()) {
        Ok(restored) => {
            let stats = restored.stats();
            tracing::info!(
                path = %path.display(),
                generation = stats.generation,
                current_items = stats.current.estimated_items.round(),
                previous_items = stats.previous.map_or(0.0, |p| p.estimated_items.round()),
                "doorkeeper restored from its snapshot"
            );
            return Some(Arc::new(restored));
        }
        // The first start with a snapshot path has nothing to restore yet.
        Err(SnapshotLoadError::Read { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            tracing::info!(
                path = %path.display(),
                "no doorkeeper snapshot yet; starting with empty filters"
            );
        }
        Err(error) => tracing::warn!("{error}; starting with empty filters"),
    }
    new_doorkeeper(config)
}

/// Saves the doorkeeper in force now to `admission.snapshot_path`, off the async runtime, and
/// counts the outcome. Returns the file written, or `None` when there was nothing to save or the
/// save failed (logged).
pub(crate) async fn save(proxy: &Arc<Proxy>) -> Option<PathBuf> {
    let proxy = Arc::clone(proxy);
    let result = tokio::task::spawn_blocking(move || {
        // The periodic save and the one at shutdown share `<path>.tmp`.
        let _serial = proxy.saving.lock().unwrap_or_else(PoisonError::into_inner);
        // Read at write time: a reload may have swapped the doorkeeper or moved the file.
        let live = proxy.live();
        let path = live.config.admission.snapshot_path.clone()?;
        let doorkeeper = live.doorkeeper.as_ref()?;
        Some(write_atomically(&path, &doorkeeper.snapshot()).map(|()| path))
    })
    .await
    .unwrap_or_else(|error| Some(Err(SnapshotSaveError::Task(error.to_string()))))?;
    match result {
        Ok(path) => {
            counter!(FILTER_SNAPSHOTS_TOTAL, "outcome" => "ok").increment(1);
            tracing::debug!(path = %path.display(), "doorkeeper snapshot saved");
            Some(path)
        }
        Err(error) => {
            counter!(FILTER_SNAPSHOTS_TOTAL, "outcome" => "error").increment(1);
            tracing::warn!("{error}");
            None
        }
    }
}

/// Saves the doorkeeper every `admission.snapshot_interval` (re-read each time, so a reload
/// applies), until the task is aborted.
pub(crate) async fn save_periodically(proxy: Arc<Proxy>) {
    loop {
        tokio::time::sleep(proxy.config().admission.snapshot_interval).await;
        save(&proxy).await;
    }
}

#[cfg(test)]
mod tests {

    use super::*;

    fn config(capacity: u64) -> DoorkeeperConfig {
        DoorkeeperConfig::with_capacity(capacity)
    }

    /// A test's own empty directory, removed with what it holds when the test ends, failed or
    /// not.
    struct Scratch(PathBuf);

    impl Scratch {
        fn join(&self, name: &str) -> PathBuf {
            self.0.join(name)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn scratch(name: &str) -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("bloomgate-persist-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    #[test]
    fn a_saved_doorkeeper_loads_with_what_it_has_seen() {
        let dir = scratch("roundtrip");
        let path = dir.join("door.snap");
        let door = Doorkeeper::builder(config(1000)).build().unwrap();
        door.observe(b"/seen");
        write_atomically(&path, &door.snapshot()).unwrap();
        let loaded = load(&path, config(1000)).unwrap();
        assert!(loaded.contains(b"/seen"));
        assert!(!loaded.contains(b"/never"));
        assert!(!temporary_path(&path).exists(), "the .tmp was left behind");
    }

    #[test]
    fn a_save_replaces_the_previous_snapshot_and_ignores_a_stale_tmp() {
        let dir = scratch("replace");
        let path = dir.join("door.snap");
        let door = Doorkeeper::builder(config(1000)).build().unwrap();
        write_atomically(&path, &door.snapshot()).unwrap();
        fs::write(temporary_path(&path), b"left by a crash").unwrap();
        door.observe(b"/later");
        write_atomically(&path, &door.snapshot()).unwrap();
        assert!(load(&path, config(1000)).unwrap().contains(b"/later"));
    }

    #[test]
    fn load_errors_name_the_file_and_the_reason() {
        let dir = scratch("errors");
        let path = dir.join("door.snap");
        let missing = load(&path, config(1000)).unwrap_err().to_string();
        assert!(missing.contains("door.snap"), "{missing}");
        write_atomically(
            &path,
            &Doorkeeper::builder(config(1000))
                .build()
                .unwrap()
                .snapshot(),
        )
        .unwrap();
        let stale = load(&path, config(50_000)).unwrap_err().to_string();
        assert!(
            stale.contains("door.snap") && stale.contains("config"),
            "{stale}"
        );
    }

    #[test]
    fn a_save_into_a_missing_directory_fails_and_names_the_file() {
        let dir = scratch("nodir");
        let path = dir.join("absent").join("door.snap");
        let error = write_atomically(&path, b"bytes").unwrap_err().to_string();
        assert!(error.contains("door.snap.tmp"), "{error}");
    }
}
