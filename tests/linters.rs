//! The room rules of conventions.md, checked on the source tree: each room
//! uses only the rooms below it, `unsafe` lives only in `datapath` with a
//! SAFETY comment per block, `anyhow` only in `cli`.

use std::collections::BTreeSet;
use std::path::Path;

const ROOMS: [&str; 7] = [
    "cli", "http", "session", "bench", "datapath", "protocol", "coord",
];

fn sources(room: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(room);
    let out: Vec<(String, String)> = crate::util::rust_sources(&dir)
        .into_iter()
        .map(|(p, text)| (p.display().to_string(), text))
        .collect();
    assert!(!out.is_empty(), "room {room} has no sources");
    out
}

/// The code with line comments removed.
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every room named after `crate::` (including inside `use crate::{a, b::c}`)
/// and every `super::super::` reach out of a room.
fn rooms_used(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                used.insert(name);
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            used.insert(name);
        }
    }
    if code.contains("super::super::") {
        used.insert("super::super".into());
    }
    used.retain(|n| ROOMS.contains(&n.as_str()) || n == "super::super");
    used
}

fn check_room(room: &str, allowed: &[&str]) {
    for (path, text) in sources(room) {
        for used in rooms_used(&code(&text)) {
            assert!(
                used == room || allowed.contains(&used.as_str()),
                "{path}: room `{room}` uses `{used}`, which is not below it"
            );
        }
    }
}

#[test]
fn rooms_use_only_rooms_below() {
    check_room(
        "cli",
        &["http", "session", "bench", "datapath", "protocol", "coord"],
    );
    check_room("http", &["session", "datapath", "protocol", "coord"]);
    check_room("session", &["datapath", "protocol", "coord"]);
    check_room("bench", &["datapath", "protocol", "coord"]);
    check_room("datapath", &["protocol", "coord"]);
    check_room("protocol", &[]);
    check_room("coord", &[]);
}

/// The rooms inside `session/`, each with the rooms it may use (its own
/// files reach each other by `super::`). `roles` is the one file
/// `session/roles.rs`; `session/mod.rs` (the error type and buffer sizes
/// every room uses) and `session/fuzz.rs` stand outside them.
const SESSION_ROOMS: [(&str, &[&str]); 8] = [
    (
        "daemon",
        &["probe", "client", "roles", "sink", "source", "plan", "link"],
    ),
    (
        "probe",
        &["client", "roles", "sink", "source", "plan", "link"],
    ),
    ("client", &["roles", "sink", "source", "plan", "link"]),
    ("roles", &["sink", "source", "plan", "link"]),
    ("sink", &["plan", "link"]),
    ("source", &["plan", "link"]),
    ("plan", &["link"]),
    ("link", &[]),
];

/// The session rooms `code` names (`crate::session::ROOM`, grouped
/// imports included; from `session/roles.rs`, `super::ROOM` too), and any
/// `super::super::` reach out of a room.
fn session_rooms_used(code: &str, at_session_root: bool) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let names: Vec<&str> = SESSION_ROOMS.iter().map(|(r, _)| *r).collect();
    let mut prefixes = vec!["crate::session::"];
    if at_session_root {
        prefixes.push("super::");
    }
    for prefix in prefixes {
        let mut rest = code;
        while let Some(i) = rest.find(prefix) {
            rest = &rest[i + prefix.len()..];
            let group = rest
                .strip_prefix('{')
                .map(|g| &g[..g.find('}').unwrap_or(g.len())]);
            for item in group.map_or(vec![rest], |g| g.split(',').collect()) {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                if names.contains(&name.as_str()) {
                    used.insert(name);
                }
            }
        }
    }
    if code.contains("super::super::") {
        used.insert("super::super".into());
    }
    used
}

