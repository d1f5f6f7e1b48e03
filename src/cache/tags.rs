//! Purge by tag: the tags an entry carries, and the purges of tags, applied when an entry is
//! looked up (a ban list, as Varnish's bans).
//!
//! A purge costs a map insert, whatever number of entries carry the tag: nothing is scanned. An
//! entry received before a purge of one of its tags is purged when it is next looked up: a hard
//! purge makes it absent, a soft one stale. An entry fetched again after the purge was received
//! later and is not touched. The tags stay in the entry's stored header fields, so an entry read
//! back from disk carries them too.
//!
//! Memory: an entry pays for its tag field in its header block (the name's 15 bytes for
//! `surrogate-key`, and the value); a purge is remembered once per tag (a later purge of the same
//! tag replaces it) for about 64 bytes plus the tag, for `cache.tag_purge_keep`.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use http::header::HeaderName;

use super::StoredResponse;
use super::head::Head;

/// `Cache-Tag` (Cloudflare's): comma-separated, read beside the configured tag field.
pub const CACHE_TAG: HeaderName = HeaderName::from_static("cache-tag");

/// The file, in the disk tier's directory, that keeps the purges across restarts.
const FILE_NAME: &str = "tag-purges";

/// How a purge treats the entries carrying its tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PurgeKind {
    /// Gone: the next request for it is a miss.
    Hard,
    /// Stale from the purge on: revalidated before use, and `stale-while-revalidate` and
    /// `stale-if-error` still serve it.
    Soft,
}

impl PurgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeKind::Hard => "hard",
            PurgeKind::Soft => "soft",
        }
    }
}

/// One remembered purge of a tag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TagPurge {
    pub at: SystemTime,
    pub kind: PurgeKind,
}

/// Why the purges could not be read or saved; the message names the file.
#[derive(Debug, thiserror::Error)]
pub enum TagPurgeFileError {
    #[error("tag purges: cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("tag purges: {path} line {line} is not `hard|soft <unix nanoseconds> <tag>`")]
    Corrupt { path: PathBuf, line: usize },
    #[error("tag purges: cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The tags named in `head`'s `tag_field` (space-separated) and `Cache-Tag` (comma-separated)
/// fields, each given to `found`.
pub fn each_tag(head: &Head, tag_field: &HeaderName, mut found: impl FnMut(&str)) {
    for (name, value) in head.fields() {
        let comma = name.is(&CACHE_TAG);
        if !(comma || name.is(tag_field)) {
            continue;
        }
        let value = value.bytes();
        let Ok(value) = std::str::from_utf8(&value) else {
            continue;
        };
        if comma {
            value
                .split(',')
                .map(str::trim)
                .filter(|tag| !tag.is_empty())
                .for_each(&mut found);
        } else {
            value.split_ascii_whitespace().for_each(&mut found);
        }
    }
}

/// Marks a purge by prefix among the purges of tags: a byte no tag holds (a field value cannot).
const PREFIX_MARK: char = '\u{1}';

/// The purges of tags (and of key prefixes) in force: read without a lock on every lookup,
/// replaced whole by a purge.
pub struct TagPurges {
    purges: ArcSwap<HashMap<Box<str>, TagPurge>>,
    /// The purges by prefix among them, apart: a lookup scans these, never the tags.
    prefixes: ArcSwap<Vec<(Box<str>, TagPurge)>>,
    /// Where they are saved, with a disk tier.
    file: Option<PathBuf>,
    /// Serialises purges, so that each file written holds every purge before it.
    writing: Mutex<()>,
}

impl TagPurges {
    /// No purges, kept in memory only.
    pub fn in_memory() -> TagPurges {
        TagPurges {
            purges: ArcSwap::from_pointee(HashMap::new()),
            prefixes: ArcSwap::from_pointee(Vec::new()),
            file: None,
            writing: Mutex::new(()),
        }
    }

    /// The purges saved in the directory `dir` (none when it has no file yet), saved there again
    /// on each purge. A file that cannot be read or parsed is reported with the purges empty:
    /// the caller logs it and serves on.
    pub fn open(dir: &Path) -> (TagPurges, Option<TagPurgeFileError>) {
        let path = dir.join(FILE_NAME);
        let (purges, error) = match read(&path) {
            Ok(purges) => (purges, None),
            Err(error) => (HashMap::new(), Some(error)),
        };
        let purges = TagPurges {
            prefixes: ArcSwap::from_pointee(prefixes_of(&purges)),
            purges: ArcSwap::from_pointee(purges),
            file: Some(path),
            writing: Mutex::new(()),
        };
        (purges, error)
    }

