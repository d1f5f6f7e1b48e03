//! The traffic tools over real sockets: the synthetic origin (`bloomgate origin`) and the replay
//! client (`bloomgate replay`). One test crate per subject, so that it is linked once.

mod origin_faults;
mod origin_serving;
mod origin_support;
mod replay_client;
