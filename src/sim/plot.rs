//! Miss-ratio curves: a simulation report drawn as SVG (`simulate --plot`), one line per policy.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

use super::SimError;
use super::policy::PolicyKind;
use super::report::{HumanBytes, SimReport};

/// The picture's size in pixels: four panels stacked.
const SIZE: (u32, u32) = (900, 1600);

/// One colour per policy, in the order of [`PolicyKind::ALL`] (Okabe and Ito's palette, told apart
/// by colour-blind readers too).
const COLOURS: [RGBColor; 7] = [
    RGBColor(0, 0, 0),
    RGBColor(230, 159, 0),
    RGBColor(0, 114, 178),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
];

/// How close two curves' values must be, relative to the panel's top, to be drawn as one.
const COINCIDE: f64 = 1e-9;

/// What a panel shows of each policy at each size.
struct Panel {
    title: &'static str,
    y_desc: &'static str,
    /// The figure of a policy at a cache size; ratios in percent, bytes as they are.
    value: fn(&super::PolicyReport) -> f64,
    bytes: bool,
    /// Where the legend hides no curve: hit ratios rise with size, bytes written fall.
    legend: SeriesLabelPosition,
}

const PANELS: [Panel; 4] = [
    Panel {
        title: "Object hit ratio",
        y_desc: "hit ratio (%)",
        value: |p| 100.0 * p.hit_ratio,
        bytes: false,
        legend: SeriesLabelPosition::LowerRight,
    },
    Panel {
        title: "Byte hit ratio",
        y_desc: "byte hit ratio (%)",
        value: |p| 100.0 * p.byte_hit_ratio,
        bytes: false,
        legend: SeriesLabelPosition::LowerRight,
    },
    Panel {
        title: "Bytes written into main (probation's FIFO, S3-FIFO's small FIFO and W-TinyLFU's window not counted)",
        y_desc: "written into main",
        value: |p| p.main_written_bytes as f64,
        bytes: true,
        legend: SeriesLabelPosition::UpperRight,
    },
    Panel {
        title: "All bytes written (first copies in probation's FIFO, the small FIFO or the window included)",
        y_desc: "written",
        value: |p| p.written_bytes as f64,
        bytes: true,
        legend: SeriesLabelPosition::UpperRight,
    },
];

/// Writes the report's curves to `path`: SVG, or for a name ending in `.html` a page with the SVG
/// inline and the printed report under it.
pub fn write_plot(path: &Path, report: &SimReport) -> Result<(), SimError> {
    let svg = curves_svg(report)?;
    let html = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("html"));
    let body = if html {
        format!(
            "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title></head>\n\
             <body>\n{svg}\n<pre>{table}</pre>\n</body></html>\n",
            title = escape(&title(report)),
            table = escape(&report.to_string()),
        )
    } else {
        svg
    };
    std::fs::write(path, body).map_err(|error| SimError::Plot {
        path: path.display().to_string(),
        error: error.to_string(),
    })
}

/// The report as SVG: object hit ratio, byte hit ratio and bytes written into main against cache
/// size (log scale), one line per policy with a point per size.
pub fn curves_svg(report: &SimReport) -> Result<String, SimError> {
    let mut svg = String::new();
    draw(&mut svg, report).map_err(|error| SimError::Plot {
        path: "(drawing)".to_owned(),
        error: error.to_string(),
    })?;
    Ok(svg)
}

fn draw(svg: &mut String, report: &SimReport) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::with_string(svg, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(&title(report), ("sans-serif", 18))?;
    let sizes: Vec<f64> = report
        .caches
        .iter()
        .map(|c| c.cache_percent_of_footprint)
        .collect();
    let smallest = sizes.iter().copied().fold(f64::INFINITY, f64::min);
    let largest = sizes.iter().copied().fold(0.0, f64::max);
    // Room on both sides of the outermost sizes, so that one size still makes a range.
    let x_range = (smallest / 1.3)..(largest * 1.3);
    let ran: Vec<PolicyKind> = PolicyKind::ALL
        .into_iter()
        .filter(|&kind| report.caches.iter().any(|c| c.policy(kind).is_some()))
        .collect();
    for (area, panel) in root.split_evenly((PANELS.len(), 1)).iter().zip(&PANELS) {
        let curves: Vec<(PolicyKind, Vec<(f64, f64)>)> = ran
            .iter()
            .map(|&kind| {
                let points = report
                    .caches
                    .iter()
                    .filter_map(|cache| {
                        let policy = cache.policy(kind)?;
                        Some((cache.cache_percent_of_footprint, (panel.value)(policy)))
                    })
                    .collect();
                (kind, points)
            })
            .collect();
        draw_panel(area, panel, x_range.clone(), &sizes, &curves)?;
    }
    root.present()?;
    Ok(())
}

