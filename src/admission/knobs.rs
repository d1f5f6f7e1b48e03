//! EXPERIMENT ONLY: environment knobs for issue 36's variants (not to be merged).
use std::sync::OnceLock;

pub fn knob(name: &str, default: f64) -> f64 {
    static CACHE: OnceLock<std::collections::HashMap<String, f64>> = OnceLock::new();
    let map = CACHE.get_or_init(|| {
        std::env::vars()
            .filter(|(k, _)| k.starts_with("BG_"))
            .filter_map(|(k, v)| v.parse().ok().map(|v| (k, v)))
            .collect()
    });
    map.get(name).copied().unwrap_or(default)
}
