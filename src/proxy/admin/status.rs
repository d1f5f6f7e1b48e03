//! `/status.json` and the status page: the figures of one `/metrics` render, grouped for a person,
//! with a short history of the hit ratio.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::admission::RotationReason;
use crate::admission::probation::Segment;
use crate::cache::disk::WriteReason;
use crate::config::Config;
use crate::telemetry::{
    self, ADMISSION_TOTAL, CACHE_BYTES, CACHE_ENTRIES, CACHE_EVICTIONS_TOTAL,
    CACHE_HIT_BYTES_TOTAL, CACHE_MAX_BYTES, CACHE_WRITE_BACK_BYTES, CACHE_WRITES_TOTAL, DISK_BYTES,
    DISK_ENTRIES, DISK_HITS_TOTAL, DISK_LIVE_BYTES, DISK_MAX_BYTES, DISK_RECOVERING,
    DISK_WRITTEN_BYTES_TOTAL, FILTER_BYTES, FILTER_CAPACITY, FILTER_ESTIMATED_FPR,
    FILTER_ESTIMATED_ITEMS, FILTER_FILL_RATIO, FILTER_GENERATION, FILTER_MAX_AGE_REMAINING_SECONDS,
    FILTER_ROTATE_AT_FPR, FILTER_ROTATIONS_TOTAL, ORIGIN_BYTES_TOTAL, REQUESTS_TOTAL,
    SLICE_ORIGIN_BYTES_TOTAL, SLICES_TOTAL, UPSTREAM_HEALTHY,
};

use crate::proxy::Proxy;
use crate::proxy::upstream::label;
use crate::telemetry::{DecisionLabel, Outcome, SliceEvent};

/// The page at `GET /`: HTML with its style and script inline, polling `/status.json`.
pub const PAGE: &str = include_str!("status.html");

/// How often the history samples the counters, and how many samples it keeps: ten minutes.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
const SAMPLES_KEPT: usize = 120;

/// The outcomes the dashboard's hit ratio counts as served from the cache.
const HIT_OUTCOMES: [Outcome; 3] = [Outcome::Hit, Outcome::Stale, Outcome::Revalidated];

/// What `/status.json` reports. Every figure is a series of the same `/metrics` render.
#[derive(Debug, serde::Serialize)]
pub struct Status {
    /// `admission.mode`.
    pub mode: &'static str,
    /// `bloomgate_requests_total` by `cache_status`.
    pub requests: BTreeMap<&'static str, u64>,
    /// Since start: hit, stale and revalidated over all requests (the dashboard's hit ratio).
    pub hit_ratio: Option<f64>,
    /// Since start: bytes served from the cache over those and the origin's.
    pub byte_hit_ratio: Option<f64>,
    /// `bloomgate_admission_total` by `decision`.
    pub admission: BTreeMap<&'static str, u64>,
    /// The doorkeeper's filters, when a mode uses one.
    pub doorkeeper: Option<DoorkeeperStatus>,
    pub cache: CacheStatus,
    /// The disk tier, when there is one.
    pub disk: Option<DiskStatus>,
    pub origins: Vec<OriginStatus>,
    /// Each route of the configuration, in order, with its requests and hit ratio.
    pub routes: Vec<RouteStatus>,
    /// `bloomgate_slices_total` by `event`: slices of large objects stored, hit, refused by
    /// admission, and origin answers not used.
    pub slices: BTreeMap<&'static str, u64>,
    /// `bloomgate_slice_origin_bytes_total`.
    pub slice_origin_bytes: u64,
    /// The last ten minutes in intervals of [`SAMPLE_EVERY`], oldest first; the last one ends now.
    pub history: Vec<Interval>,
}

#[derive(Debug, serde::Serialize)]
pub struct DoorkeeperStatus {
    pub generation: u64,
    pub capacity: u64,
    pub fill_ratio: Generations,
    pub estimated_items: Generations,
    pub estimated_fpr: f64,
    pub rotate_at_fpr: f64,
    /// Until `admission.max_age` rotates the current generation; its bits or capacity may first.
    pub max_age_remaining_seconds: f64,
    pub rotations: BTreeMap<&'static str, u64>,
    pub bytes: u64,
}

#[derive(Debug, serde::Serialize)]
pub struct Generations {
    pub current: f64,
    pub previous: f64,
}

#[derive(Debug, serde::Serialize)]
pub struct CacheStatus {
    /// By segment: `probation`, `main`.
    pub entries: BTreeMap<&'static str, u64>,
    pub bytes: BTreeMap<&'static str, u64>,
    /// Bytes of main held by proven slices waiting for the disk tier.
    pub write_back_bytes: u64,
    pub max_bytes: u64,
    pub writes: BTreeMap<&'static str, u64>,
    pub evictions: u64,
}

