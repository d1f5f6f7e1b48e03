//! `bloomgate check-config PATH`: validate a config file and summarise it.

use std::path::PathBuf;

use super::size::format_size;
use super::{Config, ConfigError, ConfigErrors};
use crate::admission::probation::Mode;
use crate::tls::{Certificates, origin_client_config};

/// Arguments of `bloomgate check-config`.
#[derive(Clone, Debug, clap::Args)]
pub struct CheckConfigArgs {
    /// The config file to validate.
    pub path: PathBuf,
}

/// Validates the file: `"PATH: ok"` and a one-line summary, or every error found (one per line).
/// The TLS files it names are read too, as `serve` would read them.
pub fn check_config(args: &CheckConfigArgs) -> Result<String, ConfigErrors> {
    let config = Config::load(&args.path)?;
    let mut errors = Vec::new();
    if let Some(tls) = &config.server.tls
        && let Err(error) = Certificates::read(&tls.cert_file, &tls.key_file)
    {
        errors.push(ConfigError::invalid(
            "server.tls".to_owned(),
            error.to_string(),
        ));
    }
    if config.origin.url.scheme_str() == Some("https")
        && let Err(error) = origin_client_config(config.origin.ca_file.as_deref())
    {
        errors.push(ConfigError::invalid("origin".to_owned(), error.to_string()));
    }
    if !errors.is_empty() {
        return Err(ConfigErrors::new(errors).in_file(&args.path));
    }
    Ok(format!("{}: ok\n{}", args.path.display(), summary(&config)))
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
