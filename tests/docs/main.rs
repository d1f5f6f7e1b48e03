//! The operator's guide (`README.md`, `docs/`, `CHANGELOG.md`, `load/README.md`) against the code:
//! the configuration reference names every key the reader takes and no other, with its default;
//! every TOML example is a valid configuration; every link between pages lands on a file and a
//! heading that exist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use bloomgate::config::{self, Config};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// Every page of `docs/`, then `README.md`: the guide, whose TOML examples are configurations.
fn guide() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ is there")
        .map(|entry| entry.expect("a readable docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    pages.sort();
    pages.push(root.join("README.md"));
    pages
}

/// The guide, `CHANGELOG.md` and `load/README.md` (whose TOML is a load scenario's, not a config).
fn pages() -> Vec<PathBuf> {
    let mut pages = guide();
    pages.extend(["CHANGELOG.md", "load/README.md"].map(|page| Path::new(ROOT).join(page)));
    pages
}

/// The page's lines outside fenced code blocks, numbered from 1.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            lines.push((i + 1, line));
        }
    }
    lines
}

/// The configuration reference's rows: key, default cell, line number.
fn reference_rows() -> Vec<(String, String, usize)> {
    let text = read(&Path::new(ROOT).join("docs/configuration.md"));
    prose(&text)
        .into_iter()
        .filter_map(|(line_no, line)| {
            let cells: Vec<&str> = line.strip_prefix("| `")?.splitn(3, " | ").collect();
            let key = cells[0].strip_suffix('`')?;
            Some((key.to_owned(), cells.get(1)?.trim().to_owned(), line_no))
        })
        .collect()
}

#[test]
fn the_configuration_reference_names_every_key_the_reader_takes_and_no_other() {
    let mut documented: Vec<String> = reference_rows().into_iter().map(|row| row.0).collect();
    documented.sort();
    let known = config::keys();
    let missing: Vec<&String> = known.iter().filter(|k| !documented.contains(k)).collect();
    let unknown: Vec<&String> = documented.iter().filter(|k| !known.contains(k)).collect();
    assert!(
        missing.is_empty() && unknown.is_empty(),
        "docs/configuration.md lacks {missing:?} and names keys the reader does not take: {unknown:?}"
    );
    let mut once = documented.clone();
    once.dedup();
    assert_eq!(once, documented, "a key has two rows");
}

#[test]
fn the_reference_marks_exactly_the_keys_a_reload_does_not_apply() {
    let text = read(&Path::new(ROOT).join("docs/configuration.md"));
    let mut documented = Vec::new();
    for (_, line) in prose(&text) {
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let Some((key, _)) = row.split_once('`') else {
            continue;
        };
        documented.push(key.to_owned());
        let marked = line.contains("Needs a restart.");
        let class = config::key(key)
            .unwrap_or_else(|| panic!("docs/configuration.md: {key} is not in config::KEYS"))
            .reload;
        assert_eq!(
            marked,
            class == config::ReloadClass::Restart,
            "docs/configuration.md: {key} is {class:?} in config::KEYS; its row must say \
             \"Needs a restart.\" exactly when a reload does not apply it"
        );
    }
    for key in config::KEYS {
        assert!(
            documented.iter().any(|name| name == key.name),
            "docs/configuration.md has no row for {}",
            key.name
        );
    }
}

#[test]
fn the_configuration_reference_gives_each_default_of_the_built_in_file() {
    let defaults: toml::Table = config::DEFAULT_TOML.parse().expect("valid TOML");
    for (key, default, line_no) in reference_rows() {
        let mut path: Vec<&str> = key.split('.').collect();
        let leaf = path.pop().expect("a dotted key");
        let table = path.iter().try_fold(&defaults, |table, name| {
            table.get(*name).and_then(toml::Value::as_table)
        });
        let shipped = table.and_then(|table| table.get(leaf));
        let at = format!("docs/configuration.md:{line_no}: {key}");
        if default == "none" {
            assert!(
                shipped.is_none(),
                "{at}: says no default, the built-in file has {shipped:?}"
            );
            continue;
        }
        let literal = default
            .strip_prefix('`')
            .and_then(|cell| cell.strip_suffix('`'))
            .unwrap_or_else(|| panic!("{at}: the default {default:?} is not one TOML value in `"));
        let documented: toml::Table = format!("value = {literal}")
            .parse()
            .unwrap_or_else(|error| panic!("{at}: the default {literal} is not TOML: {error}"));
        assert_eq!(
            Some(&documented["value"]),
            shipped,
            "{at}: the documented default differs from config/bloomgate.toml's"
        );
    }
}

