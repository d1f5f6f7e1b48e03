//! The doorkeeper: a rotating pair of Bloom filters that answers "seen before?".
