//! The config file as a user writes it: defaults underneath, every error reported with its key.

use std::path::PathBuf;
use std::time::Duration;

use bloomgate::admission::probation::Mode;
use bloomgate::config::{Config, ConfigError, DEFAULT_TOML};

fn errors_of(text: &str) -> Vec<ConfigError> {
    match Config::from_toml_str(text) {
        Ok(config) => panic!("expected errors, got {config:?}"),
        Err(errors) => errors.errors().to_vec(),
    }
}

fn keys_of(text: &str) -> Vec<String> {
    errors_of(text)
        .iter()
        .map(|e| e.key().unwrap_or("<no key>").to_owned())
        .collect()
}

fn lines_of(text: &str) -> Vec<String> {
    let errors = Config::from_toml_str(text).unwrap_err();
    errors.to_string().lines().map(str::to_owned).collect()
}

/// A file in a fresh temporary directory, removed when dropped.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, text: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("bloomgate-config-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        Self(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[test]
fn embedded_defaults_parse_and_equal_an_empty_file() {
    let from_embedded = Config::from_toml_str(DEFAULT_TOML).unwrap();
    assert_eq!(from_embedded, Config::defaults());
    assert_eq!(Config::from_toml_str("").unwrap(), Config::defaults());
    assert_eq!(Config::default(), Config::defaults());
}

#[test]
fn shipped_file_is_the_embedded_file() {
    let shipped = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/config/bloomgate.toml"
    ))
    .unwrap();
    assert_eq!(shipped, DEFAULT_TOML);
}

#[test]
fn a_partial_file_overrides_only_its_keys() {
    let config = Config::from_toml_str(
        r#"
        [server]
        listen = "[::1]:9000"

        [cache]
        max_bytes = "1GiB"

        [cache.key]
        sort_query = true
        drop_query_params = ["utm_source", "fbclid"]

        [admission]
        mode = "second-hit"
        probation_share = 0.25
        "#,
    )
    .unwrap();

    let mut expected = Config::defaults();
    expected.server.listen = "[::1]:9000".parse().unwrap();
    expected.cache.max_bytes = 1 << 30;
    expected.cache.key.sort_query = true;
    expected.cache.key.drop_query_params = vec!["utm_source".into(), "fbclid".into()];
    expected.admission.mode = Mode::SecondHit;
    expected.admission.probation_share = 0.25;
    assert_eq!(config, expected);
}

#[test]
fn admission_enabled_of_earlier_versions_reads_as_the_mode_it_meant() {
    for (enabled, mode) in [("true", Mode::SecondHit), ("false", Mode::Off)] {
        let config = Config::from_toml_str(&format!("[admission]\nenabled = {enabled}\n")).unwrap();
        assert_eq!(config.admission.mode, mode, "enabled = {enabled}");
    }
    let both = Config::from_toml_str("[admission]\nenabled = true\nmode = \"off\"\n").unwrap_err();
    let text = both.to_string();
    assert!(
        text.contains("admission.enabled") && text.contains("admission.mode"),
        "{text}"
    );
    let mistyped = Config::from_toml_str("[admission]\nenabled = \"yes\"\n").unwrap_err();
    assert!(
        mistyped.to_string().contains("admission.enabled"),
        "{mistyped}"
    );
}

#[test]
fn admission_mode_and_probation_share_are_checked_against_their_keys() {
    let bad_mode = Config::from_toml_str("[admission]\nmode = \"sometimes\"\n").unwrap_err();
    let text = bad_mode.to_string();
    assert!(
        text.contains("admission.mode") && text.contains("\"second-hit\""),
        "{text}"
    );
    for share in ["0", "1", "1.5", "-0.1", "\"a tenth\""] {
        let errors = Config::from_toml_str(&format!("[admission]\nprobation_share = {share}\n"))
            .unwrap_err();
        assert!(
            errors.to_string().contains("admission.probation_share"),
            "{share}: {errors}"
        );
    }
}