#[derive(Debug, serde::Serialize)]
pub struct DiskStatus {
    /// Still recovering its index at start: lookups miss, nothing is written.
    pub recovering: bool,
    pub entries: u64,
    /// Bytes of the records on disk: what the tier holds.
    pub live_bytes: u64,
    /// Bytes the tier's files take, preallocated segments included.
    pub bytes: u64,
    pub max_bytes: u64,
    pub hits: u64,
    /// Bytes handed to the engine, all reasons together.
    pub written_bytes: u64,
}

/// One origin server of the configuration, and whether it is in rotation.
#[derive(Debug, serde::Serialize)]
pub struct OriginStatus {
    /// Its upstream group (`origin` for `[origin] url` alone).
    pub upstream: String,
    pub url: String,
    pub health: Health,
}

/// One route (`[[routes]]`, or the one `origin.url` stands for): its requests since start and the
/// share answered from the cache.
#[derive(Debug, serde::Serialize)]
pub struct RouteStatus {
    pub name: String,
    pub upstream: String,
    /// `false` when its policy sends every request past the cache.
    pub cached: bool,
    pub requests: u64,
    pub hit_ratio: Option<f64>,
}

fn routes(config: &Config, series: &Exposition) -> Vec<RouteStatus> {
    config
        .upstreams()
        .routes
        .iter()
        .map(|route| {
            let count = |outcome: Outcome| {
                series.sum(
                    REQUESTS_TOTAL,
                    &[("cache_status", outcome.as_str()), ("route", &route.name)],
                ) as u64
            };
            let requests = Outcome::ALL.into_iter().map(count).sum();
            let hits = HIT_OUTCOMES.into_iter().map(count).sum();
            RouteStatus {
                name: route.name.clone(),
                upstream: route.upstream.clone(),
                cached: route.cache.enabled,
                requests,
                hit_ratio: share(hits, requests),
            }
        })
        .collect()
}

/// A server's health as `bloomgate_upstream_healthy` says: in rotation or held out by passive or
/// active checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Health {
    Up,
    Down,
}

/// Requests and ratios over one interval of the history.
#[derive(Debug, serde::Serialize)]
pub struct Interval {
    /// When the interval ended, in seconds since the Unix epoch.
    pub end_unix_seconds: f64,
    pub seconds: f64,
    pub requests: u64,
    /// `None` when the interval had no request (or no byte).
    pub hit_ratio: Option<f64>,
    pub byte_hit_ratio: Option<f64>,
}

/// Every server of the configuration's upstream groups, in their order, with the health the
/// render's `bloomgate_upstream_healthy` gives it (a server a reload removed keeps its series in the
/// exporter, so the configuration says which to show).
fn origins(config: &Config, series: &Exposition) -> Vec<OriginStatus> {
    let upstreams = config.upstreams();
    let mut origins = Vec::new();
    for group in &upstreams.groups {
        for server in &group.servers {
            let url = label(&server.url);
            let healthy = series.value_of(
                UPSTREAM_HEALTHY,
                &[("upstream", &group.name), ("server", &url)],
            );
            origins.push(OriginStatus {
                upstream: group.name.clone(),
                health: if healthy == Some(1.0) {
                    Health::Up
                } else {
                    Health::Down
                },
                url,
            });
        }
    }
    origins
}

/// The counters the history keeps at each sample.
#[derive(Debug, Clone, Copy)]
struct Totals {
    unix_seconds: f64,
    requests: u64,
    hits: u64,
    hit_bytes: u64,
    origin_bytes: u64,
}

/// The last [`SAMPLES_KEPT`] samples of the counters, one every [`SAMPLE_EVERY`].
#[derive(Default)]
pub struct History(Mutex<VecDeque<Totals>>);

impl History {
    /// A history whose first sample is now with every counter at zero: the counters start with
    /// the process, and a first sample taken by the timer could come after the first requests (the
    /// admin listener's task may start after the public listeners have served some).
    pub fn starting_now() -> History {
        let history = History::default();
        history.record(Totals {
            unix_seconds: unix_now(),
            requests: 0,
            hits: 0,
            hit_bytes: 0,
            origin_bytes: 0,
        });
        history
    }

    /// Samples the counters now (a `/metrics` render); the admin listener calls it on a timer.
    pub fn sample(&self, proxy: &Proxy) {
        self.record(Exposition::render(proxy).totals());
    }

    fn record(&self, totals: Totals) {
        let mut samples = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() == SAMPLES_KEPT {
            samples.pop_front();
        }
        samples.push_back(totals);
    }

