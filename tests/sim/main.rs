//! The simulator and the traces it reads: the trace reader, the synthetic generator, the policies
//! on hand-made traces and `bloomgate simulate` as the user runs it. One test crate per subject,
//! so that it is linked once.

mod command;
mod plot;
mod policies;
mod trace_reader;
mod trace_synthetic;
