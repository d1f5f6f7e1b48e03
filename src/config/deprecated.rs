//! Spellings of earlier versions that still read: the warnings `check-config` gives for them.

use std::fmt;

use toml::{Table, Value};

use super::Balance;

/// A value written as an earlier version spelt it, which still reads as `current` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deprecated {
    /// The dotted key (`upstreams.site.balance`).
    pub key: String,
    pub written: String,
    pub current: &'static str,
}

impl fmt::Display for Deprecated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: \"{}\" is an old spelling, read as \"{}\": write \"{}\" (enumerated values are kebab-case)",
            self.key, self.written, self.current, self.current
        )
    }
}

/// Every value of `table` (a config file's, as written) spelt the old way.
pub fn deprecations(table: &Table) -> Vec<Deprecated> {
    let Some(Value::Table(groups)) = table.get("upstreams") else {
        return Vec::new();
    };
    groups
        .iter()
        .filter_map(|(name, group)| {
            let written = group.get("balance")?.as_str()?;
            let balance = Balance::ALL
                .into_iter()
                .find(|balance| balance.old_spelling() == written)?;
            Some(Deprecated {
                key: format!("upstreams.{name}.balance"),
                written: written.to_owned(),
                current: balance.as_str(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn an_underscore_balance_reads_as_its_kebab_case_spelling_with_a_warning() {
        let text = "[upstreams.a]\nservers = [\"http://127.0.0.1:1\"]\nbalance = \"least_outstanding\"\n\
                    [upstreams.b]\nservers = [\"http://127.0.0.1:2\"]\nbalance = \"consistent-hash\"\n\
                    [[routes]]\nhost = \"b.example\"\nupstream = \"b\"\n[[routes]]\nupstream = \"a\"";
        let config = Config::from_toml_str(text).expect("both spellings read");
        let upstreams = config.upstreams.expect("groups");
        assert_eq!(upstreams.groups[0].balance, Balance::LeastOutstanding);
        assert_eq!(upstreams.groups[1].balance, Balance::ConsistentHash);
        let warnings = deprecations(&text.parse().expect("TOML"));
        assert_eq!(
            warnings,
            [Deprecated {
                key: "upstreams.a.balance".to_owned(),
                written: "least_outstanding".to_owned(),
                current: "least-outstanding",
            }]
        );
        let refused = Config::from_toml_str(&text.replace("least_outstanding", "fewest"))
            .expect_err("not a balance");
        assert!(
            refused.to_string().contains(
                "expected one of \"round-robin\", \"least-outstanding\", \"consistent-hash\""
            ),
            "{refused}"
        );
    }
}
