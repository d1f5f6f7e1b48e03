//! `bloomgate check-config PATH`, run as the user runs it.

use std::path::PathBuf;
use std::process::Command;

use crate::common::TempDir;

fn check_config(path: &std::path::Path) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bloomgate"))
        .arg("check-config")
        .arg(path)
        .output()
        .unwrap()
}

#[test]
fn a_bad_file_fails_with_every_key_named() {
    let dir = TempDir::new("check-config");
    let path = dir.join("bad.toml");
    std::fs::write(
        &path,
        "[server]\nlistn = \"127.0.0.1:80\"\n[cache]\nmax_bytes = \"lots\"\n[admission]\ntarget_fpr = 1.5\n",
    )
    .unwrap();
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "exit status {:?}, stderr:\n{stderr}",
        output.status
    );
    for expected in [
        "server.listn: unknown key",
        r#"cache.max_bytes: expected a size like "512MiB", got "lots""#,
        "admission.target_fpr: 1.5 must be in (0, 1)",
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in stderr:\n{stderr}"
        );
    }
    assert!(
        stderr.contains(&path.display().to_string()),
        "the file is not named:\n{stderr}"
    );
}

/// The annotated defaults, and the example a service runs (`config/bloomgate.service.toml`).
#[test]
fn the_shipped_files_check_ok() {
    for name in ["bloomgate.toml", "bloomgate.service.toml"] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("config")
            .join(name);
        let output = check_config(&path);
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "{name}: stderr:\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(
            stdout.starts_with(&format!("{}: ok", path.display())),
            "{stdout}"
        );
    }
}

#[test]
fn one_run_names_every_error_and_suggests_the_key_meant() {
    let dir = TempDir::new("check-config-all");
    let path = dir.join("bad.toml");
    let missing = dir.join("missing-cert.pem");
    std::fs::write(
        &path,
        format!(
            "[server]\nmax_conections = 5\n\
             [server.tls]\nlisten = \"127.0.0.1:8443\"\ncert_file = \"{}\"\nkey_file = \"{}\"\n\
             [origin]\nurl = \"http://127.0.0.1:8081\"\n\
             [upstreams.a]\nservers = [\"http://127.0.0.1:8082/path\"]\n\
             [upstreams.b]\nservers = [\"http://127.0.0.1:8083\"]\n\
             [[routes]]\nupstream = \"a\"\n\
             [[routes]]\nhost = \"b.example\"\nupstream = \"b\"\n",
            missing.display(),
            dir.join("missing-key.pem").display()
        ),
    )
    .unwrap();
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    for expected in [
        "origin.url: given with [upstreams]",
        "server.max_conections: unknown key: did you mean server.max_connections?",
        "upstreams.a.servers: [0]: the origin URL must not have a path",
        "routes[1]: overlaps routes[0]",
        &format!("server.tls: {}", missing.display()),
    ] {
        assert!(
            stderr.contains(expected),
            "missing {expected:?} in stderr:\n{stderr}"
        );
    }
}

#[test]
fn an_old_underscore_spelling_passes_with_a_warning_naming_the_new_one() {
    let dir = TempDir::new("check-config-spelling");
    let path = dir.join("old.toml");
    std::fs::write(
        &path,
        "[upstreams.a]\nservers = [\"http://127.0.0.1:8081\"]\nbalance = \"round_robin\"\n",
    )
    .unwrap();
    let output = check_config(&path);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "{}: warning: upstreams.a.balance: \"round_robin\" is an old spelling, read as \"round-robin\"",
            path.display()
        )),
        "{stderr}"
    );
    std::fs::write(
        &path,
        "[upstreams.a]\nservers = [\"http://127.0.0.1:8081\"]\nbalance = \"round-robin\"\n",
    )
    .unwrap();
    let output = check_config(&path);
    assert!(output.status.success());
    assert!(output.stderr.is_empty(), "{output:?}");
}
