//! Writes the seeds of the `h1_differential` target, the suite's smuggling cases and inputs from its
//! generator:
//! `cargo run --example make_h1_seeds` (the same seed gives the same files).

#[path = "../../tests/h1/differential.rs"]
#[allow(dead_code)]
mod differential;

use std::path::Path;

fn main() -> std::io::Result<()> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("seeds/h1_differential");
    std::fs::create_dir_all(&dir)?;
    let mut generator = differential::Generator::new(37);
    for n in 0..256 {
        std::fs::write(dir.join(format!("generated-{n:03}")), generator.input())?;
    }
    for (n, input) in differential::SMUGGLING.iter().enumerate() {
        std::fs::write(dir.join(format!("smuggling-{n:02}")), input)?;
    }
    Ok(())
}
