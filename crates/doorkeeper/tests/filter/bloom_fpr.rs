//! Measured false-positive rates and cardinality estimates against the sizing model.

use doorkeeper::bloom::BloomFilter;

/// 48-byte URL keys; `salt` separates inserted keys from probes.
fn url(salt: u8, i: u64) -> [u8; 48] {
    let mut key = *b"https://img.example.com/p/0000000000000000/a.jpg";
    key[24] = b'a' + salt;
    let hex = format!("{i:016x}");
    key[26..42].copy_from_slice(hex.as_bytes());
    key
}

struct Measurement {
    measured: f64,
    model: f64,
    naive: f64,
    unblocked: f64,
    sigma: f64,
}

fn measure(n: u64, p: f64, probes: u64, seed: u128) -> Measurement {
    let filter = BloomFilter::builder(n, p).seed(seed).build();
    for i in 0..n {
        filter.insert(&url(0, i));
    }
    let hits = (0..probes).filter(|i| filter.contains(&url(1, *i))).count();
    let measured = hits as f64 / probes as f64;
    let model = filter.sizing().false_positive_rate(n);
    let k = filter.num_hashes() as i32;
    let bits_per_key = filter.num_bits() as f64 / n as f64;
    Measurement {
        measured,
        model,
        naive: filter.fill_ratio().powi(k),
        unblocked: (1.0 - (-f64::from(k) / bits_per_key).exp()).powi(k),
        sigma: (model * (1.0 - model) / probes as f64).sqrt(),
    }
}

/// The measured rate must be at most the target (within sampling noise) and within `tolerance`
/// (relative, plus 4 standard errors of the probe sample) of the model. Where `discriminate`,
/// the naive `fill^k` and the unblocked formula must fall outside that band, so the test tells
/// them apart from the model. At p = 0.1 (k = 3) the blocking penalty is only 1.5%, below what
/// a million probes of one filter can resolve, so there the band is only checked.
fn check(n: u64, p: f64, probes: u64, tolerance: f64, discriminate: bool) {
    let m = measure(n, p, probes, 0x5eed_0000 + n as u128);
    let band = tolerance * m.model + 4.0 * m.sigma;
    eprintln!(
        "n={n} p={p}: measured {:.6} model {:.6} naive {:.6} unblocked {:.6} band ±{band:.6}",
        m.measured, m.model, m.naive, m.unblocked
    );
    assert!(m.model <= p, "model {} above target {p}", m.model);
    assert!(
        m.measured <= p + 4.0 * m.sigma,
        "measured {} above target {p}",
        m.measured
    );
    assert!(
        (m.measured - m.model).abs() <= band,
        "measured {} vs model {}",
        m.measured,
        m.model
    );
    if discriminate {
        assert!(
            (m.measured - m.naive).abs() > band,
            "naive fill^k {} is as good",
            m.naive
        );
        assert!(
            (m.measured - m.unblocked).abs() > band,
            "unblocked {} is as good",
            m.unblocked
        );
    }
}

#[test]
fn false_positive_rate_matches_the_model_at_100k_keys() {
    for (p, tolerance, discriminate) in
        [(0.1, 0.02, false), (0.01, 0.04, true), (0.001, 0.08, true)]
    {
        check(100_000, p, 1_000_000, tolerance, discriminate);
    }
}

#[test]
fn false_positive_rate_matches_the_model_at_1m_keys() {
    for (p, tolerance, discriminate) in
        [(0.1, 0.01, false), (0.01, 0.02, true), (0.001, 0.04, true)]
    {
        check(1_000_000, p, 1_000_000, tolerance, discriminate);
    }
}

#[test]
fn estimated_len_is_within_2_percent_from_1_to_100_percent_of_capacity() {
    let capacity = 100_000;
    let filter = BloomFilter::builder(capacity, 0.01).seed(3).build();
    let checkpoints = [1, 2, 5, 10, 20, 35, 50, 75, 100].map(|pct| capacity * pct / 100);
    let mut inserted = 0;
    for target in checkpoints {
        while inserted < target {
            filter.insert(&url(0, inserted));
            inserted += 1;
        }
        let estimate = filter.estimated_len();
        let error = (estimate - inserted as f64).abs() / inserted as f64;
        assert!(error <= 0.02, "{inserted} keys estimated as {estimate:.0}");
    }
}

#[test]
fn estimated_fpr_tracks_the_measured_rate() {
    let filter = BloomFilter::builder(100_000, 0.01).seed(4).build();
    for i in 0..100_000 {
        filter.insert(&url(0, i));
    }
    let probes = 500_000;
    let hits = (0..probes).filter(|i| filter.contains(&url(1, *i))).count();
    let measured = hits as f64 / probes as f64;
    let estimated = filter.estimated_fpr();
    assert!(
        (estimated - measured).abs() <= 0.06 * measured,
        "estimated {estimated} vs measured {measured}"
    );
}