    /// Purges every entry received before `now` that carries one of `tags`; purges older than
    /// `keep` are forgotten. With a file, it is rewritten whole (a new file renamed over it).
    pub fn purge(
        &self,
        tags: &[&str],
        kind: PurgeKind,
        now: SystemTime,
        keep: Duration,
    ) -> Result<(), TagPurgeFileError> {
        let _writing = self.writing.lock().unwrap_or_else(PoisonError::into_inner);
        let mut purges = HashMap::clone(&self.purges.load());
        let horizon = now.checked_sub(keep).unwrap_or(SystemTime::UNIX_EPOCH);
        purges.retain(|_, purge| purge.at > horizon);
        for tag in tags {
            purges.insert((*tag).into(), TagPurge { at: now, kind });
        }
        self.prefixes.store(Arc::new(prefixes_of(&purges)));
        let purges = Arc::new(purges);
        self.purges.store(Arc::clone(&purges));
        match &self.file {
            Some(path) => write(path, &purges),
            None => Ok(()),
        }
    }

    /// Purges every entry received before `now` whose key starts with `prefix` (a host and a
    /// path prefix, `a.example/static/`; a key's scheme, when it has one, is not compared), as
    /// [`Self::purge`] purges tags.
    pub fn purge_prefix(
        &self,
        prefix: &str,
        kind: PurgeKind,
        now: SystemTime,
        keep: Duration,
    ) -> Result<(), TagPurgeFileError> {
        let marked = format!("{PREFIX_MARK}{prefix}");
        self.purge(&[marked.as_str()], kind, now, keep)
    }

    /// The purge that applies to `entry`, stored under `key`, whose tags are in `tag_field`: a
    /// hard one before a soft one, the latest soft one of several. Costs one pointer load when
    /// nothing was purged.
    pub fn applying_to(
        &self,
        entry: &StoredResponse,
        key: &str,
        tag_field: &HeaderName,
    ) -> Option<TagPurge> {
        let purges = self.purges.load();
        if purges.is_empty() {
            return None;
        }
        let received = entry.lifetime.response_time;
        let mut applying: Option<TagPurge> = None;
        let mut consider = |purge: TagPurge| {
            if received > purge.at {
                return;
            }
            applying = Some(match applying {
                Some(before) if before.kind == PurgeKind::Hard => before,
                Some(before) if purge.kind == PurgeKind::Soft && before.at > purge.at => before,
                _ => purge,
            });
        };
        each_tag(&entry.head, tag_field, |tag| {
            if let Some(&purge) = purges.get(tag) {
                consider(purge);
            }
        });
        let unschemed = key
            .strip_prefix("https://")
            .or_else(|| key.strip_prefix("http://"))
            .unwrap_or(key);
        for (prefix, purge) in self.prefixes.load().iter() {
            if unschemed.starts_with(&**prefix) {
                consider(*purge);
            }
        }
        applying
    }

