//! What an object weighs against a simulated cache's byte budget: its body, or what the proxy's
//! store spends on it.

use crate::cache::weight;
use crate::traffic::OriginOptions;
use crate::traffic::object_path::OBJECT_PREFIX;
use crate::traffic::origin::stored_head_bytes;

/// How bloomgate's policies (admit-all, second-hit-exact, bloom, probation) weigh an object
/// (`simulate --weigh`); the research references always weigh bodies, as libCacheSim does. Hit
/// bytes and written bytes count bodies either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Weigh {
    /// Its body's bytes.
    #[default]
    Body,
    /// What `bloomgate serve` spends of `cache.max_bytes` on it when `bloomgate replay` fetches it
    /// through the proxy from `bloomgate origin` ([`weight::entry`]): its body, the head block the
    /// origin's fields make, and its cache key, as jemalloc rounds them, with the index's and
    /// queues' share.
    Proxy,
}

/// The proxy's cache key of a replayed object is `127.0.0.1:PORT/obj/KEY?size=N` (the replay's
/// `Host`, then its path): a loopback authority with a port of five digits (Linux's ephemeral
/// ports), then `/obj/` and `?size=`. Trace keys of unreserved bytes (all the shared traces') are
/// sent as they are; any other byte would cost two more when percent-encoded.
const KEY_BYTES_BESIDE_TRACE_KEY: usize =
    "127.0.0.1:NNNNN".len() + OBJECT_PREFIX.len() + "?size=".len();

/// A `u64` has at most 20 decimal digits.
const MAX_DIGITS: usize = 20;

/// Weighs objects as a [`Weigh`] says.
#[derive(Debug, Clone, Copy)]
pub struct Weigher {
    /// For [`Weigh::Proxy`], the origin's head block by the number of decimal digits of the
    /// body's size (its `Content-Length` is the only field whose length varies).
    heads: Option<[u16; MAX_DIGITS + 1]>,
}

impl Weigher {
    pub fn new(weigh: Weigh) -> Weigher {
        let heads = match weigh {
            Weigh::Body => None,
            Weigh::Proxy => {
                let max_age = OriginOptions::default().max_age;
                let mut heads = [0; MAX_DIGITS + 1];
                for (digits, head) in heads.iter_mut().enumerate().skip(1) {
                    let size = 10u64.pow(digits as u32 - 1);
                    *head = u16::try_from(stored_head_bytes(size, max_age)).unwrap_or(u16::MAX);
                }
                Some(heads)
            }
        };
        Weigher { heads }
    }

    /// What an object of `size` body bytes whose trace key has `key_bytes` bytes weighs.
    #[inline]
    pub fn weight(&self, size: u64, key_bytes: u32) -> u64 {
        let Some(heads) = &self.heads else {
            return size;
        };
        let digits = size.checked_ilog10().map_or(1, |log| log as usize + 1);
        let key = KEY_BYTES_BESIDE_TRACE_KEY + key_bytes as usize + digits;
        let body = usize::try_from(size).unwrap_or(usize::MAX);
        weight::entry(body, usize::from(heads[digits]), key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_weigh_their_bytes() {
        let weigher = Weigher::new(Weigh::Body);
        assert_eq!(weigher.weight(12_345, 9), 12_345);
        assert_eq!(weigher.weight(0, 0), 0);
    }

    #[test]
    fn the_proxy_weighs_the_origins_head_and_the_replayed_key() {
        let weigher = Weigher::new(Weigh::Proxy);
        for size in [0, 9, 10, 4_000, 123_456, u64::from(u32::MAX) + 1] {
            let key = format!("127.0.0.1:40000/obj/web-1?size={size}");
            let head = stored_head_bytes(size, OriginOptions::default().max_age);
            let body = usize::try_from(size).unwrap();
            assert_eq!(
                weigher.weight(size, 5),
                weight::entry(body, head, key.len()),
                "size {size}"
            );
        }
        assert!(weigher.weight(1000, 5) > 1000);
    }
}
