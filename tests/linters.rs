//! The room rules of conventions.md, checked on the source tree: each room
//! uses only the rooms below it, `unsafe` lives only in `datapath`, `anyhow`
//! only in `cli`.

use std::path::Path;

fn sources(room: &str) -> Vec<(String, String)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(room);
    let mut out = Vec::new();
    let mut stack = vec![dir];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }
    assert!(!out.is_empty(), "room {room} has no sources");
    out
}

fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| {
        let t = l.trim_start();
        !t.starts_with("//")
    })
}

fn forbid(room: &str, needles: &[&str]) {
    for (path, text) in sources(room) {
        for line in code_lines(&text) {
            for n in needles {
                assert!(
                    !line.contains(n),
                    "{path}: room `{room}` must not use `{n}`: {line}"
                );
            }
        }
    }
}

#[test]
fn rooms_use_only_rooms_below() {
    let above_l3 = ["crate::cli", "urmove::cli"];
    let above_l2 = ["crate::session", "crate::bench", "super::super::bench"];
    let above_l1 = ["crate::datapath"];
    forbid("session", &above_l3);
    forbid("bench", &[&above_l3[..], &["crate::session"]].concat());
    forbid("datapath", &[&above_l3[..], &above_l2[..]].concat());
    forbid(
        "protocol",
        &[
            &above_l3[..],
            &above_l2[..],
            &above_l1[..],
            &["crate::coord"],
        ]
        .concat(),
    );
    forbid(
        "coord",
        &[
            &above_l3[..],
            &above_l2[..],
            &above_l1[..],
            &["crate::protocol"],
        ]
        .concat(),
    );
}

#[test]
fn unsafe_only_in_datapath_and_always_explained() {
    for room in ["cli", "session", "bench", "protocol", "coord"] {
        forbid(room, &["unsafe "]);
    }
    for (path, text) in sources("datapath") {
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains("unsafe {") || line.trim_start().starts_with("unsafe impl") {
                let window = &lines[i.saturating_sub(8)..=i];
                assert!(
                    window.iter().any(|l| l.contains("SAFETY")),
                    "{path}:{}: unsafe without a SAFETY comment",
                    i + 1
                );
            }
        }
    }
}

#[test]
fn anyhow_only_in_cli() {
    for room in ["session", "bench", "datapath", "protocol", "coord"] {
        forbid(room, &["anyhow"]);
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