/// Inside `session/`, each room uses only the rooms below it: no import
/// runs back up, so no circle spans two rooms.
#[test]
fn session_rooms_use_only_rooms_below() {
    let session = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/session");
    for (room, allowed) in SESSION_ROOMS {
        let files = match room {
            "roles" => vec![(
                session.join("roles.rs").display().to_string(),
                std::fs::read_to_string(session.join("roles.rs")).unwrap(),
            )],
            _ => sources(&format!("session/{room}")),
        };
        for (path, text) in files {
            for used in session_rooms_used(&code(&text), room == "roles") {
                assert!(
                    used == room || allowed.contains(&used.as_str()),
                    "{path}: session room `{room}` uses `{used}`, which is not below it"
                );
            }
        }
    }
}

#[test]
fn the_session_checker_sees_grouped_imports_and_reaches_out() {
    let used = session_rooms_used(
        "use crate::session::{sink::book, plan};\nlet x = crate::session::daemon::f();\nuse super::super::a;",
        false,
    );
    assert_eq!(
        used.into_iter().collect::<Vec<_>>(),
        ["daemon", "plan", "sink", "super::super"]
    );
    assert!(session_rooms_used("use super::sink::x;", true).contains("sink"));
    assert!(session_rooms_used("use super::sink::x;", false).is_empty());
}

#[test]
fn the_checker_sees_grouped_and_nested_imports() {
    let used = rooms_used(
        "use crate::{coord::x, cli};\nuse super::super::bench;\nlet a = crate::session::f();",
    );
    assert!(
        used.contains("cli") && used.contains("coord") && used.contains("session"),
        "{used:?}"
    );
    assert!(used.contains("super::super"));
}

fn has_unsafe(line: &str) -> bool {
    line.contains("unsafe {")
        || line.contains("unsafe{")
        || line.trim_start().starts_with("unsafe impl")
}

#[test]
fn unsafe_only_in_datapath_and_each_block_explained() {
    for room in ["cli", "http", "session", "bench", "protocol", "coord"] {
        for (path, text) in sources(room) {
            let c = code(&text);
            assert!(
                !c.lines().any(|l| has_unsafe(l) || l.contains("unsafe fn")),
                "{path}: `unsafe` outside datapath"
            );
        }
    }
    for (path, text) in sources("datapath") {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if !has_unsafe(&code(line)) {
                continue;
            }
            // Walk up to the nearest SAFETY comment; another unsafe block
            // on the way means this one has none of its own.
            let explained = lines[..i]
                .iter()
                .rev()
                .take(12)
                .find(|l| l.contains("SAFETY") || has_unsafe(&code(l)))
                .is_some_and(|l| l.contains("SAFETY"));
            assert!(
                explained,
                "{path}:{}: unsafe block without its own SAFETY comment",
                i + 1
            );
        }
    }
}

#[test]
fn anyhow_only_in_cli() {
    for room in ["http", "session", "bench", "datapath", "protocol", "coord"] {
        for (path, text) in sources(room) {
            assert!(
                !code(&text).contains("anyhow"),
                "{path}: anyhow outside cli"
            );
        }
    }
}

#[test]
fn pure_rooms_forbid_unsafe() {
    for room in ["protocol", "coord"] {
        let (_, m) = sources(room)
            .into_iter()
            .find(|(p, _)| p.ends_with("mod.rs"))
            .unwrap();
        assert!(
            m.contains("#![forbid(unsafe_code)]"),
            "{room} must forbid unsafe code"
        );
    }
}

#[test]
fn cargo_run_runs_urmove_as_the_readme_says() {
    // The README's first command is `cargo run --release -- demo`: with a
    // second binary (the delay line) cargo needs to be told which one.
    let manifest =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml")).unwrap();
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(readme.contains("cargo run --release -- demo"));
    let bins =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/src/bin")).map_or(0, |d| d.count());
    assert!(
        bins == 0
            || manifest
                .lines()
                .any(|l| l.trim() == "default-run = \"urmove\""),
        "src/bin has {bins} more binaries and Cargo.toml names no default-run"
    );
}
