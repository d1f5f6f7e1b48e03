//! `bloomgate trace generate`: write a synthetic trace to a file.

use std::path::PathBuf;

use super::{Compression, SyntheticTrace, TraceError, TraceWriter};

/// Write a synthetic trace (Zipf popularity, one-hit wonders, log-normal sizes) as CSV.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// Output file; compressed with zstd if it ends in `.zst`, gzip if `.gz`.
    #[arg(long)]
    pub out: PathBuf,
    /// Compress with zstd whatever the file name.
    #[arg(long)]
    pub zstd: bool,
    #[arg(long, default_value_t = SyntheticTrace::default().requests)]
    pub requests: u64,
    /// Distinct objects.
    #[arg(long, default_value_t = SyntheticTrace::default().objects)]
    pub objects: u64,
    /// Zipf exponent of popularity.
    #[arg(long, default_value_t = SyntheticTrace::default().alpha)]
    pub alpha: f64,
    /// Share of the objects requested exactly once, in [0, 1].
    #[arg(long, default_value_t = SyntheticTrace::default().one_hit_share)]
    pub one_hit_share: f64,
    /// Median object size: bytes, or with a unit as in the config file (8KiB).
    #[arg(long, default_value_t = SyntheticTrace::default().size_median, value_parser = crate::config::parse_size)]
    pub size_median: u64,
    /// Sigma of the log-normal size.
    #[arg(long, default_value_t = SyntheticTrace::default().size_sigma)]
    pub size_sigma: f64,
    #[arg(long, default_value_t = SyntheticTrace::default().seed)]
    pub seed: u64,
}

impl GenerateArgs {
    /// The trace these arguments describe.
    pub fn trace(&self) -> SyntheticTrace {
        SyntheticTrace {
            requests: self.requests,
            objects: self.objects,
            alpha: self.alpha,
            one_hit_share: self.one_hit_share,
            size_median: self.size_median,
            size_sigma: self.size_sigma,
            seed: self.seed,
        }
    }
}

/// Writes the synthetic trace that `args` describe to `args.out`.
pub fn generate(args: &GenerateArgs) -> Result<(), TraceError> {
    let name = args.out.to_string_lossy();
    let compression = if args.zstd || name.ends_with(".zst") {
        Compression::Zstd
    } else if name.ends_with(".gz") {
        Compression::Gzip
    } else {
        Compression::None
    };
    let mut writer = TraceWriter::create(&args.out, compression)?;
    for request in args.trace().iter() {
        writer.write(&request)?;
    }
    writer.finish()
}
