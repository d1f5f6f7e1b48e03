//! Reading an `[admission]` table (feature `toml`): the mode and the doorkeeper's keys, each
//! problem reported against its key.
//!
//! The table is bloomgate's: the proxy reads it with these functions, beside keys of its own
//! ([`PROXY_KEYS`]), and a cache that embeds the doorkeeper reads the same file with
//! [`AdmissionTable::from_toml`]. Absent keys take the shipped defaults ([`AdmissionTable::default`]).
//!
//! # Examples
//! ```
//! use std::time::Duration;
//! use bloomgate_admission::Mode;
//! use bloomgate_admission::table::AdmissionTable;
//!
//! let table = AdmissionTable::from_toml("[admission]\ncapacity = 5000\nmax_age = \"30m\"\n")?;
//! assert_eq!(table.mode, Mode::Probation);
//! assert_eq!(table.doorkeeper.capacity, 5000);
//! assert_eq!(table.doorkeeper.max_age, Duration::from_secs(1800));
//!
//! let errors = AdmissionTable::from_toml("[admission]\ntarget_fpr = 1.5\n").unwrap_err();
//! assert_eq!(errors.to_string(), "admission.target_fpr: 1.5 must be in (0, 1)");
//! # Ok::<(), bloomgate_admission::table::TableErrors>(())
//! ```

use std::fmt;
use std::time::Duration;

use toml::{Table, Value};

use doorkeeper::DoorkeeperConfig;

use crate::Mode;

/// The keys of `[admission]` that [`AdmissionTable::read`] reads.
pub const KEYS: [&str; 5] = ["mode", "capacity", "target_fpr", "rotate_at_fpr", "max_age"];

/// The keys of bloomgate's `[admission]` that only the proxy uses (its probation segment's share
/// and the snapshot file): [`AdmissionTable::from_toml`] accepts and ignores them, so that one file
/// configures both.
pub const PROXY_KEYS: [&str; 3] = ["probation_share", "snapshot_path", "snapshot_interval"];

/// The `[admission]` keys that concern the doorkeeper.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AdmissionTable {
    /// `mode`: what a first-seen key gets. Default [`Mode::Probation`].
    pub mode: Mode,
    /// `capacity` (default 1000000), `target_fpr` (0.01), `rotate_at_fpr` (0.02) and `max_age`
    /// (`"1h"`), ranges checked by [`DoorkeeperConfig::problems`].
    pub doorkeeper: DoorkeeperConfig,
}

/// A key of the table whose value cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("admission.{key}: {problem}")]
pub struct KeyError {
    /// The key, without `admission.`.
    pub key: &'static str,
    /// What is wrong with its value, without the key.
    pub problem: String,
}

/// One problem in an `[admission]` table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    /// The text is not valid TOML; the message is toml's own.
    #[error("{0}")]
    Syntax(String),
    /// `admission` is not a table.
    #[error("admission: expected a table, got {0}")]
    NotATable(String),
    /// A key holds a value that cannot be used.
    #[error(transparent)]
    Invalid(#[from] KeyError),
    /// A key neither the doorkeeper nor the proxy reads (often a typo).
    #[error("admission.{0}: unknown key")]
    UnknownKey(String),
}

/// Every problem found in one table, one per line when displayed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableErrors(pub Vec<TableError>);

impl fmt::Display for TableErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for TableErrors {}

impl AdmissionTable {
    /// Reads [`KEYS`] from an `[admission]` table, the default for each one absent. Other keys
    /// are left to the caller; every problem is returned, not only the first.
    pub fn read(table: &Table) -> Result<AdmissionTable, Vec<KeyError>> {
        let defaults = AdmissionTable::default();
        let mut errors = Vec::new();
        let mode = key(table, "mode", defaults.mode, &mut errors, |v| {
            one_of(v, &Mode::ALL, Mode::as_str)
        });
        let door = defaults.doorkeeper;
        let doorkeeper = DoorkeeperConfig {
            capacity: key(table, "capacity", door.capacity, &mut errors, count),
            target_fpr: key(table, "target_fpr", door.target_fpr, &mut errors, number),
            rotate_at_fpr: key(
                table,
                "rotate_at_fpr",
                door.rotate_at_fpr,
                &mut errors,
                number,
            ),
            max_age: key(table, "max_age", door.max_age, &mut errors, duration),
        };
        if !errors.is_empty() {
            return Err(errors);
        }
        let problems = doorkeeper.problems();
        if !problems.is_empty() {
            return Err(problems
                .iter()
                .map(|problem| KeyError {
                    key: problem.field(),
                    problem: problem.problem(),
                })
                .collect());
        }
        Ok(AdmissionTable { mode, doorkeeper })
    }

    /// Reads the `[admission]` table of a TOML document (the defaults if it has none). Other
    /// tables are ignored; in `[admission]`, the keys of [`PROXY_KEYS`] are accepted and ignored,
    /// and any other unknown key is an error.
    pub fn from_toml(text: &str) -> Result<AdmissionTable, TableErrors> {
        let document: Table = text.parse().map_err(|error: toml::de::Error| {
            TableErrors(vec![TableError::Syntax(error.to_string())])
        })?;
        let empty = Table::new();
        let table = match document.get("admission") {
            None => &empty,
            Some(Value::Table(table)) => table,
            Some(other) => return Err(TableErrors(vec![TableError::NotATable(shown(other))])),
        };
        let read = AdmissionTable::read(table);
        let errors: Vec<TableError> = read
            .as_ref()
            .err()
            .into_iter()
            .flatten()
            .cloned()
            .map(TableError::from)
            .chain(
                table
                    .keys()
                    .filter(|key| {
                        !KEYS.contains(&key.as_str()) && !PROXY_KEYS.contains(&key.as_str())
                    })
                    .map(|key| TableError::UnknownKey(key.clone())),
            )
            .collect();
        match read {
            Ok(read) if errors.is_empty() => Ok(read),
            _ => Err(TableErrors(errors)),
        }
    }
}

