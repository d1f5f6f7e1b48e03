//! `bloomgate --version`, as the user runs it.

use std::process::Command;

#[test]
fn version_names_the_crate_version_and_the_git_commit() {
    let output = Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let commit = stdout
        .strip_prefix(concat!("bloomgate ", env!("CARGO_PKG_VERSION"), " ("))
        .and_then(|rest| rest.strip_suffix(")\n"))
        .unwrap_or_else(|| panic!("not `bloomgate VERSION (COMMIT)`: {stdout:?}"));
    if commit == "unknown" {
        // Built outside a git checkout (a crate tarball): nothing to compare with.
        return;
    }
    assert!(
        commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit()),
        "not a short commit hash: {commit:?}"
    );
    let head = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        head.status.success(),
        "the build found git, the test does not"
    );
    assert_eq!(commit, String::from_utf8_lossy(&head.stdout).trim());
}
