//! `bloomgate simulate --plot`: the curves as a person opens them, a well-formed SVG with one line
//! per policy and a point per cache size.

use crate::scratch;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use bloomgate::trace::SyntheticTrace;

/// The policies the picture draws, by their legend's first word.
const POLICIES: [&str; 7] = [
    "admit-all",
    "second-hit-exact",
    "bloom",
    "probation",
    "s3-fifo",
    "w-tinylfu",
    "sieve",
];
const SIZES: [&str; 4] = ["1", "5", "10", "20"];
/// Object hit ratio, byte hit ratio, bytes written into main, all bytes written.
const PANELS: usize = 4;

fn synthetic_trace(name: &str) -> PathBuf {
    let trace = SyntheticTrace {
        requests: 20_000,
        objects: 4_000,
        ..SyntheticTrace::default()
    };
    crate::synthetic_trace_file(name, &trace)
}

fn simulate_plot(trace: &Path, plot: &Path) -> String {
    simulate_plot_sizes(trace, plot, &SIZES.join(","))
}

fn simulate_plot_sizes(trace: &Path, plot: &Path, sizes: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .args(["simulate", "--jobs", "2", "--cache-percent", sizes])
        .arg("--trace")
        .arg(trace)
        .arg("--plot")
        .arg(plot)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read_to_string(plot).unwrap()
}

#[test]
fn plot_draws_one_curve_per_policy_with_a_point_per_size_in_each_panel() {
    let trace = synthetic_trace("curves.csv");
    let plot = trace.with_extension("svg");
    let svg = simulate_plot(&trace, &plot);
    let document = roxmltree::Document::parse(&svg).expect("the SVG is well-formed XML");
    assert_eq!(document.root_element().tag_name().name(), "svg");

    let texts: Vec<&str> = document
        .descendants()
        .filter(|node| node.has_tag_name("text"))
        .filter_map(|node| node.text())
        .map(str::trim)
        .collect();
    let title = format!(
        "{}: 20000 requests",
        trace.file_name().unwrap().to_string_lossy()
    );
    assert!(
        texts.iter().any(|text| text.starts_with(&title)),
        "no title {title:?} in {texts:?}"
    );
    for axis in [
        "hit ratio (%)",
        "byte hit ratio (%)",
        "footprint, log scale)",
    ] {
        assert!(
            texts.iter().any(|text| text.contains(axis)),
            "no axis {axis:?} in {texts:?}"
        );
    }
    // The legend names each policy once per panel, beside a marker of its curve's colour.
    for policy in POLICIES {
        let named = texts
            .iter()
            .filter(|text| text.split(' ').next() == Some(policy))
            .count();
        assert_eq!(named, PANELS, "{policy} in the legends of {texts:?}");
    }

    // A curve is a polyline through a point per size (a legend marker has two points), in its
    // policy's colour, with a dot on each point.
    let mut curves: BTreeMap<&str, usize> = BTreeMap::new();
    for line in document
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
    {
        let points = line
            .attribute("points")
            .unwrap_or("")
            .split_whitespace()
            .count();
        if points == SIZES.len() {
            *curves.entry(line.attribute("stroke").unwrap()).or_default() += 1;
        }
    }
    assert_eq!(
        curves.len(),
        POLICIES.len(),
        "one colour per policy: {curves:?}"
    );
    assert!(curves.values().all(|&n| n == PANELS), "{curves:?}");
    let mut dots: BTreeMap<&str, usize> = BTreeMap::new();
    for dot in document.descendants().filter(|n| n.has_tag_name("circle")) {
        *dots.entry(dot.attribute("fill").unwrap()).or_default() += 1;
    }
    for colour in curves.keys() {
        assert_eq!(dots.get(colour), Some(&(PANELS * SIZES.len())), "{dots:?}");
    }
}

/// The texts of an SVG document.
fn texts(svg: &str) -> Vec<String> {
    let document = roxmltree::Document::parse(svg).expect("the SVG is well-formed XML");
    document
        .descendants()
        .filter(|node| node.has_tag_name("text"))
        .filter_map(|node| node.text())
        .map(|text| text.trim().to_owned())
        .collect()
}

#[test]
fn a_single_cache_size_still_gets_its_tick() {
    let trace = synthetic_trace("single.csv");
    let svg = simulate_plot_sizes(&trace, &trace.with_extension("svg"), "7");
    let texts = texts(&svg);
    let ticks = texts.iter().filter(|text| *text == "7").count();
    assert_eq!(ticks, PANELS, "an x tick of 7% per panel in {texts:?}");
}

#[test]
fn synthesised_sizes_and_all_bytes_written_are_shown() {
    let path = scratch().join("bloomgate-plot-unsized.csv");
    let mut csv = String::from("time,key,size\n");
    for request in 0..2_000 {
        csv.push_str(&format!("{request},k{},\n", request % 300));
    }
    std::fs::write(&path, csv).unwrap();
    let texts = texts(&simulate_plot(&path, &path.with_extension("svg")));
    assert!(
        texts.iter().any(|text| text.contains("sizes synthesised")),
        "{texts:?}"
    );
    assert!(
        texts
            .iter()
            .any(|text| text.starts_with("All bytes written")),
        "{texts:?}"
    );
}

#[test]
fn plot_to_html_shows_the_picture_with_the_report_under_it() {
    let trace = synthetic_trace("page.csv");
    let html = simulate_plot(&trace, &trace.with_extension("html"));
    let svg = html.find("<svg").expect("the SVG inline");
    let table = html.find("<pre>").expect("the report under it");
    assert!(svg < table);
    assert!(html[table..].contains("probation vs admit-all"), "{html}");
}
