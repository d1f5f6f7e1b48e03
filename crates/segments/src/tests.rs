//! Tests that reach inside the engine: hash collisions, and the cold read path's remainder.

use super::*;

fn options(dir: &Path) -> Options {
    Options::new(dir, 4 << 20).segment_bytes(1 << 20)
}

fn value_of(key: &[u8]) -> Vec<u8> {
    key.iter()
        .cycle()
        .take(300 + key.len() * 37)
        .copied()
        .collect()
}

#[test]
fn colliding_hashes_read_as_misses_never_as_another_keys_value() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Two bits of hash: 100 keys share 3 hashes.
    let (engine, _) = Engine::open_with(options(dir.path()), 0b11).expect("open");
    let keys: Vec<Vec<u8>> = (0..100).map(|n| format!("key-{n}").into_bytes()).collect();
    for key in &keys {
        assert_eq!(engine.put(key, &value_of(key)), Stored::Queued);
    }
    let check = |engine: &Engine| {
        let mut hits = 0;
        for key in &keys {
            if let Some(value) = engine.read(key).expect("read") {
                assert!(value == value_of(key), "key {key:?} got another value");
                hits += 1;
            }
        }
        hits
    };
    // In RAM, then from the files: only the last key put under each hash is there.
    assert_eq!(check(&engine), 3);
    engine.wait();
    assert_eq!(check(&engine), 3);
    assert_eq!(engine.stats().dropped, 0, "a collision is not damage");
}

#[test]
fn cold_read_finishes_a_record_cut_short_at_4096_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (engine, _) = Engine::open(options(dir.path()).nowait_reads(false)).expect("open");
    let value: Vec<u8> = (0..20_000u32).map(|n| (n % 251) as u8).collect();
    engine.put(b"big", &value);
    engine.wait();
    let Lookup::Cold(mut cold) = engine.get(b"big") else {
        panic!("with NOWAIT reads off a flushed record must be cold");
    };
    // What a 5.9/5.10 kernel hands back: the first page only.
    let file = &engine.shared.files[cold.location.segment as usize];
    let mut page = vec![0; 4096];
    file.read_exact_at(&mut page, u64::from(cold.location.offset))
        .expect("read the first page");
    cold.buf.extend_from_slice(&page);
    assert_eq!(cold.finish().expect("finish").as_deref(), Some(&value[..]));
}

#[test]
fn page_cache_dropped_record_reads_back_through_either_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (engine, _) = Engine::open(options(dir.path())).expect("open");
    let value = vec![0x5a; 256 << 10];
    engine.put(b"evicted", &value);
    engine.wait();
    for file in engine.shared.files.iter() {
        let file = &file.current().file;
        file.sync_data().expect("fdatasync");
        rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed).expect("fadvise");
    }
    let value_back = match engine.get(b"evicted") {
        // tmpfs and some overlays keep the pages whatever the advice.
        Lookup::Hit(value) | Lookup::Mapped(value, _) => value,
        Lookup::Cold(cold) => cold.finish().expect("finish").expect("present"),
        Lookup::Miss => panic!("the record must be found"),
    };
    assert_eq!(value_back, value);
}

#[test]
fn a_memory_backed_file_system_is_read_on_the_calling_thread() {
    // tmpfs refuses RWF_NOWAIT (EOPNOTSUPP on Linux 6.18); its reads never wait for a device.
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm");
    let (engine, _) = Engine::open(options(dir.path()).mmap_reads(false)).expect("open");
    assert_eq!(engine.read_mode(), ReadMode::Memory);
    let value = vec![0x33; 100 << 10];
    engine.put(b"shm", &value);
    engine.wait();
    match engine.get(b"shm") {
        Lookup::Hit(back) | Lookup::Mapped(back, _) => assert_eq!(back, value),
        other => panic!("a flushed record on tmpfs must be read at once, got {other:?}"),
    }
}

#[test]
fn reads_off_means_every_flushed_record_is_cold() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (engine, _) = Engine::open(options(dir.path()).nowait_reads(false)).expect("open");
    assert_eq!(engine.read_mode(), ReadMode::Blocking);
    engine.put(b"k", b"v");
    engine.wait();
    assert!(matches!(engine.get(b"k"), Lookup::Cold(_)));
}

#[test]
fn a_part_filled_batch_reaches_its_file_after_a_quiet_second() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (engine, _) = Engine::open(options(dir.path())).expect("open");
    // Far less than a batch (1 MiB): without the idle flush it would wait in RAM for more.
    engine.put(b"quiet", &[9; 1000]);
    let deadline = Instant::now() + writer::IDLE_FLUSH * 5;
    while engine.stats().written_bytes == 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        engine.stats().written_bytes >= record_bytes(5, 1000),
        "the record did not reach its file: {:?}",
        engine.stats()
    );
}

