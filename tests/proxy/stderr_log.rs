//! bloomgate's own log on stderr, as an operator who sends it to a file reads it.

use crate::common;

use common::{Client, ProxyConfig, RefusingPort};
use http::StatusCode;

#[tokio::test]
async fn the_log_written_to_a_file_has_no_colour_escapes() {
    let dead = RefusingPort::new();
    let proxy = ProxyConfig::new(&format!("http://{}", dead.addr)).start();
    // An origin that refuses connections is logged at warn, with fields and a level to colour.
    let reply = Client::new().get(&proxy.url("/logged")).await;
    assert_eq!(reply.status, StatusCode::BAD_GATEWAY);
    let log = proxy.terminate();
    assert!(log.contains("origin request failed"), "{log}");
    assert!(log.contains("WARN"), "{log}");
    assert!(!log.contains('\x1b'), "escape codes in a file: {log:?}");
}
