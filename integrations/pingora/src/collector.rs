//! The doorkeeper's gauges and the admission decisions as a `prometheus` crate [`Collector`],
//! under the names bloomgate's own `/metrics` uses, so one dashboard reads both.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use bloomgate_admission::metrics::{
    ADMISSION_TOTAL, FILTER_BYTES, FILTER_CAPACITY, FILTER_ESTIMATED_FPR, FILTER_ESTIMATED_ITEMS,
    FILTER_FILL_RATIO, FILTER_GENERATION, FILTER_ROTATE_AT_FPR, FILTER_ROTATIONS_TOTAL, help,
};
use doorkeeper::Doorkeeper;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{Gauge, GaugeVec, IntCounterVec, Opts};

use crate::DecisionCounts;

/// Samples the doorkeeper when scraped; see [`crate::DoorkeeperPolicy::collector`].
pub struct DoorkeeperCollector {
    doorkeeper: Option<Arc<Doorkeeper>>,
    counts: Arc<DecisionCounts>,
    rotate_at_fpr_value: f64,
    fill_ratio: GaugeVec,
    estimated_items: GaugeVec,
    estimated_fpr: Gauge,
    rotate_at_fpr: Gauge,
    capacity: Gauge,
    generation: Gauge,
    bytes: Gauge,
    rotations: IntCounterVec,
    decisions: IntCounterVec,
    /// Scrapes bring the counters up to the sampled totals one at a time.
    collecting: Mutex<()>,
}

fn gauge(name: &str, help: &str) -> Gauge {
    Gauge::new(name, help).expect("a valid metric name and help")
}

fn gauges(name: &str, help: &str, label: &str) -> GaugeVec {
    GaugeVec::new(Opts::new(name, help), &[label]).expect("a valid metric name and label")
}

fn counters(name: &str, help: &str, label: &str) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), &[label]).expect("a valid metric name and label")
}

impl DoorkeeperCollector {
    pub(crate) fn new(
        doorkeeper: Option<Arc<Doorkeeper>>,
        rotate_at_fpr: f64,
        counts: Arc<DecisionCounts>,
    ) -> DoorkeeperCollector {
        // Help texts as bloomgate's exporter gives them (`bloomgate_admission::metrics::help`).
        DoorkeeperCollector {
            doorkeeper,
            counts,
            rotate_at_fpr_value: rotate_at_fpr,
            fill_ratio: gauges(FILTER_FILL_RATIO, help::FILTER_FILL_RATIO, "generation"),
            estimated_items: gauges(
                FILTER_ESTIMATED_ITEMS,
                help::FILTER_ESTIMATED_ITEMS,
                "generation",
            ),
            estimated_fpr: gauge(FILTER_ESTIMATED_FPR, help::FILTER_ESTIMATED_FPR),
            rotate_at_fpr: gauge(FILTER_ROTATE_AT_FPR, help::FILTER_ROTATE_AT_FPR),
            capacity: gauge(FILTER_CAPACITY, help::FILTER_CAPACITY),
            generation: gauge(FILTER_GENERATION, help::FILTER_GENERATION),
            bytes: gauge(FILTER_BYTES, help::FILTER_BYTES),
            rotations: counters(
                FILTER_ROTATIONS_TOTAL,
                help::FILTER_ROTATIONS_TOTAL,
                "reason",
            ),
            decisions: counters(
                ADMISSION_TOTAL,
                "Cache admission decisions for keys absent from the cache, by decision.",
                "decision",
            ),
            collecting: Mutex::new(()),
        }
    }