    /// How many tags have a purge remembered.
    pub fn len(&self) -> usize {
        self.purges.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.purges.load().is_empty()
    }
}

/// The purges by prefix among `purges`, without their mark.
fn prefixes_of(purges: &HashMap<Box<str>, TagPurge>) -> Vec<(Box<str>, TagPurge)> {
    purges
        .iter()
        .filter_map(|(tag, purge)| Some((tag.strip_prefix(PREFIX_MARK)?.into(), *purge)))
        .collect()
}

fn read(path: &Path) -> Result<HashMap<Box<str>, TagPurge>, TagPurgeFileError> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(source) => {
            return Err(TagPurgeFileError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let mut purges = HashMap::new();
    for (index, line) in text.lines().enumerate() {
        let corrupt = || TagPurgeFileError::Corrupt {
            path: path.to_owned(),
            line: index + 1,
        };
        let mut words = line.split(' ');
        let kind = match words.next() {
            Some("hard") => PurgeKind::Hard,
            Some("soft") => PurgeKind::Soft,
            _ => return Err(corrupt()),
        };
        let nanos: u64 = words
            .next()
            .and_then(|nanos| nanos.parse().ok())
            .ok_or_else(corrupt)?;
        let tag = words
            .next()
            .filter(|tag| !tag.is_empty())
            .ok_or_else(corrupt)?;
        if words.next().is_some() {
            return Err(corrupt());
        }
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(nanos);
        purges.insert(tag.into(), TagPurge { at, kind });
    }
    Ok(purges)
}

fn write(path: &Path, purges: &HashMap<Box<str>, TagPurge>) -> Result<(), TagPurgeFileError> {
    let mut text = String::new();
    for (tag, purge) in purges {
        let nanos = purge
            .at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        text.push_str(&format!("{} {nanos} {tag}\n", purge.kind.as_str()));
    }
    let temporary = path.with_extension("new");
    let failed = |source| TagPurgeFileError::Write {
        path: path.to_owned(),
        source,
    };
    let mut file = std::fs::File::create(&temporary).map_err(failed)?;
    file.write_all(text.as_bytes()).map_err(failed)?;
    file.sync_all().map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::{HeaderMap, HeaderValue};

    fn head_of(fields: &[(&'static str, &'static str)]) -> Head {
        let mut map = HeaderMap::new();
        for (name, value) in fields {
            map.append(*name, HeaderValue::from_static(value));
        }
        Head::of(&map)
    }

    fn tags(head: &Head) -> Vec<String> {
        let mut found = Vec::new();
        each_tag(head, &HeaderName::from_static("surrogate-key"), |tag| {
            found.push(tag.to_owned())
        });
        found
    }

    #[test]
    fn tags_are_read_from_the_tag_field_by_spaces_and_from_cache_tag_by_commas() {
        let head = head_of(&[
            ("surrogate-key", "  product-1 all\tproducts "),
            ("cache-control", "max-age=60"),
            ("cache-tag", "blog, post-7,,"),
        ]);
        assert_eq!(
            tags(&head),
            ["product-1", "all", "products", "blog", "post-7"]
        );
        assert!(tags(&head_of(&[("x-other", "a b")])).is_empty());
    }

    fn entry(tags: &'static str, received: SystemTime) -> StoredResponse {
        let mut headers = HeaderMap::new();
        headers.insert("surrogate-key", HeaderValue::from_static(tags));
        StoredResponse::new(
            http::StatusCode::OK,
            headers,
            bytes::Bytes::new(),
            &HeaderMap::new(),
            &[],
            received,
        )
    }

    #[test]
    fn a_purge_applies_to_entries_received_before_it_hard_before_soft() {
        let purges = TagPurges::in_memory();
        let field = HeaderName::from_static("surrogate-key");
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let old = entry("a b", start);
        assert_eq!(purges.applying_to(&old, "h/k", &field), None);
        let keep = Duration::from_secs(3600);
        let soft_at = start + Duration::from_secs(1);
        purges
            .purge(&["a"], PurgeKind::Soft, soft_at, keep)
            .unwrap();
        let soft = TagPurge {
            at: soft_at,
            kind: PurgeKind::Soft,
        };
        assert_eq!(purges.applying_to(&old, "h/k", &field), Some(soft));
        let hard_at = start + Duration::from_secs(2);
        purges
            .purge(&["b"], PurgeKind::Hard, hard_at, keep)
            .unwrap();
        let hard = purges
            .applying_to(&old, "h/k", &field)
            .map(|purge| purge.kind);
        assert_eq!(hard, Some(PurgeKind::Hard));
        let refetched = entry("a b", start + Duration::from_secs(3));
        assert_eq!(purges.applying_to(&refetched, "h/k", &field), None);
        assert_eq!(purges.applying_to(&entry("c", start), "h/k", &field), None);
    }

    #[test]
    fn purges_older_than_keep_are_forgotten_at_the_next_purge() {
        let purges = TagPurges::in_memory();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let keep = Duration::from_secs(60);
        purges
            .purge(&["a", "b"], PurgeKind::Hard, start, keep)
            .unwrap();
        let second = start + keep - Duration::from_secs(1);
        purges.purge(&["a"], PurgeKind::Hard, second, keep).unwrap();
        assert_eq!(purges.len(), 2);
        purges
            .purge(
                &["c"],
                PurgeKind::Soft,
                start + keep + Duration::from_secs(1),
                keep,
            )
            .unwrap();
        // b is past keep; a was purged again since.
        assert_eq!(purges.len(), 2);
    }

    #[test]
    fn a_purge_by_prefix_applies_to_keys_under_it_only_and_survives_a_reopen() {
        let dir =
            std::env::temp_dir().join(format!("bloomgate-prefix-purges-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (purges, _) = TagPurges::open(&dir);
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let old = entry("", start);
        let field = HeaderName::from_static("surrogate-key");
        let keep = Duration::from_secs(u64::from(u32::MAX));
        purges
            .purge_prefix(
                "a.example/static/",
                PurgeKind::Hard,
                start + Duration::from_secs(1),
                keep,
            )
            .unwrap();
        let applies =
            |purges: &TagPurges, key: &str| purges.applying_to(&old, key, &field).is_some();
        assert!(applies(&purges, "a.example/static/app.css"));
        assert!(applies(&purges, "https://a.example/static/app.css?v=2"));
        assert!(!applies(&purges, "a.example/staticx"));
        assert!(!applies(&purges, "b.example/static/app.css"));
        let later = entry("", start + Duration::from_secs(2));
        assert_eq!(
            purges.applying_to(&later, "a.example/static/app.css", &field),
            None
        );
        let (reopened, error) = TagPurges::open(&dir);
        assert!(error.is_none(), "{error:?}");
        assert!(applies(&reopened, "a.example/static/app.css"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn purges_survive_a_reopen_and_a_corrupt_file_is_reported_by_name() {
        let dir = std::env::temp_dir().join(format!("bloomgate-tag-purges-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (purges, error) = TagPurges::open(&dir);
        assert!(error.is_none(), "{error:?}");
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_764_000_000_123_456_789);
        let keep = Duration::from_secs(u64::from(u32::MAX));
        purges
            .purge(&["one", "two"], PurgeKind::Soft, at, keep)
            .unwrap();
        let (reopened, error) = TagPurges::open(&dir);
        assert!(error.is_none(), "{error:?}");
        assert_eq!(*reopened.purges.load_full(), *purges.purges.load_full());

        std::fs::write(dir.join(FILE_NAME), "hard 12 ok\nmaybe 13 bad\n").unwrap();
        let (empty, error) = TagPurges::open(&dir);
        assert!(empty.is_empty());
        let message = error.map(|error| error.to_string()).unwrap_or_default();
        assert!(message.contains("tag-purges line 2"), "{message}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