/// The fenced blocks whose info string is exactly `toml`, with the line each starts on. A block
/// that is deliberately not a whole configuration says so in its info string (`toml,ignore`).
fn toml_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, bool, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut open, fence) {
            (None, Some(info)) => open = Some((i + 1, info.trim() == "toml", String::new())),
            (Some((start, checked, body)), Some(_)) => {
                if *checked {
                    blocks.push((*start, std::mem::take(body)));
                }
                open = None;
            }
            (Some((_, _, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    blocks
}

/// `check-config` reads the text with `Config::from_toml_str` (then, for a real file, the TLS
/// certificates it names, which an example's paths do not point at).
#[test]
fn every_toml_example_in_the_guide_is_a_valid_configuration() {
    let mut checked = 0;
    let mut failures = Vec::new();
    for page in guide() {
        for (line_no, block) in toml_blocks(&read(&page)) {
            checked += 1;
            if let Err(errors) = Config::from_toml_str(&block) {
                failures.push(format!("{}:{line_no}:\n{errors}", page.display()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        checked > 0,
        "no TOML block found: is the fence still ```toml?"
    );
}

/// The worked examples run as they are: each file in `config/examples/` is a valid configuration.
#[test]
fn every_example_configuration_is_valid() {
    let dir = Path::new(ROOT).join("config/examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir).expect("config/examples/") {
        let path = entry.expect("an entry of config/examples/").path();
        if path.extension().is_some_and(|ext| ext == "toml") {
            checked += 1;
            if let Err(errors) = Config::load(&path) {
                panic!("{}:\n{errors}", path.display());
            }
        }
    }
    assert!(checked > 0, "no example in {}", dir.display());
}

/// GitHub's anchor for a heading: lower case, spaces to hyphens, other punctuation dropped, a
/// repeated heading numbered.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    prose(text)
        .into_iter()
        .filter_map(|(_, line)| {
            let title = line.trim_start_matches('#');
            (title.len() < line.len() && title.starts_with(' ')).then_some(title.trim())
        })
        .map(|title| {
            let slug: String = title
                .to_lowercase()
                .chars()
                .filter_map(|c| match c {
                    ' ' => Some('-'),
                    '-' | '_' => Some(c),
                    c if c.is_alphanumeric() => Some(c),
                    _ => None,
                })
                .collect();
            let count = seen.entry(slug.clone()).or_insert(0);
            *count += 1;
            match *count {
                1 => slug,
                n => format!("{slug}-{}", n - 1),
            }
        })
        .collect()
}

/// The targets of the page's Markdown links, outside code, with their line numbers.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    // A code span may run over a line break, never past its paragraph.
    let mut in_code = false;
    for (line_no, line) in prose(text) {
        if line.trim().is_empty() {
            in_code = false;
            continue;
        }
        let mut rest = line;
        while let Some(at) = rest.find(['`', ']']) {
            let (mark, after) = (rest.as_bytes()[at], &rest[at + 1..]);
            rest = after;
            if mark == b'`' {
                in_code = !in_code;
            } else if !in_code && let Some(target) = after.strip_prefix('(') {
                let end = target.find([')', ' ']).unwrap_or(target.len());
                found.push((line_no, target[..end].to_owned()));
                rest = &target[end..];
            }
        }
    }
    found
}

#[test]
fn links_between_pages_land_on_a_file_and_heading_that_exist() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = read(&page);
        let dir = page.parent().expect("a page is in a directory");
        for (line_no, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                page.clone()
            } else {
                dir.join(path)
            };
            let at = format!("{}:{line_no}: {target}", page.display());
            if !file.exists() {
                broken.push(format!("{at}: no such file"));
            } else if !anchor.is_empty()
                && file.extension().is_some_and(|ext| ext == "md")
                && !anchors(&read(&file)).iter().any(|a| a == anchor)
            {
                broken.push(format!("{at}: no such heading"));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_guide_index_links_every_page() {
    let index = read(&Path::new(ROOT).join("docs/README.md"));
    let linked: Vec<String> = links(&index)
        .into_iter()
        .map(|(_, target)| target)
        .collect();
    for page in guide() {
        let Some(name) = page
            .strip_prefix(Path::new(ROOT).join("docs"))
            .ok()
            .and_then(Path::to_str)
        else {
            continue;
        };
        if name != "README.md" {
            assert!(
                linked
                    .iter()
                    .any(|target| target.split('#').next() == Some(name)),
                "docs/README.md does not link {name}"
            );
        }
    }
}

#[test]
fn the_readme_gives_the_two_set_up_commands() {
    let readme = read(&Path::new(ROOT).join("README.md"));
    for command in ["cargo run --release -- demo", "cargo test"] {
        assert!(readme.contains(command), "README.md lost `{command}`");
    }
}

/// The fenced blocks marked `sh` of a page, in order, each as its lines.
fn shell_blocks(text: &str) -> Vec<Vec<(usize, &str)>> {
    let mut blocks = Vec::new();
    let mut current: Option<Vec<(usize, &str)>> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        match (&mut current, fence) {
            (None, Some(info)) if info.trim() == "sh" => current = Some(Vec::new()),
            (Some(_), Some(_)) => blocks.extend(current.take()),
            (Some(lines), None) => lines.push((i + 1, line)),
            (None, _) => {}
        }
    }
    blocks
}

/// Follows the shell blocks of README.md and docs/install.md (the walkthroughs a newcomer types),
/// each page as one interactive bash session would run them, line by
/// line: a server started in the foreground would leave the following lines to another shell
/// (where its jobs do not exist), `kill %N` must name a job started before, `wait` must not wait
/// for a server still running, and nothing may need a macOS command or print a binary body.
#[test]
fn the_walkthroughs_run_in_one_shell_as_written() {
    let mut problems = Vec::new();
    for page in ["README.md", "docs/install.md"] {
        problems.extend(walkthrough_problems(page));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

fn walkthrough_problems(page: &str) -> Vec<String> {
    let text = read(&Path::new(ROOT).join(page));
    let mut problems = Vec::new();
    // The shell's jobs by number, running or killed: a killed job keeps its number until `wait`
    // discards it, and bash numbers a new job one above the highest.
    let mut jobs: Vec<(u32, bool)> = Vec::new();
    for block in shell_blocks(&text) {
        let commands: Vec<(usize, &str)> = block
            .iter()
            .flat_map(|&(line_no, line)| {
                let line = line.find(" #").map_or(line, |at| &line[..at]);
                // `for ...; do ... & done` is one command; `a; b` are two.
                let simple: Vec<&str> = if line.trim_start().starts_with("for ") {
                    vec![line]
                } else {
                    line.split(';').collect()
                };
                simple
                    .into_iter()
                    .map(move |command| (line_no, command.trim()))
            })
            .filter(|(_, command)| !command.is_empty())
            .collect();
        for (index, &(line_no, command)) in commands.iter().enumerate() {
            let at = format!("{page}:{line_no}: {command}");
            let started = match command
                .strip_prefix("for ")
                .and_then(|rest| rest.split_once(" in "))
                .and_then(|(_, rest)| rest.split_once(';'))
            {
                Some((list, _)) if command.ends_with("& done") => list.split_whitespace().count(),
                _ => usize::from(command.ends_with('&')),
            };
            for _ in 0..started {
                let number = jobs
                    .iter()
                    .map(|job| job.0)
                    .max()
                    .map_or(1, |last| last + 1);
                jobs.push((number, true));
            }
            let server = ["bloomgate serve", "bloomgate origin"]
                .iter()
                .any(|server| command.contains(server));
            if server && started == 0 && index + 1 < commands.len() {
                problems.push(format!(
                    "{at}: runs in the foreground, so the lines after it need another shell"
                ));
            }
            if let Some(targets) = command.strip_prefix("kill ") {
                for target in targets.split_whitespace() {
                    let number = target.strip_prefix('%').and_then(|n| n.parse::<u32>().ok());
                    match jobs.iter_mut().find(|job| Some(job.0) == number && job.1) {
                        Some(job) => job.1 = false,
                        None => problems.push(format!("{at}: no running job {target}")),
                    }
                }
            }
            if command == "wait" {
                if jobs.iter().any(|job| job.1) {
                    problems.push(format!("{at}: waits for servers that are still running"));
                }
                jobs.clear();
            }
            if command.starts_with("open ") {
                problems.push(format!("{at}: `open` is macOS's; give the URL"));
            }
            let curl = command.split('|').next().unwrap_or(command);
            let shows_head = curl
                .split_whitespace()
                .any(|word| word.starts_with('-') && !word.starts_with("--") && word.contains('i'));
            if command.starts_with("curl ") && shows_head {
                problems.push(format!(
                    "{at}: -i prints a binary body with the head: curl refuses it on a terminal \
                     and grep calls it a binary file (`-s -D - -o /dev/null` prints the head)"
                ));
            }
        }
    }
    problems
}