/// An engine of three 1 MiB segments on tmpfs, where segments are mapped.
fn mapped_engine(dir: &Path) -> Engine {
    let (engine, _) = Engine::open(options(dir)).expect("open");
    assert_eq!(engine.read_mode(), ReadMode::Mapped);
    engine
}

/// Puts `count` keys named `prefix-N` with [`value_of`] values, then waits for the files.
fn churn(engine: &Engine, prefix: &str, count: usize) {
    for n in 0..count {
        let key = format!("{prefix}-{n}-{}", "x".repeat(n % 97));
        assert_eq!(
            engine.put(key.as_bytes(), &value_of(key.as_bytes())),
            Stored::Queued
        );
    }
    engine.wait();
}

/// Sends `file`'s value with `sendfile` into a new file in `dir` and returns what arrived.
fn sent_from(file: &InFile, dir: &Path) -> Vec<u8> {
    let out_path = dir.join("sent");
    let out = std::fs::File::create(&out_path).expect("create the receiving file");
    let mut offset = file.offset();
    let mut left = file.len();
    while left > 0 {
        let sent =
            rustix::fs::sendfile(&out, file.file(), Some(&mut offset), left).expect("sendfile");
        assert!(sent > 0, "the file ended inside the value");
        left -= sent;
    }
    std::fs::read(&out_path).expect("read what was sent")
}

#[test]
fn a_value_sent_from_its_file_after_its_segment_was_reclaimed_is_its_own() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm");
    let out = tempfile::tempdir().expect("a directory for what is sent");
    let engine = mapped_engine(dir.path());
    let value: Vec<u8> = (0..60_000u32).map(|n| (n % 251) as u8).collect();
    engine.put(b"sent", &value);
    engine.wait();
    let Lookup::Mapped(bytes, file) = engine.get(b"sent") else {
        panic!("a large flushed record on tmpfs must be read through the mapping");
    };
    assert_eq!(
        file.bytes().as_ptr(),
        bytes.as_ptr(),
        "the value and its place are one"
    );
    // Only the place is held, as while a send is under way: the bytes are dropped.
    drop(bytes);
    let renewed = engine.stats().renewed;
    // 9 MiB through a 3 MiB engine: every segment is reclaimed and rewritten, twice over, with
    // other keys' records where this one was.
    churn(&engine, "churn", 4_000);
    assert!(
        engine.stats().renewed > renewed,
        "the held segment was rewritten in place"
    );
    assert!(
        sent_from(&file, out.path()) == value,
        "a send from the file sent other bytes"
    );
    assert!(file.slice(0..value.len() + 1).is_none());
    let tail = file
        .slice(59_000..60_000)
        .expect("a slice within the value");
    assert!(sent_from(&tail, out.path()) == value[59_000..]);
}

#[test]
fn a_mapped_value_held_while_its_segment_is_reclaimed_keeps_its_bytes() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm");
    let engine = mapped_engine(dir.path());
    let value: Vec<u8> = (0..60_000u32).map(|n| (n % 253) as u8).collect();
    engine.put(b"held", &value);
    engine.wait();
    let Lookup::Mapped(held, _) = engine.get(b"held") else {
        panic!("a flushed record on tmpfs must be read at once");
    };
    let first = engine.stats().renewed;
    // 9 MiB through a 3 MiB engine: every segment is reclaimed and rewritten, twice over.
    churn(&engine, "churn", 4_000);
    let renewed = engine.stats().renewed;
    assert!(
        renewed > first,
        "the held value's segment was rewritten in place"
    );
    assert!(held == value, "a held value changed under its reader");
    // Only a small value held now, and that is a copy: later reclaims rewrite in place.
    drop(held);
    let small = value_of(b"small");
    assert!(small.len() < read::COPY_BELOW);
    engine.put(b"small", &small);
    engine.wait();
    let Lookup::Hit(small_held) = engine.get(b"small") else {
        panic!("a flushed record on tmpfs must be read at once");
    };
    churn(&engine, "after", 4_000);
    assert_eq!(engine.stats().renewed, renewed, "nothing was pinned");
    assert!(small_held == small);
    // The files are what they were: one per segment, each its size, no half-made inode.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|entry| {
            entry
                .expect("entry")
                .file_name()
                .into_string()
                .expect("utf-8")
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "engine.meta",
            "segment-00000",
            "segment-00001",
            "segment-00002"
        ]
    );
    for file in engine.shared.files.iter() {
        assert_eq!(std::fs::metadata(&file.path).expect("stat").len(), 1 << 20);
    }
}

