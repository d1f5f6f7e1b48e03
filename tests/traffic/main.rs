//! The traffic tools over real sockets: the synthetic origin (`bloomgate origin`) and the replay
//! client (`bloomgate replay`). One test crate per subject, so that it is linked once.

mod origin_faults;
// Only `RefusingPort::new` is used here.
mod origin_serving;
mod origin_support;
#[allow(dead_code)]
#[path = "../common/refusing.rs"]
mod refusing;
mod replay_client;