#[test]
fn sizes_durations_and_networks_are_read_in_their_units() {
    let config = Config::from_toml_str(
        r#"
        server.header_read_timeout = "1500ms"
        server.max_header_bytes = 16384
        server.purge_allowed_networks = ["10.0.0.0/8", "::1/128"]
        origin.first_byte_timeout = "1m"
        cache.max_object_bytes = "1.5MB"
        "#,
    )
    .unwrap();
    assert_eq!(
        config.server.header_read_timeout,
        Duration::from_millis(1500)
    );
    assert_eq!(config.server.max_header_bytes, 16384);
    assert!(
        config.server.purge_allowed_networks[0]
            .contains(&"10.2.3.4".parse::<std::net::IpAddr>().unwrap())
    );
    assert_eq!(config.origin.first_byte_timeout, Duration::from_secs(60));
    assert_eq!(config.cache.max_object_bytes, 1_500_000);
}

#[test]
fn every_error_is_collected_not_just_the_first() {
    let text = r#"
        [server]
        listen = "everywhere"

        [cache]
        max_bytes = "lots"

        [admission]
        target_fpr = 1.5
    "#;
    assert_eq!(
        lines_of(text),
        [
            r#"server.listen: expected a socket address like "127.0.0.1:8080" or "[::1]:8080", got "everywhere""#,
            r#"cache.max_bytes: expected a size like "512MiB", got "lots""#,
            "admission.target_fpr: 1.5 must be in (0, 1)",
        ]
    );
}

#[test]
fn unknown_keys_are_errors() {
    let text = r#"
        verbose = true

        [server]
        listn = "127.0.0.1:80"

        [cache.key]
        include_cookies = true
    "#;
    assert_eq!(
        lines_of(text),
        [
            "server.listn: unknown key: did you mean server.listen?",
            "cache.key.include_cookies: unknown key",
            "verbose: unknown key",
        ]
    );
}

#[test]
fn unknown_tables_are_errors() {
    let errors =
        errors_of("[servr]\nlisten = \"127.0.0.1:80\"\n[cache.keys]\ninclude_host = false\n");
    assert_eq!(
        errors,
        [
            ConfigError::UnknownTable {
                key: "cache.keys".into(),
                suggestion: Some("cache.key".into()),
            },
            ConfigError::UnknownTable {
                key: "servr".into(),
                suggestion: Some("server".into()),
            },
        ]
    );
    assert_eq!(
        errors[1].to_string(),
        "servr: unknown table: did you mean server?"
    );
}

