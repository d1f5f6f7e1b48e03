//! Build script: the git commit the binary is built from, for `bloomgate --version`.
//!
//! Sets `BLOOMGATE_COMMIT` to `git rev-parse --short HEAD`, or to `unknown` where there is no git
//! or the package is not the top of its own repository (a crate tarball unpacked anywhere, even
//! inside another checkout). Reruns only when HEAD moves: when the file `HEAD` changes (a checkout)
//! or the branch it names does (a commit), never on every build.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let manifest_dir = PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    let commit = commit(&manifest_dir).unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=BLOOMGATE_COMMIT={commit}");
}

fn commit(dir: &Path) -> Option<String> {
    let top = git(dir, &["rev-parse", "--show-toplevel"])?;
    let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    };
    if !same(Path::new(&top), dir) {
        return None;
    }
    // A worktree keeps HEAD in its own git directory and branches in the common one: ask git for
    // each path rather than assuming `.git/HEAD`. A path that does not exist is not watched (cargo
    // would rerun the script on every build). HEAD's reflog grows with every move of HEAD, also a
    // commit on a packed branch, whose loose file did not exist to be watched.
    let mut watched = vec![
        git(dir, &["rev-parse", "--git-path", "HEAD"])?,
        git(dir, &["rev-parse", "--git-path", "logs/HEAD"])?,
    ];
    if let Some(branch) = git(dir, &["rev-parse", "--symbolic-full-name", "HEAD"])
        && branch.starts_with("refs/")
    {
        watched.extend(git(dir, &["rev-parse", "--git-path", &branch]));
        watched.extend(git(dir, &["rev-parse", "--git-path", "packed-refs"]));
    }
    for path in watched {
        let path = dir.join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    git(dir, &["rev-parse", "--short", "HEAD"])
}

/// The trimmed standard output of `git ARGS` run in `dir`, or `None` if git is missing or fails.
fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !output.status.success() {
        return None;
    }
    let text = String::from_utf8(output.stdout).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}
