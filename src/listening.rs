//! The line `bloomgate serve` prints on stdout once it listens, which scripts and tests read for its ports.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

const PREFIX: &str = "bloomgate listening on http://";
const HTTPS: &str = " and https://";
const ADMIN: &str = " (admin http://";
const TO: &str = "/metrics) -> ";

/// Where a started `bloomgate serve` listens, as the one line it prints on stdout:
/// `bloomgate listening on http://ADDR (admin http://ADMIN/metrics) -> origin URL`, with
/// ` and https://TLS_ADDR` after `ADDR` when `[server.tls]` is set, and
/// `-> upstreams a (3 servers), b (1 server) by 2 routes` in place of the origin when the config
/// has upstream groups (what `check-config` says).
///
/// `load/lib.sh` reads the same line with `sed`, so a change here changes it there too.
///
/// # Examples
/// ```
/// use bloomgate::listening::ListeningLine;
///
/// let line = "bloomgate listening on http://127.0.0.1:8080 (admin http://127.0.0.1:9091/metrics) -> origin http://127.0.0.1:8081/\n";
/// let listening: ListeningLine = line.parse().unwrap();
/// assert_eq!(listening.admin_addr, "127.0.0.1:9091".parse().unwrap());
/// assert_eq!(listening.to_string(), line.trim_end());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListeningLine {
    /// The public listener.
    pub addr: SocketAddr,
    /// The HTTPS listener, when there is one.
    pub tls_addr: Option<SocketAddr>,
    /// The admin listener (metrics, health, purge).
    pub admin_addr: SocketAddr,
    /// Where requests go, as [`Config::destination`](crate::config::Config::destination) says.
    pub destination: String,
}

/// A line that is not a [`ListeningLine`], quoted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "expected \"bloomgate listening on http://ADDR (admin http://ADMIN/metrics) -> DESTINATION\", got {0:?}"
)]
pub struct NotAListeningLine(pub String);

impl fmt::Display for ListeningLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{PREFIX}{}", self.addr)?;
        if let Some(tls_addr) = self.tls_addr {
            write!(f, "{HTTPS}{tls_addr}")?;
        }
        write!(f, "{ADMIN}{}{TO}{}", self.admin_addr, self.destination)
    }
}

impl FromStr for ListeningLine {
    type Err = NotAListeningLine;

    /// Reads the line as printed, with or without its line ending.
    fn from_str(line: &str) -> Result<Self, Self::Err> {
        parse(line.trim_end()).ok_or_else(|| NotAListeningLine(line.to_owned()))
    }
}

fn parse(line: &str) -> Option<ListeningLine> {
    let rest = line.strip_prefix(PREFIX)?;
    let (addrs, rest) = rest.split_once(ADMIN)?;
    let (admin_addr, destination) = rest.split_once(TO)?;
    if destination.is_empty() {
        return None;
    }
    let (addr, tls_addr) = match addrs.split_once(HTTPS) {
        Some((addr, tls_addr)) => (addr, Some(tls_addr.parse().ok()?)),
        None => (addrs, None),
    };
    Some(ListeningLine {
        addr: addr.parse().ok()?,
        tls_addr,
        admin_addr: admin_addr.parse().ok()?,
        destination: destination.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_printed_line_reads_back_as_the_same_addresses() {
        let listening = ListeningLine {
            addr: "[::1]:4000".parse().unwrap(),
            tls_addr: None,
            admin_addr: "127.0.0.1:4001".parse().unwrap(),
            destination: "origin http://origin.internal:8081/".to_owned(),
        };
        let line = format!("{listening}\n");
        assert_eq!(
            line,
            "bloomgate listening on http://[::1]:4000 (admin http://127.0.0.1:4001/metrics) -> origin http://origin.internal:8081/\n"
        );
        assert_eq!(line.parse(), Ok(listening.clone()));
        let with_tls = ListeningLine {
            tls_addr: Some("[::1]:4443".parse().unwrap()),
            ..listening
        };
        let line = with_tls.to_string();
        assert_eq!(
            line,
            "bloomgate listening on http://[::1]:4000 and https://[::1]:4443 (admin http://127.0.0.1:4001/metrics) -> origin http://origin.internal:8081/"
        );
        assert_eq!(line.parse(), Ok(with_tls));
    }

    #[test]
    fn other_lines_are_quoted_in_the_error() {
        assert_eq!(
            "origin listening on http://127.0.0.1:8081".parse::<ListeningLine>(),
            Err(NotAListeningLine(
                "origin listening on http://127.0.0.1:8081".to_owned()
            ))
        );
        for bad in [
            "",
            "bloomgate listening on http://127.0.0.1:4000",
            "bloomgate listening on http://nowhere (admin http://127.0.0.1:4001/metrics) -> origin http://x/",
            "bloomgate listening on http://127.0.0.1:4000 (admin http://127.0.0.1:4001/metrics) -> ",
        ] {
            assert!(bad.parse::<ListeningLine>().is_err(), "{bad:?}");
        }
    }
}