#[test]
fn a_value_where_a_table_belongs_is_an_error() {
    assert_eq!(
        lines_of("cache = \"big\"\n"),
        [r#"cache: expected a table, got "big""#]
    );
}

#[test]
fn wrong_types_name_the_key_and_the_expectation() {
    let keys = keys_of(
        r#"
        server.max_connections = -1
        origin.preserve_host = "yes"
        origin.idle_timeout = 10
        cache.key.drop_query_params = "utm_source"
        admission.capacity = 0
        admission.max_age = "0s"
        log.level = "loud"
        "#,
    );
    assert_eq!(
        keys,
        [
            "server.max_connections",
            "origin.idle_timeout",
            "origin.preserve_host",
            "cache.key.drop_query_params",
            "admission.capacity",
            "admission.max_age",
            "log.level",
        ]
    );
}

#[test]
fn https_origins_are_accepted_and_their_tls_keys_need_one() {
    let config = Config::from_toml_str("[origin]\nurl = \"https://example.com\"\n").unwrap();
    assert_eq!(config.origin.url.scheme_str(), Some("https"));
    assert_eq!(
        lines_of("[origin]\nurl = \"http://example.com\"\nca_file = \"/ca.pem\"\n"),
        ["origin.ca_file: is set, but origin.url is not https"]
    );
    assert_eq!(
        keys_of("origin.url = \"ftp://example.com\"\n"),
        ["origin.url"]
    );
    assert_eq!(
        keys_of("origin.url = \"http://example.com/app\"\n"),
        ["origin.url"]
    );
}

#[test]
fn largest_object_may_not_exceed_the_cache() {
    assert_eq!(
        lines_of("[cache]\nmax_bytes = \"1MiB\"\nmax_object_bytes = \"2MiB\"\n"),
        ["cache.max_object_bytes: 2MiB is larger than cache.max_bytes (1MiB)"]
    );
    let config =
        Config::from_toml_str("[cache]\nmax_bytes = \"1MiB\"\nmax_object_bytes = \"1MiB\"\n")
            .unwrap();
    assert_eq!(config.cache.max_object_bytes, config.cache.max_bytes);
}

#[test]
fn rotation_threshold_must_exceed_the_target_rate() {
    assert_eq!(
        lines_of("[admission]\ntarget_fpr = 0.05\n"),
        ["admission.rotate_at_fpr: 0.02 must be greater than target_fpr (0.05)"]
    );
    assert!(
        Config::from_toml_str("[admission]\ntarget_fpr = 0.001\nrotate_at_fpr = 0.002\n").is_ok()
    );
}

#[test]
fn timeouts_must_be_positive() {
    let keys = keys_of(
        r#"
        server.header_read_timeout = "0s"
        origin.connect_timeout = "0ms"
        origin.first_byte_timeout = "0s"
        "#,
    );
    assert_eq!(
        keys,
        [
            "server.header_read_timeout",
            "origin.connect_timeout",
            "origin.first_byte_timeout"
        ]
    );
    assert!(Config::from_toml_str("server.shutdown_grace = \"0s\"\n").is_ok());
}

#[test]
fn header_limit_below_the_parser_minimum_is_refused() {
    assert_eq!(
        lines_of("server.max_header_bytes = \"4KiB\"\n"),
        [
            r#"server.max_header_bytes: must be at least 8KiB (the HTTP/1 parser's smallest buffer), got "4KiB""#
        ]
    );
}

#[test]
fn syntax_error_names_the_file_and_line() {
    let file = TempFile::new(
        "broken.toml",
        "[server]\nlisten = \"127.0.0.1:8080\"\nmax_connections = lots\n",
    );
    let errors = Config::load(&file.0).unwrap_err();
    assert_eq!(errors.len(), 1);
    let message = errors.to_string();
    let expected_start = format!("{}: line 3, column 19: ", file.0.display());
    assert!(message.starts_with(&expected_start), "{message}");
    assert!(!message.contains('\n'), "one error, one line: {message}");
}

#[test]
fn load_prefixes_every_error_with_the_path() {
    let file = TempFile::new(
        "bad.toml",
        "cache.max_bytes = \"lots\"\nadmission.target_fpr = 2.0\n",
    );
    let errors = Config::load(&file.0).unwrap_err();
    let path = file.0.display().to_string();
    let message = errors.to_string();
    let lines: Vec<&str> = message.lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(
        lines
            .iter()
            .all(|line| line.starts_with(&format!("{path}: "))),
        "{lines:?}"
    );
    assert!(lines[0].ends_with(r#"cache.max_bytes: expected a size like "512MiB", got "lots""#));
    assert!(lines[1].ends_with("admission.target_fpr: 2.0 must be in (0, 1)"));
    assert_eq!(errors.file(), Some(file.0.as_path()));
}

#[test]
fn a_missing_file_is_an_error_that_names_it() {
    let path = std::env::temp_dir().join("bloomgate-no-such-config.toml");
    let errors = Config::load(&path).unwrap_err();
    assert!(
        errors
            .to_string()
            .starts_with(&format!("{}: cannot read the file: ", path.display()))
    );
    assert_eq!(Config::load_or_defaults(&path).unwrap(), Config::defaults());
}

#[test]
fn the_same_text_always_gives_the_same_result() {
    // A reload re-runs the parse on the new text; it must not depend on anything but the text.
    let text = "cache.max_bytes = \"lots\"\nserver.listn = 1\n";
    assert_eq!(Config::from_toml_str(text), Config::from_toml_str(text));
}

#[test]
fn every_key_in_the_shipped_file_has_a_comment_above_it() {
    let lines: Vec<&str> = DEFAULT_TOML.lines().map(str::trim).collect();
    for (i, line) in lines.iter().enumerate() {
        let is_key = !line.is_empty() && !line.starts_with('#') && !line.starts_with('[');
        if is_key {
            assert!(
                i > 0 && lines[i - 1].starts_with('#'),
                "config/bloomgate.toml line {}: {line:?} has no comment above it",
                i + 1
            );
        }
    }
}

#[test]
fn preserving_the_host_without_keying_it_is_refused() {
    let errors = bloomgate::config::Config::from_toml_str(
        "[origin]\npreserve_host = true\n[cache.key]\ninclude_host = false\n",
    )
    .expect_err("a host-blind key behind a host-aware origin is refused");
    assert!(
        errors.to_string().contains("origin.preserve_host"),
        "{errors}"
    );
}