/// The value of `key` read by `read`, or `default` if the table lacks it (or holds a bad value,
/// which is then added to `errors`).
fn key<T>(
    table: &Table,
    key: &'static str,
    default: T,
    errors: &mut Vec<KeyError>,
    read: impl FnOnce(&Value) -> Result<T, String>,
) -> T {
    match table.get(key).map(read) {
        None => default,
        Some(Ok(value)) => value,
        Some(Err(problem)) => {
            errors.push(KeyError { key, problem });
            default
        }
    }
}

/// Reads a non-negative integer that fits a `u64`.
pub fn count(value: &Value) -> Result<u64, String> {
    value
        .as_integer()
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| format!("expected a non-negative integer, got {}", shown(value)))
}

/// Reads a number, written as a float or an integer.
pub fn number(value: &Value) -> Result<f64, String> {
    match value {
        Value::Float(x) => Ok(*x),
        Value::Integer(n) => Ok(*n as f64),
        _ => Err(format!("expected a number like 0.01, got {}", shown(value))),
    }
}

/// Reads a duration string such as `"2s"`, `"150ms"` or `"1h 30m"` (humantime syntax).
pub fn duration(value: &Value) -> Result<Duration, String> {
    let expected = || {
        format!(
            "expected a duration like \"10s\" or \"150ms\", got {}",
            shown(value)
        )
    };
    match value {
        Value::String(text) => humantime::parse_duration(text.trim()).map_err(|_| expected()),
        Value::Integer(_) | Value::Float(_) => {
            Err(format!("{} (a duration needs a unit)", expected()))
        }
        _ => Err(expected()),
    }
}

/// Reads a string.
pub fn string(value: &Value) -> Result<String, String> {
    value
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("expected a string, got {}", shown(value)))
}

/// Reads one of a fixed set of names (`admission.mode`): the item of `all` whose `name` it is.
pub fn one_of<T: Copy>(
    value: &Value,
    all: &[T],
    name: impl Fn(T) -> &'static str,
) -> Result<T, String> {
    let text = string(value)?;
    all.iter()
        .copied()
        .find(|item| name(*item) == text)
        .ok_or_else(|| {
            let names: Vec<String> = all
                .iter()
                .map(|item| format!("\"{}\"", name(*item)))
                .collect();
            format!("expected one of {}, got \"{text}\"", names.join(", "))
        })
}

/// Shows a value as the user wrote it (`"lots"`, `1.5`), or its kind when it is a table or array.
pub fn shown(value: &Value) -> String {
    match value {
        Value::Table(_) => "a table".to_owned(),
        Value::Array(_) => "an array".to_owned(),
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_document_gives_the_shipped_defaults() {
        let table = AdmissionTable::from_toml("").expect("valid");
        assert_eq!(table, AdmissionTable::default());
        assert_eq!(table.doorkeeper, DoorkeeperConfig::with_capacity(1_000_000));
    }

    #[test]
    fn every_problem_is_reported_against_its_key() {
        let errors = AdmissionTable::from_toml(
            "[admission]\nmode = \"sometimes\"\ncapacity = -1\nmax_age = 10\nflavour = 1\n",
        )
        .expect_err("invalid");
        let text = errors.to_string();
        assert_eq!(errors.0.len(), 4, "{text}");
        assert!(text.contains("admission.mode: expected one of \"probation\", \"second-hit\", \"off\", got \"sometimes\""), "{text}");
        assert!(
            text.contains("admission.capacity: expected a non-negative integer, got -1"),
            "{text}"
        );
        assert!(
            text.contains("admission.max_age: expected a duration like"),
            "{text}"
        );
        assert!(text.contains("admission.flavour: unknown key"), "{text}");
    }

    #[test]
    fn ranges_are_checked_by_the_doorkeeper_config() {
        let errors =
            AdmissionTable::from_toml("[admission]\ncapacity = 0\nrotate_at_fpr = 0.005\n")
                .expect_err("invalid");
        assert_eq!(
            errors.to_string(),
            "admission.capacity: must be at least 1, got 0\n\
             admission.rotate_at_fpr: 0.005 must be greater than target_fpr (0.01)"
        );
    }

    #[test]
    fn the_proxys_own_keys_and_other_tables_are_ignored() {
        let table = AdmissionTable::from_toml(
            "[server]\nlisten = \"127.0.0.1:1\"\n[admission]\nmode = \"off\"\n\
             probation_share = 0.2\nsnapshot_path = \"\"\nsnapshot_interval = \"5m\"\n",
        )
        .expect("valid");
        assert_eq!(table.mode, Mode::Off);
    }

    #[test]
    fn syntax_errors_and_a_non_table_are_reported() {
        assert!(matches!(
            AdmissionTable::from_toml("[admission\n")
                .expect_err("bad")
                .0[..],
            [TableError::Syntax(_)]
        ));
        assert_eq!(
            AdmissionTable::from_toml("admission = 3\n")
                .expect_err("bad")
                .to_string(),
            "admission: expected a table, got 3"
        );
    }
}
