//! Every configuration key once, with when a change to it takes effect: what a reload applies or
//! reports, what `check-config` suggests for a misspelt key, and (tested) the reference's marks.

use super::ConfigError;

/// When a changed key takes effect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReloadClass {
    /// A reload puts the new value in force.
    Applied,
    /// The value read at start stays in force until a restart; a reload reports the change.
    Restart,
}

/// One key a config file may give.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Key {
    /// Dotted (`cache.key.sort_query`); `upstreams.<name>.` stands for any group's table and
    /// `routes[].` for any route's.
    pub name: &'static str,
    pub reload: ReloadClass,
}

const fn applied(name: &'static str) -> Key {
    Key {
        name,
        reload: ReloadClass::Applied,
    }
}

const fn restart(name: &'static str) -> Key {
    Key {
        name,
        reload: ReloadClass::Restart,
    }
}

/// Every key the reader takes, and no other (a test compares it with the reader's own list and
/// with `docs/configuration.md`). A key is `restart` when the running proxy read it once: a
/// listener's address and limits, the store's budget, the disk tier, the log filter.
pub const KEYS: &[Key] = &[
    restart("server.listen"),
    restart("server.max_connections"),
    restart("server.header_read_timeout"),
    // Each serving thread reads the client timeouts once, at start.
    restart("server.idle_timeout"),
    restart("server.send_timeout"),
    restart("server.stream_send_timeout"),
    restart("server.max_header_bytes"),
    // Each serving thread picks its HTTP/1.1 server once, at start.
    restart("server.http1"),
    restart("server.sendfile"),
    applied("server.shutdown_grace"),
    applied("server.purge_allowed_networks"),
    // Adding or removing `[server.tls]` is a change of this key: a listener to open or close.
    restart("server.tls.listen"),
    applied("server.tls.cert_file"),
    applied("server.tls.key_file"),
    applied("origin.url"),
    applied("origin.ca_file"),
    applied("origin.tls_server_name"),
    applied("origin.connect_timeout"),
    applied("origin.first_byte_timeout"),
    applied("origin.idle_timeout"),
    applied("origin.pool_idle_timeout"),
    applied("origin.pool_max_idle_per_host"),
    applied("origin.preserve_host"),
    applied("origin.trusted_forwarding_headers"),
    applied("upstreams.<name>.servers"),
    applied("upstreams.<name>.balance"),
    applied("upstreams.<name>.health.max_fails"),
    applied("upstreams.<name>.health.fail_timeout"),
    applied("upstreams.<name>.health.probe_path"),
    applied("upstreams.<name>.health.probe_interval"),
    applied("upstreams.<name>.health.probe_timeout"),
    applied("upstreams.<name>.health.expect_status"),
    applied("upstreams.<name>.health.rise"),
    applied("upstreams.<name>.health.fall"),
    applied("routes[].host"),
    applied("routes[].path_prefix"),
    applied("routes[].upstream"),
    applied("routes[].early_hints"),
    // A route's name and cache policy: read by each request from the configuration it started on.
    applied("routes[].name"),
    applied("routes[].cache.enabled"),
    applied("routes[].cache.admission"),
    applied("routes[].cache.second_hit_above"),
    applied("routes[].cache.default_ttl"),
    applied("routes[].cache.override_ttl"),
    applied("routes[].cache.min_ttl"),
    applied("routes[].cache.max_ttl"),
    applied("routes[].cache.stale_if_error"),
    applied("routes[].cache.stale_while_revalidate"),
    applied("routes[].cache.ignore_origin"),
    applied("routes[].cache.ignore_vary"),
    applied("routes[].cache.ignore_client_cache_control"),
    applied("routes[].cache.share_authorized"),
    applied("routes[].cache.bypass.cookies"),
    applied("routes[].cache.bypass.headers"),
    applied("routes[].cache.bypass.query_params"),
    applied("routes[].cache.bypass.methods"),
    applied("routes[].cache.no_store.cookies"),
    applied("routes[].cache.no_store.headers"),
    applied("routes[].cache.no_store.query_params"),
    applied("routes[].cache.no_store.methods"),
    applied("routes[].cache.slice_above"),
    applied("routes[].cache.slice_bytes"),
    applied("routes[].cache.key.include_scheme"),
    applied("routes[].cache.key.include_host"),
    applied("routes[].cache.key.include_query"),
    applied("routes[].cache.key.sort_query"),
    applied("routes[].cache.key.drop_query_params"),
    applied("routes[].cache.key.keep_query_params"),
    applied("routes[].cache.key.headers"),
    applied("routes[].cache.key.cookies"),
    applied("routes[].cache.key.normalize_accept_encoding"),
    // The store's budget and its split into segments are fixed when it is made.
    restart("cache.max_bytes"),
    applied("cache.max_object_bytes"),
    // Objects sliced another way are learnt again from their next request.
    applied("cache.slice_above"),
    applied("cache.slice_bytes"),
    restart("cache.max_variants"),
    applied("cache.targeted_fields"),
    applied("cache.forward_targeted_fields"),
    applied("cache.tag_header"),
    applied("cache.forward_tag_header"),
    applied("cache.tag_purge_keep"),
    applied("cache.key.include_scheme"),
    applied("cache.key.include_host"),
    applied("cache.key.include_query"),
    applied("cache.key.sort_query"),
    applied("cache.key.drop_query_params"),
    applied("cache.key.keep_query_params"),
    applied("cache.key.headers"),
    applied("cache.key.cookies"),
    applied("cache.key.normalize_accept_encoding"),
    applied("admission.mode"),
    restart("admission.probation_share"),
    applied("admission.capacity"),
    applied("admission.target_fpr"),
    applied("admission.rotate_at_fpr"),
    applied("admission.max_age"),
    applied("admission.snapshot_path"),
    applied("admission.snapshot_interval"),
    restart("disk.path"),
    restart("disk.max_bytes"),
    restart("disk.block_bytes"),
    restart("disk.mmap"),
    restart("disk.write_buffer"),
    restart("disk.write_budget"),
    restart("disk.sync"),
    restart("disk.verify_reads"),
    restart("admin.listen"),
    restart("log.level"),
    applied("log.access.path"),
    applied("log.access.format"),
    applied("log.access.buffer"),
];

