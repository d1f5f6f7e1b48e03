//! Synthetic video sessions: large objects asked for in byte ranges, a popular start and a long
//! tail of seeks, all from a seed.

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rand_distr::{Distribution, Zipf};

use super::{ByteRange, Request};

/// Video requests per second of trace time: request `i` is at `i / 1000` seconds.
const REQUESTS_PER_SECOND: f64 = 1000.0;
/// Where a seek lands: a player seeks to a keyframe, not to any byte.
const SEEK_ALIGN: u64 = 64 * 1024;

/// The parameters of a video-session trace; the same parameters always give the same trace.
///
/// Each of `sessions` sessions picks a video by Zipf(`alpha`) popularity over `videos` videos
/// (keys `v<rank>`), each of a size drawn log-uniformly from [`min_bytes`, `max_bytes`] (the same
/// video always has the same size). A session plays from the first byte, asking for `chunk_bytes`
/// at a time (`Range: bytes=first-last`), for a geometric number of chunks of mean
/// `watch_chunks`; then it seeks a geometric number of times (mean `seeks`) to a uniform place in
/// the video and plays on for a geometric number of chunks of mean `seek_chunks`. Playing stops at
/// the video's end. So every session shares the start of its video, and the places it seeks to
/// are mostly asked for once.
///
/// [`min_bytes`]: VideoTrace::min_bytes
/// [`max_bytes`]: VideoTrace::max_bytes
#[derive(Debug, Clone, PartialEq)]
pub struct VideoTrace {
    /// Viewing sessions. Default: 2,000.
    pub sessions: u64,
    /// Distinct videos. Default: 200.
    pub videos: u64,
    /// Zipf exponent of the videos' popularity. Default: 0.9.
    pub alpha: f64,
    /// The smallest and the largest video. Default: 16 MiB and 512 MiB.
    pub min_bytes: u64,
    pub max_bytes: u64,
    /// Bytes a player asks for at a time. Default: 2 MiB.
    pub chunk_bytes: u64,
    /// Mean chunks played from the start. Default: 6.
    pub watch_chunks: f64,
    /// Mean seeks per session. Default: 1.5.
    pub seeks: f64,
    /// Mean chunks played after a seek. Default: 3.
    pub seek_chunks: f64,
    /// Seed of everything random. Default: 1.
    pub seed: u64,
}

impl Default for VideoTrace {
    fn default() -> Self {
        VideoTrace {
            sessions: 2_000,
            videos: 200,
            alpha: 0.9,
            min_bytes: 16 << 20,
            max_bytes: 512 << 20,
            chunk_bytes: 2 << 20,
            watch_chunks: 6.0,
            seeks: 1.5,
            seek_chunks: 3.0,
            seed: 1,
        }
    }
}

impl VideoTrace {
    /// The size of video `rank` (0-based).
    pub fn video_bytes(&self, rank: u64) -> u64 {
        let (low, high) = self.size_bounds();
        let mut rng =
            Xoshiro256PlusPlus::seed_from_u64(self.seed ^ rank.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let u: f64 = rng.random();
        let size = (low as f64).ln() + u * ((high as f64).ln() - (low as f64).ln());
        (size.exp().round() as u64).clamp(low, high)
    }

    /// `min_bytes` and `max_bytes`, at least one byte and in order.
    fn size_bounds(&self) -> (u64, u64) {
        let low = self.min_bytes.max(1);
        (low, self.max_bytes.max(low))
    }

    /// The requests, session after session.
    pub fn iter(&self) -> impl Iterator<Item = Request> + use<> {
        let trace = self.clone();
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(self.seed);
        let zipf = Zipf::new(self.videos.max(1) as f64, finite_or_zero(self.alpha)).ok();
        let mut index = 0u64;
        (0..self.sessions).flat_map(move |_| {
            let rank = zipf
                .as_ref()
                .map_or(0, |zipf| zipf.sample(&mut rng) as u64 - 1);
            let ranges = trace.session(&mut rng, trace.video_bytes(rank));
            let key = format!("v{rank}");
            let requests: Vec<Request> = ranges
                .into_iter()
                .map(|range| {
                    index += 1;
                    Request {
                        time: (index - 1) as f64 / REQUESTS_PER_SECOND,
                        key: key.clone(),
                        size: trace.video_bytes(rank),
                        range: Some(range),
                    }
                })
                .collect();
            requests
        })
    }

    /// The ranges one session of a video of `size` bytes asks for, in order.
    fn session(&self, rng: &mut Xoshiro256PlusPlus, size: u64) -> Vec<ByteRange> {
        let chunk = self.chunk_bytes.max(1);
        let mut ranges = Vec::new();
        let mut play = |from: u64, chunks: u64| {
            let mut first = from;
            for _ in 0..chunks {
                if first >= size {
                    break;
                }
                let last = (first + chunk - 1).min(size - 1);
                ranges.push(ByteRange { first, last });
                first = last + 1;
            }
        };
        play(0, 1 + geometric(rng, self.watch_chunks - 1.0));
        for _ in 0..geometric(rng, self.seeks) {
            let to = rng.random_range(0..size) / SEEK_ALIGN * SEEK_ALIGN;
            play(to, 1 + geometric(rng, self.seek_chunks - 1.0));
        }
        ranges
    }
}

/// A count from the geometric distribution on 0, 1, 2, ... with the given mean (0 for a mean
/// that is not positive).
fn geometric(rng: &mut Xoshiro256PlusPlus, mean: f64) -> u64 {
    if mean.is_nan() || mean <= 0.0 || mean.is_infinite() {
        return 0;
    }
    // P(k) = (1 - p)^k p with p = 1 / (1 + mean); inverted from one uniform draw.
    let keep = mean / (1.0 + mean);
    let u: f64 = 1.0 - rng.random::<f64>();
    (u.ln() / keep.ln()).floor() as u64
}

fn finite_or_zero(alpha: f64) -> f64 {
    if alpha.is_finite() {
        alpha.max(0.0)
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_session_starts_at_the_first_byte_and_stays_within_its_video() {
        let trace = VideoTrace {
            sessions: 200,
            ..VideoTrace::default()
        };
        let requests: Vec<Request> = trace.iter().collect();
        let starts = requests
            .iter()
            .filter(|r| r.range.is_some_and(|range| range.first == 0))
            .count();
        assert!(starts >= 200, "{starts} requests for a first byte");
        for request in &requests {
            let range = request.range.expect("every request is a range");
            assert!(range.last < request.size, "{request:?}");
            assert!(range.length() <= trace.chunk_bytes);
            assert!((trace.min_bytes..=trace.max_bytes).contains(&request.size));
        }
    }

    #[test]
    fn the_mean_of_the_geometric_draw_is_the_mean_asked_for() {
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(7);
        let draws = 100_000;
        let sum: u64 = (0..draws).map(|_| geometric(&mut rng, 3.0)).sum();
        let mean = sum as f64 / draws as f64;
        assert!((mean - 3.0).abs() < 0.05, "mean {mean}");
    }
}
