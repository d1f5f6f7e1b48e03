//! What the proxy did with a request, said once: the `Served` outcome behind `Cache-Status`, the
//! metrics and the access log, and the log line written when the response body ends.

pub(crate) mod access_log;
pub(crate) mod decision;
pub(crate) mod logged;
pub(crate) mod served;
