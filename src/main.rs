//! The `bloomgate` command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use bloomgate::config::{self, CheckConfigArgs, Config};
use bloomgate::listening::ListeningLine;
use clap::{Parser, Subcommand};

/// jemalloc, vendored and built by its crate (no system library). In 180 s soaks of a 64 MiB cache
/// of 8 KiB objects at 1500 requests/s, it peaked at 82 MiB with the options below, glibc's malloc
/// (which fragments under the cache's churn of bodies of every size) at 95 MiB, mimalloc at
/// 148 MiB (docs/decisions.md, jemalloc).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options (`_RJEM_MALLOC_CONF` in the environment overrides them), which the weigher
/// assumes: [`bloomgate::cache::weight::JEMALLOC_CONF`].
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: MallocConf = MallocConf(bloomgate::cache::weight::JEMALLOC_CONF.as_ptr());

/// jemalloc reads its options from a `const char *` of this name.
#[repr(transparent)]
struct MallocConf(*const std::ffi::c_char);

// SAFETY: the pointer is to a constant string, never written.
unsafe impl Sync for MallocConf {}

/// `bloomgate --version`: the crate's version and the git commit it was built from (build.rs;
/// `unknown` when built outside a git checkout).
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (",
    env!("BLOOMGATE_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "bloomgate",
    version = VERSION,
    about = "A caching reverse proxy that stores an object on its second request"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Try everything on loopback: synthetic origin, proxy with and without admission, a replayed trace.
    #[cfg(feature = "tools")]
    Demo(bloomgate::demo::DemoArgs),
    /// Run the proxy in front of the configured origin.
    Serve(ServeArgs),
    /// Validate a config file: every error, each naming its key; exits non-zero on any.
    CheckConfig(CheckConfigArgs),
    /// Run a synthetic origin for load tests: `/obj/<key>?size=N` returns N deterministic bytes.
    #[cfg(feature = "tools")]
    Origin(bloomgate::traffic::origin::OriginArgs),
    /// Replay a request trace live against a running proxy and report what it did.
    #[cfg(feature = "tools")]
    Replay(bloomgate::traffic::replay::ReplayArgs),
    /// Replay a trace offline through admit-all, exact second-hit and Bloom admission side by side.
    #[cfg(feature = "tools")]
    Simulate(bloomgate::sim::SimulateArgs),
    /// Replay a trace of byte ranges offline: whole-object caching against slices, every slice
    /// admitted or each on its second request.
    #[cfg(feature = "tools")]
    SimulateSlices(bloomgate::sim::SliceArgs),
    /// Work with request traces.
    #[cfg(feature = "tools")]
    #[command(subcommand)]
    Trace(TraceCommand),
}

#[cfg(feature = "tools")]
#[derive(Subcommand)]
enum TraceCommand {
    /// Write a synthetic trace (Zipf popularity, one-hit wonders, log-normal sizes) as CSV, or
    /// video sessions asking for byte ranges (`--video`).
    Generate(bloomgate::trace::GenerateArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Config file; without it, `config/bloomgate.toml` if present, else the built-in defaults.
    #[arg(long)]
    config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(args),
        #[cfg(feature = "tools")]
        Command::Demo(args) => {
            init_logging("warn");
            runtime().and_then(|rt| Ok(rt.block_on(bloomgate::demo::run(args))?))
        }
        #[cfg(feature = "tools")]
        Command::Origin(args) => {
            init_logging(&Config::defaults().log.level);
            runtime().and_then(|rt| Ok(rt.block_on(bloomgate::traffic::origin::run(args))?))
        }
        #[cfg(feature = "tools")]
        Command::Replay(args) => {
            init_logging(&Config::defaults().log.level);
            runtime().and_then(|rt| Ok(rt.block_on(bloomgate::traffic::replay::run(args))?))
        }
        #[cfg(feature = "tools")]
        Command::Simulate(args) => bloomgate::sim::run(&args).map_err(Into::into),
        #[cfg(feature = "tools")]
        Command::SimulateSlices(args) => bloomgate::sim::run_slices(&args).map_err(Into::into),
        #[cfg(feature = "tools")]
        Command::Trace(TraceCommand::Generate(args)) => {
            bloomgate::trace::generate(&args).map_err(Into::into)
        }
        Command::CheckConfig(args) => {
            let checked = config::check_config(&args);
            for warning in &checked.warnings {
                eprintln!("{}: warning: {warning}", args.path.display());
            }
            match checked.verdict {
                Ok(summary) => {
                    println!("{summary}");
                    Ok(())
                }
                Err(errors) => {
                    eprintln!("{errors}");
                    return ExitCode::FAILURE;
                }
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("bloomgate: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(path: Option<&PathBuf>) -> anyhow::Result<Config> {
    let loaded = match path {
        Some(path) => Config::load(path),
        None => Config::load_or_defaults(std::path::Path::new(config::DEFAULT_PATH)),
    };
    loaded.map_err(|errors| anyhow::anyhow!("{errors}"))
}

/// Logs `tracing` events to stderr at `level`, or as `RUST_LOG` says when it is set; in colour
/// only on a terminal, and never with `NO_COLOR` set (no-color.org), so that a file or a pipe
/// gets plain text.
fn init_logging(level: &str) {
    let colour = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .or_else(|_| tracing_subscriber::EnvFilter::try_new(level))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .init();
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let config = load_config(args.config.as_ref())?;
    init_logging(&config.log.level);
    runtime()?.block_on(async {
        let destination = config.destination();
        let path = args.config.clone().or_else(|| {
            let default = PathBuf::from(config::DEFAULT_PATH);
            default.exists().then_some(default)
        });
        let signals = bloomgate::proxy::Signals::install();
        let running = bloomgate::proxy::start_with_file(config, path).await?;
        // One line on stdout that scripts and tests read to find the ports.
        let listening = ListeningLine {
            addr: running.addr,
            tls_addr: running.tls_addr,
            admin_addr: running.admin_addr,
            destination,
        };
        println!("{listening}");
        running.run_until_signal(signals).await;
        Ok(())
    })
}