/// One panel: `curves` holds each policy's points, x in percent of the footprint (a tick at each
/// of `sizes`), y as [`Panel::value`] gives it. The references are drawn thin; a curve that lies
/// on an earlier one is drawn wide and translucent over it, and its legend says which.
fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
    x_range: std::ops::Range<f64>,
    sizes: &[f64],
    curves: &[(PolicyKind, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let top = curves
        .iter()
        .flat_map(|(_, points)| points.iter().map(|&(_, y)| y))
        .fold(0.0, f64::max);
    let (y_desc, y_scale, y_top) = if panel.bytes {
        let (unit, scale) = unit(top);
        let desc = format!("{} ({unit})", panel.y_desc);
        (desc, scale, (top / scale * 1.1).max(1.0))
    } else {
        (panel.y_desc.to_owned(), 1.0, (top * 1.1).clamp(1.0, 100.0))
    };
    let mut chart = ChartBuilder::on(area)
        .caption(panel.title, ("sans-serif", 16))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(
            x_range.log_scale().with_key_points(sizes.to_vec()),
            0.0..y_top,
        )?;
    chart
        .configure_mesh()
        .x_desc("cache size (% of the trace's footprint, log scale)")
        .y_desc(y_desc)
        .x_labels(sizes.len().max(1))
        .x_label_formatter(&|x| tick(*x))
        .y_label_formatter(&|y| tick(*y))
        .light_line_style(RGBColor(244, 244, 244))
        .draw()?;
    for (index, (kind, points)) in curves.iter().enumerate() {
        let colour = COLOURS[PolicyKind::ALL.iter().position(|k| k == kind).unwrap_or(0)];
        let under = curves[..index]
            .iter()
            .find(|(_, earlier)| coincide(earlier, points, top))
            .map(|(earlier, _)| *earlier);
        let points: Vec<(f64, f64)> = points.iter().map(|&(x, y)| (x, y / y_scale)).collect();
        // A curve lying on an earlier one is drawn wide and translucent over it, so that both show.
        let style = match under {
            Some(_) => colour.mix(0.45).stroke_width(7),
            None if kind.is_reference() => colour.stroke_width(1),
            None => colour.stroke_width(2),
        };
        let name = match under {
            Some(earlier) => format!("{} (same as {} here)", label(*kind), earlier.as_str()),
            None => label(*kind).to_owned(),
        };
        chart
            .draw_series(LineSeries::new(points.iter().copied(), style))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], style));
        chart.draw_series(
            points
                .iter()
                .map(|&point| Circle::new(point, 3, colour.filled())),
        )?;
    }
    chart
        .configure_series_labels()
        .position(panel.legend.clone())
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Whether two curves lie on each other at every size, on a panel whose largest value is `top`.
fn coincide(earlier: &[(f64, f64)], points: &[(f64, f64)], top: f64) -> bool {
    earlier.len() == points.len()
        && earlier
            .iter()
            .zip(points)
            .all(|(a, b)| a.0 == b.0 && (a.1 - b.1).abs() <= COINCIDE * top.max(1.0))
}

/// A policy's name in the legend, with the proxy's `admission.mode` it stands for.
fn label(kind: PolicyKind) -> &'static str {
    match kind {
        PolicyKind::AdmitAll => "admit-all (mode off; LRU reference)",
        PolicyKind::SecondHitExact => "second-hit-exact (nginx min_uses 2)",
        PolicyKind::Bloom => "bloom (mode second-hit)",
        PolicyKind::Probation => "probation (mode probation)",
        PolicyKind::S3Fifo => "s3-fifo (reference, as libCacheSim)",
        PolicyKind::WTinyLfu => "w-tinylfu (reference, as libCacheSim)",
        PolicyKind::Sieve => "sieve (reference, as libCacheSim)",
    }
}

fn title(report: &SimReport) -> String {
    let name = Path::new(&report.trace.path)
        .file_name()
        .map_or(report.trace.path.clone(), |name| {
            name.to_string_lossy().into_owned()
        });
    let stats = &report.trace.stats;
    let sizes = if report.trace.synthesized_sizes.is_some() {
        "; sizes synthesised"
    } else {
        ""
    };
    format!(
        "{name}: {} requests, {} objects ({:.0}% requested once), footprint {}{sizes}",
        stats.requests,
        stats.distinct_objects,
        100.0 * report.trace.one_hit_share,
        HumanBytes(stats.footprint_bytes),
    )
}

/// A tick label: at most two decimals, none that are zero.
fn tick(value: f64) -> String {
    let text = format!("{value:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The binary unit that shows `largest` bytes with a few digits, and its size in bytes.
fn unit(largest: f64) -> (&'static str, f64) {
    const UNITS: [(&str, f64); 4] = [
        ("GiB", 1024.0 * 1024.0 * 1024.0),
        ("MiB", 1024.0 * 1024.0),
        ("KiB", 1024.0),
        ("B", 1.0),
    ];
    UNITS
        .into_iter()
        .find(|&(_, size)| largest >= size)
        .unwrap_or(("B", 1.0))
}

/// Text made safe inside HTML elements.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_keep_a_few_digits() {
        assert_eq!(unit(512.0).0, "B");
        assert_eq!(unit(3.0 * 1024.0 * 1024.0).0, "MiB");
        assert_eq!(unit(0.0).0, "B");
    }

    #[test]
    fn ticks_drop_the_zeros_they_do_not_need() {
        assert_eq!(tick(0.5), "0.5");
        assert_eq!(tick(20.0), "20");
        assert_eq!(tick(1.25), "1.25");
    }

    #[test]
    fn curves_coincide_only_when_every_point_matches() {
        let bloom = [(1.0, 40.0), (5.0, 50.0)];
        assert!(coincide(&bloom, &[(1.0, 40.0), (5.0, 50.0)], 50.0));
        assert!(!coincide(&bloom, &[(1.0, 40.0), (5.0, 50.1)], 50.0));
        assert!(!coincide(&bloom, &[(1.0, 40.0)], 50.0));
    }

    #[test]
    fn html_escapes_what_a_path_may_hold() {
        assert_eq!(escape("a<b>&c"), "a&lt;b&gt;&amp;c");
    }
}