/// `key` repeated to `len` bytes: what every value under `key` is, whatever its length.
fn is_value_of(key: &[u8], value: &[u8]) -> bool {
    value.iter().zip(key.iter().cycle()).all(|(a, b)| a == b)
}

#[test]
fn mapped_reads_under_churn_never_return_another_keys_bytes() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm");
    let engine = Arc::new(mapped_engine(dir.path()));
    let keys: Vec<Vec<u8>> = (0..400)
        .map(|n| format!("key-{n}-{}", "y".repeat(n % 61)).into_bytes())
        .collect();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|reader| {
            let (engine, keys, stop) = (Arc::clone(&engine), keys.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                // Values are held a while, so reclaims meet pins, and checked again on release.
                let mut held: std::collections::VecDeque<(usize, Bytes)> = Default::default();
                let (mut hits, mut n) = (0u64, reader * 7);
                while !stop.load(Ordering::Relaxed) {
                    n = (n * 31 + 17) % keys.len();
                    if let Some(value) = engine.read(&keys[n]).expect("read") {
                        assert!(is_value_of(&keys[n], &value), "key {n} read another value");
                        hits += 1;
                        held.push_back((n, value));
                        if held.len() > 1_000 {
                            let (n, value) = held.pop_front().expect("held");
                            assert!(is_value_of(&keys[n], &value), "held key {n} changed");
                        }
                    }
                }
                for (n, value) in held {
                    assert!(is_value_of(&keys[n], &value), "held key {n} changed");
                }
                hits
            })
        })
        .collect();
    for round in 0..12 {
        for key in &keys {
            // Lengths change from round to round, so records never land where they were; all
            // are long enough to be pinned rather than copied.
            let len = read::COPY_BELOW + key.len() * 37 + round * 40;
            let value: Vec<u8> = key.iter().cycle().take(len).copied().collect();
            engine.put(key, &value);
        }
        if round % 3 == 0 {
            engine.wait();
        }
    }
    engine.wait();
    stop.store(true, Ordering::Relaxed);
    let hits: u64 = readers
        .into_iter()
        .map(|reader| reader.join().expect("a reader failed"))
        .sum();
    let stats = engine.stats();
    // More than the engine's 3 MiB went through it: every segment was reclaimed at least once.
    assert!(
        hits > 0 && stats.written_bytes > 3 << 20,
        "{hits} hits, {stats:?}"
    );
    assert!(stats.renewed > 0, "no reclaim met a pin: {stats:?}");
    assert_eq!(stats.dropped, 0, "{stats:?}");
}

#[test]
fn a_next_inode_left_by_a_crash_is_deleted_at_open() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("a directory on /dev/shm");
    let engine = mapped_engine(dir.path());
    engine.put(b"kept", &value_of(b"kept"));
    engine.close();
    drop(engine);
    // A crash between making a segment's next inode and renaming it over the old one.
    let stray = dir.path().join("segment-00001.next");
    std::fs::write(&stray, [0u8; 4096]).expect("write a stray next inode");
    let engine = mapped_engine(dir.path());
    assert!(!stray.exists(), "the half-made inode was left behind");
    assert_eq!(
        engine.read(b"kept").expect("read").as_deref(),
        Some(&value_of(b"kept")[..])
    );
}

#[test]
fn sealing_syncs_the_segment_before_and_after_its_footer_only_when_asked() {
    for (sync_on_seal, per_seal) in [(true, 2), (false, 0)] {
        let dir = tempfile::tempdir().expect("temp dir");
        let options = options(dir.path()).sync_on_seal(sync_on_seal);
        let (engine, _) = Engine::open(options.clone()).expect("open");
        engine.put(b"key", &value_of(b"key"));
        engine.wait();
        assert_eq!(engine.stats().syncs, 0, "records alone are never synced");
        // Dropped unclosed, as a killed process leaves it: the segment is not sealed.
        drop(engine);
        let (engine, recovery) = Engine::open(options.clone()).expect("reopen");
        assert_eq!(recovery.segments_scanned, 1);
        assert_eq!(
            engine.stats().syncs,
            per_seal,
            "sync_on_seal({sync_on_seal}): recovery seals the scanned segment"
        );
        // Closing seals the active segment.
        engine.close();
        let stats = engine.stats();
        assert_eq!(stats.syncs, 2 * per_seal, "sync_on_seal({sync_on_seal})");
        assert_eq!(stats.write_errors, 0);
        drop(engine);
        let (engine, recovery) = Engine::open(options).expect("reopen");
        assert_eq!(
            (recovery.summaries_read, recovery.segments_scanned),
            (2, 0),
            "sealed, footers last: read by their summaries"
        );
        assert_eq!(
            engine.read(b"key").expect("read").as_deref(),
            Some(&value_of(b"key")[..])
        );
    }
}