    /// The intervals between the samples, and from the last one to `now`.
    fn intervals(&self, now: Totals) -> Vec<Interval> {
        let samples = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let ends = samples.iter().skip(1).chain(std::iter::once(&now));
        samples
            .iter()
            .zip(ends)
            .map(|(from, to)| {
                let requests = to.requests.saturating_sub(from.requests);
                let hits = to.hits.saturating_sub(from.hits);
                let hit_bytes = to.hit_bytes.saturating_sub(from.hit_bytes);
                let origin_bytes = to.origin_bytes.saturating_sub(from.origin_bytes);
                Interval {
                    end_unix_seconds: to.unix_seconds,
                    seconds: to.unix_seconds - from.unix_seconds,
                    requests,
                    hit_ratio: share(hits, requests),
                    byte_hit_ratio: share(hit_bytes, hit_bytes + origin_bytes),
                }
            })
            .collect()
    }
}

/// The status now: one `/metrics` render, read back series by series.
pub fn status(proxy: &Proxy, history: &History) -> Status {
    let series = Exposition::render(proxy);
    let config = proxy.config();
    let totals = series.totals();
    let by_segment = |name| series.by_label(name, "segment", Segment::ALL.map(|s| s.as_str()));
    let generations = |name: &str| Generations {
        current: series.value(name, Some(("generation", "current"))),
        previous: series.value(name, Some(("generation", "previous"))),
    };
    Status {
        mode: config.admission.mode.as_str(),
        requests: series.by_label(
            REQUESTS_TOTAL,
            "cache_status",
            Outcome::ALL.map(Outcome::as_str),
        ),
        hit_ratio: share(totals.hits, totals.requests),
        byte_hit_ratio: share(totals.hit_bytes, totals.hit_bytes + totals.origin_bytes),
        admission: series.by_label(
            ADMISSION_TOTAL,
            "decision",
            DecisionLabel::ALL.map(DecisionLabel::as_str),
        ),
        doorkeeper: series.doorkeeper.then(|| DoorkeeperStatus {
            generation: series.count(FILTER_GENERATION, None),
            capacity: series.count(FILTER_CAPACITY, None),
            fill_ratio: generations(FILTER_FILL_RATIO),
            estimated_items: generations(FILTER_ESTIMATED_ITEMS),
            estimated_fpr: series.value(FILTER_ESTIMATED_FPR, None),
            rotate_at_fpr: series.value(FILTER_ROTATE_AT_FPR, None),
            max_age_remaining_seconds: series.value(FILTER_MAX_AGE_REMAINING_SECONDS, None),
            rotations: series.by_label(
                FILTER_ROTATIONS_TOTAL,
                "reason",
                RotationReason::ALL.map(|r| r.as_str()),
            ),
            bytes: series.count(FILTER_BYTES, None),
        }),
        cache: CacheStatus {
            entries: by_segment(CACHE_ENTRIES),
            bytes: by_segment(CACHE_BYTES),
            write_back_bytes: series.count(CACHE_WRITE_BACK_BYTES, None),
            max_bytes: series.count(CACHE_MAX_BYTES, None),
            writes: by_segment(CACHE_WRITES_TOTAL),
            evictions: series.count(CACHE_EVICTIONS_TOTAL, None),
        },
        disk: series.disk.then(|| DiskStatus {
            recovering: series.count(DISK_RECOVERING, None) == 1,
            entries: series.count(DISK_ENTRIES, None),
            live_bytes: series.count(DISK_LIVE_BYTES, None),
            bytes: series.count(DISK_BYTES, None),
            max_bytes: series.count(DISK_MAX_BYTES, None),
            hits: series.count(DISK_HITS_TOTAL, None),
            written_bytes: WriteReason::ALL
                .iter()
                .map(|r| series.count(DISK_WRITTEN_BYTES_TOTAL, Some(("reason", r.as_str()))))
                .sum(),
        }),
        origins: origins(&config, &series),
        routes: routes(&config, &series),
        slices: series.by_label(
            SLICES_TOTAL,
            "event",
            SliceEvent::ALL.map(SliceEvent::as_str),
        ),
        slice_origin_bytes: series.count(SLICE_ORIGIN_BYTES_TOTAL, None),
        history: history.intervals(totals),
    }
}

/// One `/metrics` render read back: each series as written (`name{label="value"}`) to its value.
struct Exposition {
    values: HashMap<String, f64>,
    unix_seconds: f64,
    doorkeeper: bool,
    disk: bool,
}

