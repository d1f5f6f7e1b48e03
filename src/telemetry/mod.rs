//! bloomgate's metrics: each defined once in a table, the label values of the request path, the
//! handles it counts with, and the Prometheus exporter.
//!
//! [`table::METRICS`] names every metric with its kind, unit, help and labels; from it come the
//! exporter's help text ([`describe`]) and the series created at zero at start
//! ([`register_at_start`]). A label whose values are known only at run time (the routes of the
//! configuration, the servers of an upstream group) is [`Values::Given`]: its owner passes them.

mod exporter;
mod labels;
mod series;
pub mod table;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};

pub use exporter::{DoorkeeperState, ScrapeState, recorder, render};
pub use labels::{CachedError, DecisionLabel, OriginOutcome, Outcome, PurgeLabel, SliceEvent};
pub use series::{RouteSeries, Series, UNROUTED, series};
pub use table::*;

/// Gives every metric its help text and unit, as the table says.
fn describe() {
    for metric in METRICS {
        let (name, help) = (metric.name, metric.help);
        match (metric.kind, metric.unit) {
            (Kind::Counter, Some(unit)) => describe_counter!(name, unit, help),
            (Kind::Counter, None) => describe_counter!(name, help),
            (Kind::Gauge, Some(unit)) => describe_gauge!(name, unit, help),
            (Kind::Gauge, None) => describe_gauge!(name, help),
            (Kind::Histogram, Some(unit)) => describe_histogram!(name, unit, help),
            (Kind::Histogram, None) => describe_histogram!(name, help),
        }
    }
}

/// Creates at zero every series of the metrics [`Registered::AtStart`], one per combination of
/// their labels' values, so that dashboards and alerts see them before the first event. `given`
/// holds the values of [`Values::Given`] labels by label name (`("scope", &["stream", ...])`); a
/// metric with a given label missing there is left to its owner.
pub fn register_at_start(given: &[(&str, &[&str])]) {
    let _ = recorder();
    for metric in METRICS {
        if metric.registered != Registered::AtStart {
            continue;
        }
        let Some(label_sets) = label_sets(metric, given) else {
            continue;
        };
        for labels in label_sets {
            match metric.kind {
                Kind::Counter => counter!(metric.name, labels).increment(0),
                Kind::Gauge => gauge!(metric.name, labels).increment(0.0),
                Kind::Histogram => drop(histogram!(metric.name, labels)),
            }
        }
    }
}

/// Every combination of the values of `metric`'s labels; `None` if a given label's values are
/// not in `given`.
fn label_sets(metric: &Metric, given: &[(&str, &[&str])]) -> Option<Vec<Vec<metrics::Label>>> {
    let mut sets = vec![Vec::new()];
    for label in metric.labels {
        let values: Vec<String> = match label.values {
            Values::Listed(values) => values().into_iter().map(str::to_owned).collect(),
            Values::Given => given
                .iter()
                .find(|(name, _)| *name == label.name)
                .map(|(_, values)| values.iter().map(|value| (*value).to_owned()).collect())?,
        };
        sets = sets
            .into_iter()
            .flat_map(|set: Vec<metrics::Label>| {
                values.iter().map(move |value| {
                    let mut set = set.clone();
                    set.push(metrics::Label::new(label.name, value.clone()));
                    set
                })
            })
            .collect();
    }
    Some(sets)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn every_metric_is_named_once_under_the_bloomgate_prefix() {
        let mut names = HashSet::new();
        for metric in METRICS {
            assert!(metric.name.starts_with("bloomgate_"), "{}", metric.name);
            assert!(names.insert(metric.name), "{} twice", metric.name);
            assert!(!metric.help.is_empty(), "{} has no help", metric.name);
        }
    }

    #[test]
    fn every_series_of_a_metric_registered_at_start_is_exported_before_any_event() {
        register_at_start(&[("scope", &["stream", "connection"])]);
        let text = recorder().render();
        for metric in METRICS
            .iter()
            .filter(|m| m.registered == Registered::AtStart)
        {
            assert!(
                text.contains(&format!("# HELP {} ", metric.name)),
                "{} is not described",
                metric.name
            );
            let sets = label_sets(metric, &[("scope", &["stream", "connection"])])
                .expect("every given label given");
            for labels in sets {
                let shown: Vec<String> = labels
                    .iter()
                    .map(|label| format!("{}=\"{}\"", label.key(), label.value()))
                    .collect();
                let series = match metric.kind {
                    Kind::Histogram => format!("{}_count", metric.name),
                    Kind::Counter | Kind::Gauge => metric.name.to_owned(),
                };
                let line = if shown.is_empty() {
                    format!("\n{series} ")
                } else {
                    format!("\n{series}{{{}}} ", shown.join(","))
                };
                assert!(text.contains(&line), "no {line:?} in:\n{text}");
            }
        }
    }

    #[test]
    fn a_metric_whose_given_label_is_not_given_is_left_to_its_owner() {
        let scope = METRICS
            .iter()
            .find(|m| m.name == CLIENT_SEND_TIMEOUTS_TOTAL)
            .expect("in the table");
        assert!(label_sets(scope, &[]).is_none());
        assert_eq!(
            label_sets(scope, &[("scope", &["stream", "connection"])]).map(|sets| sets.len()),
            Some(2)
        );
    }
}