/// The key `name` (a pattern: `upstreams.<name>.servers`), if there is one.
pub fn key(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|key| key.name == name)
}

/// `dotted` as a pattern of [`KEYS`]: a group's name becomes `<name>`, a route's index `[]`.
/// Returns the pattern and what was replaced, to put back in a suggestion.
fn pattern(dotted: &str) -> (String, Option<(&'static str, &str)>) {
    if let Some(rest) = dotted.strip_prefix("upstreams.")
        && let Some((name, below)) = rest.split_once('.')
    {
        return (format!("upstreams.<name>.{below}"), Some(("<name>", name)));
    }
    if let Some(rest) = dotted.strip_prefix("routes[")
        && let Some((index, below)) = rest.split_once(']')
    {
        return (
            format!("routes[]{below}"),
            Some(("[]", &dotted[6..8 + index.len()])),
        );
    }
    (dotted.to_owned(), None)
}

/// The known key or table nearest to a misspelt one, as cargo and rustc suggest: within a few
/// edits, or the only known key with the same last part (a key put in the wrong table).
fn nearest(dotted: &str, known: &[String]) -> Option<String> {
    let (pattern, replaced) = pattern(dotted);
    let leaf = |name: &str| name.rsplit('.').next().map(str::to_owned);
    // A third of the name, at most three edits: `max_conections` is a slip, `listen` for `url`
    // is a different word.
    let within = (pattern.len() / 3).clamp(1, 3);
    let close = known
        .iter()
        .map(|name| (strsim::damerau_levenshtein(&pattern, name), name))
        .filter(|(distance, _)| *distance <= within)
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, name)| name.clone());
    let same_leaf = || {
        let mut found = known.iter().filter(|name| leaf(name) == leaf(&pattern));
        match (found.next(), found.next()) {
            (Some(only), None) => Some(only.clone()),
            _ => None,
        }
    };
    let suggestion = close.or_else(same_leaf)?;
    Some(match replaced {
        Some((stand_in, actual)) => suggestion.replacen(stand_in, actual, 1),
        None => suggestion,
    })
}

/// The error for a key or table the reader does not take, with the nearest known one when there
/// is one close enough.
pub(super) fn unknown(dotted: String, is_table: bool) -> ConfigError {
    if is_table {
        let tables: Vec<String> = KEYS
            .iter()
            .flat_map(|key| {
                let name = key.name;
                name.match_indices('.')
                    .map(move |(at, _)| name[..at].to_owned())
            })
            .collect();
        let suggestion = nearest(&dotted, &tables);
        ConfigError::UnknownTable {
            key: dotted,
            suggestion,
        }
    } else {
        let keys: Vec<String> = KEYS.iter().map(|key| key.name.to_owned()).collect();
        let suggestion = nearest(&dotted, &keys);
        ConfigError::UnknownKey {
            key: dotted,
            suggestion,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_key_the_reader_takes_and_no_other() {
        let mut listed: Vec<String> = KEYS.iter().map(|key| key.name.to_owned()).collect();
        listed.sort();
        let mut once = listed.clone();
        once.dedup();
        assert_eq!(once, listed, "a key is listed twice");
        assert_eq!(listed, super::super::keys());
    }

    fn suggested(dotted: &str, is_table: bool) -> Option<String> {
        match unknown(dotted.to_owned(), is_table) {
            ConfigError::UnknownKey { suggestion, .. }
            | ConfigError::UnknownTable { suggestion, .. } => suggestion,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_misspelt_key_is_given_the_nearest_known_one() {
        let cases = [
            ("server.max_conections", "server.max_connections"),
            ("cache.max_byte", "cache.max_bytes"),
            ("upstreams.site.balanse", "upstreams.site.balance"),
            (
                "upstreams.site.health.probe_pth",
                "upstreams.site.health.probe_path",
            ),
            ("routes[2].upstreem", "routes[2].upstream"),
            // The right key in the wrong table.
            ("server.url", "origin.url"),
        ];
        for (misspelt, nearest) in cases {
            assert_eq!(
                suggested(misspelt, false).as_deref(),
                Some(nearest),
                "{misspelt}"
            );
        }
        assert_eq!(suggested("cahce", true).as_deref(), Some("cache"));
        assert_eq!(suggested("cache.kye", true).as_deref(), Some("cache.key"));
        // Nothing near: no guess. `max_bytes` is in three tables: no guess either.
        assert_eq!(suggested("server.colour", false), None);
        assert_eq!(suggested("origin.max_bytes", false), None);
    }
}
