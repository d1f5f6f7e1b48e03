//! Fuzz target: the native HTTP/1.1 request parser against hyper's HTTP/1 server (issue 37). The
//! input is one connection's bytes, given to both; any request one accepts and the other refuses,
//! or that they frame differently (head, body, where the next request starts), is a crash that
//! prints the input and both readings. The comparison is `tests/h1/differential.rs`, the suite's.

#![no_main]

// The generator and the smuggling cases are the suite's and the seeds' (examples/make_h1_seeds.rs).
#[path = "../../tests/h1/differential.rs"]
#[allow(dead_code)]
mod differential;

use libfuzzer_sys::fuzz_target;

use differential::Differential;

thread_local! {
    static DIFFERENTIAL: Differential = Differential::new();
}

fuzz_target!(|input: &[u8]| {
    DIFFERENTIAL.with(|differential| {
        if let Err(mismatch) = differential.check(input) {
            panic!("{mismatch}");
        }
    });
});
