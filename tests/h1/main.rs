//! The native HTTP/1.1 request parser against hyper's server, on the same bytes.

mod differential;

use differential::{Agreement, Differential, Generator, SMUGGLING, compare, native};

/// Checks `count` generated inputs from `seed`; returns how many the native parser refused
/// beyond hyper.
fn agree_on_generated(seed: u64, count: usize) -> usize {
    let differential = Differential::new();
    let mut generator = Generator::new(seed);
    let mut stricter = 0;
    for _ in 0..count {
        let input = generator.input();
        match differential.check(&input) {
            Ok(Agreement::Same) => {}
            Ok(Agreement::NativeStricter) => stricter += 1,
            Err(mismatch) => panic!("{mismatch}"),
        }
    }
    stricter
}

/// A number from the environment, for longer runs than the suite's.
fn from_env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(default)
}

#[test]
fn native_parser_and_hyper_agree_on_generated_requests() {
    let seed = from_env("H1_DIFFERENTIAL_SEED", 37);
    let count = usize::try_from(from_env("H1_DIFFERENTIAL_INPUTS", 5000)).expect("a count");
    let started = std::time::Instant::now();
    let stricter = agree_on_generated(seed, count);
    eprintln!(
        "{count} inputs from seed {seed} in {:?}: {stricter} refused beyond hyper, no disagreement",
        started.elapsed()
    );
    // The generator reaches the rules beyond hyper, and most inputs are not among them.
    assert!(stricter > 0, "no input reached a rule beyond hyper");
    assert!(
        stricter < count / 2,
        "{stricter} of {count} refused beyond hyper"
    );
}

#[test]
fn native_parser_and_hyper_agree_on_smuggling_attempts() {
    let differential = Differential::new();
    for input in SMUGGLING {
        if let Err(mismatch) = differential.check(input.as_bytes()) {
            panic!("{mismatch}");
        }
    }
}

#[test]
fn a_request_framed_differently_is_a_disagreement() {
    let differential = Differential::new();
    let sent = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let read = b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\nabcGET / HTTP/1.1\r\nHost: a\r\n\r\n";
    assert!(compare(sent, native(read), differential.hyper(sent)).is_err());
    assert!(compare(sent, native(sent), differential.hyper(sent)).is_ok());
}

#[test]
fn a_request_only_one_parser_accepts_is_a_disagreement() {
    let differential = Differential::new();
    let accepted = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    let refused = b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: x\r\n\r\n";
    assert!(compare(accepted, native(accepted), differential.hyper(refused)).is_err());
    assert!(compare(accepted, native(refused), differential.hyper(accepted)).is_err());
}