impl Exposition {
    fn render(proxy: &Proxy) -> Exposition {
        let state = proxy.scrape_state();
        let (doorkeeper, disk) = (state.doorkeeper.is_some(), state.disk.is_some());
        let text = telemetry::render(&state);
        // The exporter writes `series value` lines, without timestamps.
        let values = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (series, value) = line.rsplit_once(' ')?;
                Some((series.to_owned(), value.parse().ok()?))
            })
            .collect();
        Exposition {
            values,
            unix_seconds: unix_now(),
            doorkeeper,
            disk,
        }
    }

    /// The sum of the series of `name` that have `label="value"` (all of them without one),
    /// whatever their other labels (a request's `route`); 0 if the render has none.
    fn value(&self, name: &str, label: Option<(&str, &str)>) -> f64 {
        self.sum(name, label.as_slice())
    }

    /// The sum of the series of `name` whose labels include every one of `wanted`.
    fn sum(&self, name: &str, wanted: &[(&str, &str)]) -> f64 {
        let wanted: Vec<String> = wanted
            .iter()
            .map(|(label, value)| format!("{label}=\"{value}\""))
            .collect();
        self.values
            .iter()
            .filter_map(|(series, value)| {
                let labels = match series.strip_prefix(name)? {
                    "" => "",
                    rest => rest.strip_prefix('{')?.strip_suffix('}')?,
                };
                let have = labels.split(',');
                wanted
                    .iter()
                    .all(|pair| have.clone().any(|label| label == pair))
                    .then_some(*value)
            })
            .sum()
    }

    /// The series `name{a="x",b="y"}` with these labels in this order, if the render has it.
    fn value_of(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let labels: Vec<String> = labels
            .iter()
            .map(|(label, value)| format!("{label}=\"{value}\""))
            .collect();
        let series = format!("{name}{{{}}}", labels.join(","));
        self.values.get(&series).copied()
    }

    fn count(&self, name: &str, label: Option<(&str, &str)>) -> u64 {
        self.value(name, label) as u64
    }

    /// The series `name{label="value"}` of each value, by value.
    fn by_label<const N: usize>(
        &self,
        name: &str,
        label: &str,
        values: [&'static str; N],
    ) -> BTreeMap<&'static str, u64> {
        values
            .into_iter()
            .map(|value| (value, self.count(name, Some((label, value)))))
            .collect()
    }

    fn totals(&self) -> Totals {
        let requests =
            |outcome: Outcome| self.count(REQUESTS_TOTAL, Some(("cache_status", outcome.as_str())));
        Totals {
            unix_seconds: self.unix_seconds,
            requests: Outcome::ALL.into_iter().map(requests).sum(),
            hits: HIT_OUTCOMES.into_iter().map(requests).sum(),
            hit_bytes: self.count(CACHE_HIT_BYTES_TOTAL, None),
            origin_bytes: self.count(ORIGIN_BYTES_TOTAL, None),
        }
    }
}

/// `part / whole`, or `None` when `whole` is 0.
fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |since| since.as_secs_f64())
}

fn share(part: u64, whole: u64) -> Option<f64> {
    (whole > 0).then(|| part as f64 / whole as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: u64, requests: u64, hits: u64) -> Totals {
        Totals {
            unix_seconds: seconds as f64,
            requests,
            hits,
            hit_bytes: hits * 100,
            origin_bytes: (requests - hits) * 100,
        }
    }

    #[test]
    fn history_keeps_ten_minutes_and_its_last_interval_ends_now() {
        let history = History::default();
        // 20 minutes of samples: 10 requests every 5 s, 4 of them hits.
        for i in 0..240 {
            history.record(at(5 * i, 10 * i, 4 * i));
        }
        let intervals = history.intervals(at(5 * 239 + 2, 10 * 239 + 3, 4 * 239 + 3));
        assert_eq!(intervals.len(), SAMPLES_KEPT);
        let first = &intervals[0];
        assert_eq!(first.end_unix_seconds - first.seconds, (5 * 120) as f64);
        assert_eq!((first.requests, first.hit_ratio), (10, Some(0.4)));
        let last = &intervals[SAMPLES_KEPT - 1];
        assert_eq!(
            (last.seconds, last.requests, last.hit_ratio),
            (2.0, 3, Some(1.0))
        );
        assert_eq!(last.byte_hit_ratio, Some(1.0));
    }

    #[test]
    fn an_interval_without_requests_has_no_ratio() {
        let history = History::default();
        history.record(at(0, 5, 1));
        let intervals = history.intervals(at(5, 5, 1));
        assert_eq!(intervals.len(), 1);
        assert_eq!(
            (intervals[0].hit_ratio, intervals[0].byte_hit_ratio),
            (None, None)
        );
    }
}
