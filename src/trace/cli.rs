//! `bloomgate trace generate`: write a synthetic trace to a file.

use std::path::PathBuf;

use super::{Compression, Request, SyntheticTrace, TraceError, TraceWriter, VideoTrace};

/// Write a synthetic trace (Zipf popularity, one-hit wonders, log-normal sizes) as CSV; with
/// `--video`, video sessions asking for byte ranges (a `range` column).
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
    /// Video sessions instead: large objects asked for in byte ranges, every session from the
    /// first byte, then seeks to places mostly asked for once (`--alpha` and `--seed` apply).
    #[arg(long)]
    pub video: bool,
    /// `--video`: viewing sessions.
    #[arg(long, default_value_t = VideoTrace::default().sessions)]
    pub sessions: u64,
    /// `--video`: distinct videos.
    #[arg(long, default_value_t = VideoTrace::default().videos)]
    pub videos: u64,
    /// `--video`: the smallest video (sizes are log-uniform between the two).
    #[arg(long, default_value_t = VideoTrace::default().min_bytes, value_parser = crate::config::parse_size)]
    pub video_min: u64,
    /// `--video`: the largest video.
    #[arg(long, default_value_t = VideoTrace::default().max_bytes, value_parser = crate::config::parse_size)]
    pub video_max: u64,
    /// `--video`: bytes a player asks for at a time.
    #[arg(long, default_value_t = VideoTrace::default().chunk_bytes, value_parser = crate::config::parse_size)]
    pub chunk: u64,
    /// `--video`: mean chunks played from the start.
    #[arg(long, default_value_t = VideoTrace::default().watch_chunks)]
    pub watch_chunks: f64,
    /// `--video`: mean seeks per session.
    #[arg(long, default_value_t = VideoTrace::default().seeks)]
    pub seeks: f64,
    /// `--video`: mean chunks played after a seek.
    #[arg(long, default_value_t = VideoTrace::default().seek_chunks)]
    pub seek_chunks: f64,
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

impl GenerateArgs {
    /// The video-session trace these arguments describe (`--video`).
    pub fn video_trace(&self) -> VideoTrace {
        VideoTrace {
            sessions: self.sessions,
            videos: self.videos,
            alpha: self.alpha,
            min_bytes: self.video_min,
            max_bytes: self.video_max,
            chunk_bytes: self.chunk,
            watch_chunks: self.watch_chunks,
            seeks: self.seeks,
            seek_chunks: self.seek_chunks,
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
    if args.video {
        let writer = TraceWriter::create_with_ranges(&args.out, compression)?;
        write_all(writer, args.video_trace().iter())
    } else {
        let writer = TraceWriter::create(&args.out, compression)?;
        write_all(writer, args.trace().iter())
    }
}

fn write_all(
    mut writer: TraceWriter,
    requests: impl Iterator<Item = Request>,
) -> Result<(), TraceError> {
    for request in requests {
        writer.write(&request)?;
    }
    writer.finish()
}
