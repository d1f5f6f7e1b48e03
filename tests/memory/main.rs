//! What a stored entry costs in memory: the bytes the allocator holds for entries in the store,
//! measured, against the weight the store charges its byte budget for them
//! (`bloomgate::cache::weight`).
//!
//! One test in its own binary: the counting allocator sees every thread's allocations.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::SystemTime;

use bloomgate::admission::probation::{Budget, Segment};
use bloomgate::cache::{CacheKey, Store, StoredResponse};
use bloomgate::config::Config;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use tikv_jemallocator::Jemalloc;

/// The binary's allocator, counting the bytes it holds: each allocation's size class, not the
/// size asked for; past 14 KiB, the pages it touches (its size class may run further, untouched).
struct Counting;

fn held_by(ptr: *mut u8, asked: usize) -> usize {
    // SAFETY: `ptr` is a live allocation of jemalloc's.
    let usable = unsafe { tikv_jemallocator::usable_size(ptr) };
    if usable > 14 * 1024 {
        asked.next_multiple_of(4096)
    } else {
        usable
    }
}

/// The binary's options, so that sizes here are the binary's.
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(bloomgate::cache::weight::JEMALLOC_CONF.as_ptr());

#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: a pointer to a `'static` C string jemalloc only reads.
unsafe impl Sync for MallocConf {}

static HELD: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call goes to jemalloc unchanged; the count only reads the pointers it returns.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = unsafe { Jemalloc.alloc(layout) };
        if !ptr.is_null() {
            HELD.fetch_add(held_by(ptr, layout.size()), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        HELD.fetch_sub(held_by(ptr, layout.size()), Ordering::Relaxed);
        unsafe { Jemalloc.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// A request as a browser sends it, and the origin's response to it, as the proxy stores them:
/// owned copies of both header maps, the policy, the entry.
fn entry(index: usize, body_bytes: usize, vary: Option<&str>) -> (CacheKey, StoredResponse) {
    let request = http::Request::builder()
        .uri(format!("/static/assets/{index:08}.js?v=3"))
        .header("host", "www.example.com")
        .header(
            "user-agent",
            "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0",
        )
        .header("accept", "*/*")
        .header("accept-language", "en-GB,en;q=0.5")
        .header("accept-encoding", vary.unwrap_or("gzip, deflate, br"))
        .header("referer", "https://www.example.com/index.html")
        .body(())
        .expect("a valid request");
    let (parts, ()) = request.into_parts();
    let key = CacheKey::from_request(&parts, &Config::defaults().cache.key).expect("a key");
    let mut response = HeaderMap::new();
    let mut field = |name: &'static str, value: String| {
        response.append(name, HeaderValue::from_str(&value).expect("a valid value"));
    };
    field("cache-control", "public, max-age=3600".into());
    field("content-type", "application/javascript".into());
    field("content-length", body_bytes.to_string());
    field("etag", format!("\"{index:016x}\""));
    field("last-modified", "Thu, 01 Jan 2015 00:00:00 GMT".into());
    field("date", "Mon, 23 Nov 2026 19:00:00 GMT".into());
    field("x-origin-count", "1".into());
    if vary.is_some() {
        field("vary", "Accept-Encoding".into());
    }
    let request_headers = parts.headers;
    let now = SystemTime::now();
    let body = Bytes::from(vec![b'x'; body_bytes]);
    let entry = StoredResponse::new(StatusCode::OK, response, body, &request_headers, &[], now);
    // As a hit leaves it: a response made from it holds nothing of it once sent.
    drop(entry.headers());
    (key, entry)
}

/// Bytes held for `count` entries made by `make` in a store, and the store's weight for them.
fn held_and_weighed(
    count: usize,
    make: impl Fn(usize) -> (CacheKey, StoredResponse),
) -> (usize, u64) {
    let store = Store::new(Budget::new(u64::MAX, 0.1), 4);
    let before = HELD.load(Ordering::Relaxed);
    for index in 0..count {
        let (key, entry) = make(index);
        store.insert(key, entry, Segment::Main);
    }
    let held = HELD.load(Ordering::Relaxed) - before;
    let usage = store.usage();
    (held, usage.bytes[0] + usage.bytes[1])
}

#[test]
fn an_entry_weighs_what_it_holds_in_memory() {
    let count = 3000;
    for (body_bytes, vary) in [
        (0, None),
        (1000, None),
        (8 * 1024, None),
        (9000, None),
        (8 * 1024, Some("gzip")),
        (64 * 1024, None),
    ] {
        let (held, weighed) = held_and_weighed(count, |index| entry(index, body_bytes, vary));
        let (held, weighed) = (held / count, weighed as usize / count);
        println!("{body_bytes} B body, vary {vary:?}: holds {held} B, weighs {weighed} B");
        assert!(
            weighed >= held,
            "an entry of a {body_bytes} B body holds {held} B but weighs {weighed} B"
        );
        assert!(
            weighed <= held + held / 20 + 64,
            "an entry of a {body_bytes} B body holds {held} B but weighs {weighed} B"
        );
    }
    // Two variants under each key: the second shares the key's slot and bookkeeping.
    let (held, weighed) = held_and_weighed(count, |index| {
        let encoding = ["gzip", "br"][index % 2];
        entry(index / 2, 8 * 1024, Some(encoding))
    });
    let (held, weighed) = (held / count, weighed as usize / count);
    println!("two variants a key: holds {held} B, weighs {weighed} B an entry");
    assert!(
        weighed >= held && weighed <= held + held / 20,
        "two variants a key: an entry holds {held} B but weighs {weighed} B"
    );
}
