//! `bloomgate check-config PATH`: validate a config file and summarise it.

use std::path::{Path, PathBuf};

use toml::Table;

use super::size::format_size;
use super::{Config, ConfigError, ConfigErrors, Deprecated, deprecations};
use crate::admission::probation::Mode;
use crate::tls::{Certificates, origin_client_config};

/// Arguments of `bloomgate check-config`.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The config file to validate.
    pub path: PathBuf,
}

/// What `check-config` found in a file.
#[derive(Debug)]
pub struct Checked {
    /// `"PATH: ok"` and a one-line summary, or every error found (one per line).
    pub verdict: Result<String, ConfigErrors>,
    /// Values spelt as an earlier version spelt them: read, but to be rewritten.
    pub warnings: Vec<Deprecated>,
}

/// Validates the file. The TLS files it names are read too, as `serve` would read them, even
/// when other keys have errors: one run names every problem.
pub fn check_config(args: &CheckConfigArgs) -> Checked {
    let text = match std::fs::read_to_string(&args.path) {
        Ok(text) => text,
        Err(error) => {
            let unreadable = ConfigError::Unreadable {
                reason: error.to_string(),
            };
            return Checked {
                verdict: Err(ConfigErrors::new(vec![unreadable]).in_file(&args.path)),
                warnings: Vec::new(),
            };
        }
    };
    let table = text.parse::<Table>().ok();
    let warnings = table.as_ref().map(deprecations).unwrap_or_default();
    Checked {
        verdict: verdict(&args.path, &text, table.as_ref()),
        warnings,
    }
}

fn verdict(path: &Path, text: &str, table: Option<&Table>) -> Result<String, ConfigErrors> {
    let parsed = Config::from_toml_str(text);
    let mut errors = match &parsed {
        Ok(_) => Vec::new(),
        Err(errors) => errors.errors().to_vec(),
    };
    if let Some(table) = table {
        errors.extend(tls_file_errors(table, &errors));
    }
    if let Ok(config) = &parsed
        && config.upstreams().any_https()
        && config.origin.ca_file.is_none()
        && let Err(error) = origin_client_config(None)
    {
        errors.push(ConfigError::invalid("origin", error.to_string()));
    }
    match parsed {
        Ok(config) if errors.is_empty() => {
            Ok(format!("{}: ok\n{}", path.display(), summary(&config)))
        }
        _ => Err(ConfigErrors::new(errors).in_file(path)),
    }
}

/// The problems of the TLS files the file names (the listener's certificate and key, an origin's
/// CA), read from its table as written, so that they are found beside any other error. A file
/// whose key already has an error is not read.
fn tls_file_errors(table: &Table, found: &[ConfigError]) -> Vec<ConfigError> {
    let text = |path: &[&str]| -> Option<&str> {
        let (leaf, tables) = path.split_last()?;
        let parent = tables
            .iter()
            .try_fold(table, |table, name| table.get(*name)?.as_table())?;
        parent.get(*leaf)?.as_str().filter(|text| !text.is_empty())
    };
    let has_error = |key: &str| found.iter().any(|error| error.key() == Some(key));
    let mut errors = Vec::new();
    if let (Some(cert), Some(key)) = (
        text(&["server", "tls", "cert_file"]),
        text(&["server", "tls", "key_file"]),
    ) && !has_error("server.tls.cert_file")
        && !has_error("server.tls.key_file")
        && let Err(error) = Certificates::read(Path::new(cert), Path::new(key))
    {
        errors.push(ConfigError::invalid("server.tls", error.to_string()));
    }
    if let Some(ca) = text(&["origin", "ca_file"])
        && !has_error("origin.ca_file")
        && let Err(error) = origin_client_config(Some(Path::new(ca)))
    {
        errors.push(ConfigError::invalid("origin.ca_file", error.to_string()));
    }
    errors
}

fn summary(config: &Config) -> String {
    let admission = if config.admission.mode.uses_doorkeeper() {
        let door = &config.admission.doorkeeper;
        let mode = match config.admission.mode {
            Mode::Probation => format!(
                "probation admission ({}% of the cache for first requests)",
                config.admission.probation_share * 100.0
            ),
            _ => "admission on second hit".to_owned(),
        };
        format!(
            "{mode} (capacity {}, fpr {}, rotate at {} or every {})",
            door.capacity,
            door.target_fpr,
            door.rotate_at_fpr,
            humantime::format_duration(door.max_age)
        )
    } else {
        "admission off (every storable response is stored)".to_owned()
    };
    let disk = match &config.disk.path {
        Some(path) => format!(
            ", disk tier {} in {}",
            format_size(config.disk.max_bytes),
            path.display()
        ),
        None => String::new(),
    };
    let https = match &config.server.tls {
        Some(tls) => format!(" and https {}", tls.listen),
        None => String::new(),
    };
    let access = match &config.log.access.path {
        Some(path) => format!(
            ", access log {path} ({})",
            config.log.access.format.as_str()
        ),
        None => String::new(),
    };
    let origin = config.destination();
    format!(
        "listen {}{https} -> {origin}, cache {} (objects up to {}){disk}, {admission}, admin {}, log {}{access}",
        config.server.listen,
        format_size(config.cache.max_bytes),
        format_size(config.cache.max_object_bytes),
        config.admin.listen,
        config.log.level,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_names_the_disk_tier_only_when_there_is_one() {
        let with_disk =
            Config::from_toml_str("[disk]\npath = \"/var/cache/bloomgate\"\nmax_bytes = \"2GiB\"")
                .expect("valid");
        assert!(
            summary(&with_disk).contains("disk tier 2GiB in /var/cache/bloomgate"),
            "{}",
            summary(&with_disk)
        );
        assert!(!summary(&Config::defaults()).contains("disk"));
    }

    #[test]
    fn the_summary_names_the_groups_in_place_of_the_origin_when_there_are_some() {
        let groups = Config::from_toml_str(
            "[upstreams.a]\nservers = [\"http://127.0.0.1:1\", \"http://127.0.0.1:2\"]",
        )
        .expect("valid");
        let summary = summary(&groups);
        assert!(
            summary.contains("-> upstreams a (2 servers) by 1 route,"),
            "{summary}"
        );
        assert!(!summary.contains("origin"), "{summary}");
    }
}
