//! Config errors: every problem found in one file, each naming its dotted key.

use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in a config file.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The text is not valid TOML; `message` is toml's own.
    #[error("line {line}, column {column}: {message}")]
    Syntax {
        line: usize,
        column: usize,
        message: String,
    },
    /// A known key holds a value that cannot be used.
    #[error("{key}: {problem}")]
    Invalid { key: String, problem: String },
    /// A key the schema does not have (often a typo), with the nearest one it has.
    #[error("{key}: unknown key{}", did_you_mean(suggestion))]
    UnknownKey {
        key: String,
        suggestion: Option<String>,
    },
    /// A table the schema does not have, with the nearest one it has.
    #[error("{key}: unknown table{}", did_you_mean(suggestion))]
    UnknownTable {
        key: String,
        suggestion: Option<String>,
    },
    /// The file could not be read.
    #[error("cannot read the file: {reason}")]
    Unreadable { reason: String },
}

impl ConfigError {
    /// The dotted key this error is about, if it is about one.
    pub fn key(&self) -> Option<&str> {
        match self {
            Self::Invalid { key, .. }
            | Self::UnknownKey { key, .. }
            | Self::UnknownTable { key, .. } => Some(key),
            Self::Syntax { .. } | Self::Unreadable { .. } => None,
        }
    }

    pub(crate) fn invalid(key: impl Into<String>, problem: impl Into<String>) -> Self {
        Self::Invalid {
            key: key.into(),
            problem: problem.into(),
        }
    }

    pub(crate) fn syntax(text: &str, error: &toml::de::Error) -> Self {
        let offset = error.span().map_or(0, |span| span.start).min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        Self::Syntax {
            line,
            column,
            message: error.message().trim_end().to_owned(),
        }
    }
}

fn did_you_mean(suggestion: &Option<String>) -> String {
    suggestion
        .as_ref()
        .map_or_else(String::new, |known| format!(": did you mean {known}?"))
}

/// Every problem found in one config text, in the order of the schema.
///
/// Displays one error per line, each prefixed with the file's path when it came from a file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    file: Option<PathBuf>,
    errors: Vec<ConfigError>,
}

impl ConfigErrors {
    pub(crate) fn new(errors: Vec<ConfigError>) -> Self {
        Self { file: None, errors }
    }

    pub(crate) fn in_file(mut self, path: &Path) -> Self {
        self.file = Some(path.to_owned());
        self
    }

    /// The file the errors were found in, when the config came from a file.
    pub fn file(&self) -> Option<&Path> {
        self.file.as_deref()
    }

    /// The errors, at least one.
    pub fn errors(&self) -> &[ConfigError] {
        &self.errors
    }

    /// How many errors were found.
    pub fn len(&self) -> usize {
        self.errors.len()
    }

    /// Always false: a `ConfigErrors` holds at least one error.
    pub fn is_empty(&self) -> bool {
        self.errors.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if let Some(file) = &self.file {
                write!(f, "{}: ", file.display())?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.errors.iter()
    }
}