    fn sample(&self) {
        let raise = |vec: &IntCounterVec, label: &str, total: u64| {
            let counter = vec.with_label_values(&[label]);
            let now = counter.get();
            if total > now {
                counter.inc_by(total - now);
            }
        };
        let counts = &self.counts;
        raise(
            &self.decisions,
            "first_hit",
            counts.first_hit.load(Ordering::Relaxed),
        );
        raise(
            &self.decisions,
            "admitted",
            counts.admitted.load(Ordering::Relaxed),
        );
        let Some(doorkeeper) = &self.doorkeeper else {
            return;
        };
        let stats = doorkeeper.stats();
        let previous = stats.previous.as_ref();
        for (generation, fill, items) in [
            (
                "current",
                stats.current.fill_ratio,
                stats.current.estimated_items,
            ),
            (
                "previous",
                previous.map_or(0.0, |p| p.fill_ratio),
                previous.map_or(0.0, |p| p.estimated_items),
            ),
        ] {
            self.fill_ratio.with_label_values(&[generation]).set(fill);
            self.estimated_items
                .with_label_values(&[generation])
                .set(items);
        }
        self.estimated_fpr.set(stats.combined_fpr);
        self.rotate_at_fpr.set(self.rotate_at_fpr_value);
        self.capacity.set(doorkeeper.config().capacity as f64);
        self.generation.set(stats.generation as f64);
        self.bytes.set(stats.memory_bytes as f64);
        let rotations = stats.rotations;
        for (reason, total) in [
            ("fpr_threshold", rotations.fpr_threshold),
            ("capacity", rotations.capacity),
            ("max_age", rotations.max_age),
        ] {
            raise(&self.rotations, reason, total);
        }
    }

    fn parts(&self) -> Vec<&dyn Collector> {
        let mut parts: Vec<&dyn Collector> = vec![&self.decisions];
        if self.doorkeeper.is_some() {
            parts.extend([
                &self.fill_ratio as &dyn Collector,
                &self.estimated_items,
                &self.estimated_fpr,
                &self.rotate_at_fpr,
                &self.capacity,
                &self.generation,
                &self.bytes,
                &self.rotations,
            ]);
        }
        parts
    }
}

impl Collector for DoorkeeperCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.parts()
            .into_iter()
            .flat_map(|part| part.desc())
            .collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one_at_a_time = self
            .collecting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        self.sample();
        self.parts()
            .into_iter()
            .flat_map(|part| part.collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use doorkeeper::DoorkeeperConfig;
    use pingora_cache::CacheKey;
    use pingora_cache::admission::AdmissionPolicy;
    use prometheus::{Encoder, Registry, TextEncoder};

    use crate::DoorkeeperPolicy;

    fn scrape(registry: &Registry) -> String {
        let mut text = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut text)
            .expect("encodes");
        String::from_utf8(text).expect("utf-8")
    }

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
    }

    #[test]
    fn the_collector_reports_the_doorkeeper_under_bloomgates_names() {
        let policy = DoorkeeperPolicy::new(DoorkeeperConfig {
            capacity: 100,
            target_fpr: 0.01,
            rotate_at_fpr: 0.02,
            max_age: Duration::from_secs(3600),
        });
        let registry = Registry::new();
        registry
            .register(Box::new(policy.collector()))
            .expect("registers");
        for i in 0..250 {
            policy.observe(&CacheKey::new(format!("k{i}"), ""));
        }
        policy.observe(&CacheKey::new("k249", ""));
        let text = scrape(&registry);
        let first_hit = value(&text, "bloomgate_admission_total{decision=\"first_hit\"}");
        let admitted = value(&text, "bloomgate_admission_total{decision=\"admitted\"}");
        // 251 decisions; a few of the 250 new keys may be false positives (1% per generation).
        assert_eq!(first_hit.zip(admitted).map(|(f, a)| f + a), Some(251.0));
        assert!(first_hit >= Some(240.0), "{text}");
        let rotations = value(
            &text,
            "bloomgate_filter_rotations_total{reason=\"capacity\"}",
        )
        .unwrap_or(0.0)
            + value(
                &text,
                "bloomgate_filter_rotations_total{reason=\"fpr_threshold\"}",
            )
            .unwrap_or(0.0);
        assert!(rotations >= 1.0, "250 keys through capacity 100:\n{text}");
        assert_eq!(value(&text, "bloomgate_filter_capacity"), Some(100.0));
        assert_eq!(value(&text, "bloomgate_filter_rotate_at_fpr"), Some(0.02));
        let fill = value(&text, "bloomgate_filter_fill_ratio{generation=\"current\"}");
        assert!(fill.is_some_and(|f| f > 0.0 && f < 1.0), "{text}");
        assert!(value(&text, "bloomgate_filter_bytes").is_some_and(|b| b > 0.0));
        // A second scrape does not count anything twice.
        let again = scrape(&registry);
        assert_eq!(
            value(&again, "bloomgate_admission_total{decision=\"first_hit\"}"),
            first_hit
        );
    }
}
