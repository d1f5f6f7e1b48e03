//! One TOML table being read: typed values, dotted keys, errors collected, unread keys reported.

use std::sync::LazyLock;

use toml::{Table, Value};

use super::error::ConfigError;
use super::values::shown;

/// What an optional table is read as when listing keys: it has no defaults to read.
static EMPTY_TABLE: LazyLock<Table> = LazyLock::new(Table::new);

/// One table being read: remembers which keys were read so the rest can be reported as unknown.
pub(super) struct Section<'t> {
    path: String,
    pub(super) table: &'t Table,
    read: Vec<&'static str>,
    errors: Vec<ConfigError>,
    /// The dotted names of the values read here and in the tables below (for [`keys`](super::parse::keys)).
    pub(super) keys: Vec<String>,
    /// Listing keys ([`keys`](super::parse::keys)): absent optional tables are read as empty ones.
    listing: bool,
}

impl<'t> Section<'t> {
    pub(super) fn new(path: String, table: &'t Table, listing: bool) -> Self {
        Self {
            path,
            table,
            read: Vec::new(),
            errors: Vec::new(),
            keys: Vec::new(),
            listing,
        }
    }

    /// Keys of this table that another reader reads from it (the doorkeeper crate's).
    pub(super) fn read_elsewhere(&mut self, keys: &[&'static str]) {
        for &key in keys {
            self.read.push(key);
            self.keys.push(self.dotted(key));
        }
    }

    fn dotted(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub(super) fn report(&mut self, key: &str, problem: impl Into<String>) {
        let key = self.dotted(key);
        self.errors.push(ConfigError::invalid(key, problem));
    }

    fn value(&mut self, key: &'static str) -> Option<&'t Value> {
        self.read.push(key);
        let value = self.table.get(key);
        if value.is_none() {
            // Only reachable if the embedded defaults lack the key; its unit test guards that.
            self.report(key, "missing, and absent from the built-in defaults");
        }
        value
    }

    pub(super) fn get<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Option<T> {
        self.keys.push(self.dotted(key));
        let value = self.value(key)?;
        read(value)
            .map_err(|problem| self.report(key, problem))
            .ok()
    }

    /// A key a user's table must give itself (it has no default), in a table that is optional.
    pub(super) fn required<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Option<T> {
        self.read.push(key);
        self.keys.push(self.dotted(key));
        let Some(value) = self.table.get(key) else {
            self.report(key, "missing (this table has no defaults)");
            return None;
        };
        read(value)
            .map_err(|problem| self.report(key, problem))
            .ok()
    }

    /// A table with no defaults that may be absent: `Some(None)` when it is.
    pub(super) fn optional_child<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&mut Section<'t>) -> Option<T>,
    ) -> Option<Option<T>> {
        if !self.table.contains_key(key) {
            self.read.push(key);
            if self.listing {
                let mut child = Section::new(self.dotted(key), &EMPTY_TABLE, true);
                read(&mut child);
                self.keys.append(&mut child.keys);
            }
            return Some(None);
        }
        self.child(key, read).map(Some)
    }

    pub(super) fn child<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&mut Section<'t>) -> Option<T>,
    ) -> Option<T> {
        let table = match self.value(key)? {
            Value::Table(table) => table,
            other => {
                self.report(key, format!("expected a table, got {}", shown(other)));
                return None;
            }
        };
        let mut child = Section::new(self.dotted(key), table, self.listing);
        let value = read(&mut child);
        self.keys.append(&mut child.keys);
        self.errors.extend(child.finish());
        value
    }

    /// Whether keys are being listed rather than a file read.
    pub(super) fn listing(&self) -> bool {
        self.listing
    }

    /// Reports a problem with this table itself (its name), rather than one of its keys.
    pub(super) fn report_here(&mut self, problem: impl Into<String>) {
        self.errors
            .push(ConfigError::invalid(self.path.clone(), problem));
    }

    /// A key with no default that may be left out: `Some(None)` when it is.
    pub(super) fn optional<T>(
        &mut self,
        key: &'static str,
        read: impl FnOnce(&Value) -> Result<T, String>,
    ) -> Option<Option<T>> {
        self.read.push(key);
        self.keys.push(self.dotted(key));
        let Some(value) = self.table.get(key) else {
            return Some(None);
        };
        read(value)
            .map(Some)
            .map_err(|problem| self.report(key, problem))
            .ok()
    }

    /// The tables of a table of tables named by the user (`[upstreams.NAME]`), which has no
    /// defaults and may be absent. Listing keys, it is one empty table called `any_name`.
    pub(super) fn named_tables(
        &mut self,
        key: &'static str,
        any_name: &str,
    ) -> Option<Vec<(String, &'t Table)>> {
        self.read.push(key);
        if self.listing {
            return Some(vec![(any_name.to_owned(), &*EMPTY_TABLE)]);
        }
        let Some(value) = self.table.get(key) else {
            return Some(Vec::new());
        };
        let Value::Table(outer) = value else {
            self.report(
                key,
                format!("expected a table of named tables, got {}", shown(value)),
            );
            return None;
        };
        let mut named = Vec::with_capacity(outer.len());
        for (name, value) in outer {
            match value {
                Value::Table(table) => named.push((name.clone(), table)),
                other => {
                    self.report(
                        &format!("{key}.{name}"),
                        format!("expected a table, got {}", shown(other)),
                    );
                    return None;
                }
            }
        }
        Some(named)
    }

    /// The tables of an array of tables (`[[routes]]`), with their indexes; absent = none.
    /// Listing keys, it is one empty table without an index.
    pub(super) fn array_of_tables(
        &mut self,
        key: &'static str,
    ) -> Option<Vec<(Option<usize>, &'t Table)>> {
        self.read.push(key);
        if self.listing {
            return Some(vec![(None, &*EMPTY_TABLE)]);
        }
        let Some(value) = self.table.get(key) else {
            return Some(Vec::new());
        };
        let tables = value.as_array().and_then(|array| {
            array
                .iter()
                .enumerate()
                .map(|(index, value)| value.as_table().map(|table| (Some(index), table)))
                .collect::<Option<Vec<_>>>()
        });
        if tables.is_none() {
            self.report(
                key,
                format!("expected [[{key}]] tables, got {}", shown(value)),
            );
        }
        tables
    }

    /// Reads `table` as the table at the dotted `path` (not necessarily one of this table's
    /// own keys), its keys and errors kept with this table's.
    pub(super) fn nested<T>(
        &mut self,
        path: String,
        table: &Table,
        read: impl FnOnce(&mut Section<'_>) -> Option<T>,
    ) -> Option<T> {
        let mut child = Section::new(path, table, self.listing);
        let value = read(&mut child);
        self.keys.append(&mut child.keys);
        self.errors.extend(child.finish());
        value
    }

    /// Returns the errors found, plus one for each key that was never read.
    pub(super) fn finish(mut self) -> Vec<ConfigError> {
        for (key, value) in self.table {
            if !self.read.contains(&key.as_str()) {
                let key = self.dotted(key);
                self.errors
                    .push(super::keys::unknown(key, matches!(value, Value::Table(_))));
            }
        }
        self.errors
    }
}
