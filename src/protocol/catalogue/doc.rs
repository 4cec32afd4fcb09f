//! The tables of `docs/internals/protocol.md`, rendered from the
//! declarations: each sits between `<!-- catalogue:NAME -->` and
//! `<!-- end catalogue:NAME -->`, and a test holds the file to them.

use super::versions::{came_with, RELEASES};
use super::{
    Bit, MessageDef, DIRECTIONS, ERROR_CODES, FRAME_FLAGS, LIMITS, MESSAGES, PROTOCOL_NEWEST,
};
use super::{PROTOCOL_OLDEST, REQUEST_FLAGS};

/// A generated block: the name in its markers, and its text.
#[derive(Debug)]
pub struct Block {
    pub name: &'static str,
    pub text: String,
}

/// Every generated block, in the order the document has them.
pub fn render_blocks() -> Vec<Block> {
    let block = |name, text| Block { name, text };
    vec![
        block("messages", messages()),
        block("request-flags", bits(REQUEST_FLAGS, "flag", true)),
        block("frame-flags", bits(FRAME_FLAGS, "flag", true)),
        block("error-codes", bits(ERROR_CODES, "code", false)),
        block("directions", bits(DIRECTIONS, "direction", false)),
        block("limits", bits(LIMITS, "limit", false)),
        block("versions", versions()),
    ]
}

/// A table cell: `|` escaped, lines joined.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn fields(d: &MessageDef) -> String {
    if d.fields.is_empty() {
        return "—".into();
    }
    let one = |f: &super::FieldDef| {
        let since = if f.since > d.since {
            format!(" (since {})", f.since)
        } else {
            String::new()
        };
        format!("`{}` {}{since}", f.name, (f.wire)())
    };
    let checks = d.checks.iter().map(|c| format!("; checked by `{c}`"));
    let text = d.fields.iter().map(one).collect::<Vec<_>>().join("; ");
    cell(&(text + &checks.collect::<String>()))
}

fn messages() -> String {
    let mut out = String::from(
        "| kind | message | since | from | fields (little-endian, in order) | what it says |\n\
         |--:|---|--:|---|---|---|\n",
    );
    for d in MESSAGES {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            d.kind,
            d.name,
            d.since,
            d.from.name(),
            fields(d),
            cell(d.doc)
        );
    }
    out
}

fn bits(table: &[Bit], what: &str, hex: bool) -> String {
    let mut out = format!("| value | {what} | since | meaning |\n|--:|---|--:|---|\n");
    for b in table {
        let value = if hex {
            format!("{:#x}", b.value)
        } else {
            b.value.to_string()
        };
        out += &format!(
            "| {value} | `{}` | {} | {} |\n",
            b.name,
            b.since,
            cell(b.doc)
        );
    }
    out
}

fn versions() -> String {
    let mut out = format!(
        "This build speaks protocols {PROTOCOL_OLDEST} to {PROTOCOL_NEWEST}. \
         What each version brought, from the declarations:\n\n"
    );
    for v in 1..=PROTOCOL_NEWEST {
        let brought = came_with(v);
        let release = RELEASES
            .iter()
            .find(|r| r.protocol == v)
            .map_or(String::new(), |r| format!(" (release {})", r.name));
        let brought = if brought.is_empty() {
            "no message, field or value of its own (a field's form changed: see below)".to_string()
        } else {
            brought.join("; ")
        };
        out += &format!("- **{v}**{release}: {brought}\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "docs/internals/protocol.md";

    /// The text between `<!-- catalogue:NAME -->` and its end marker.
    fn section(text: &str, name: &str) -> Option<(usize, usize)> {
        let open = format!("<!-- catalogue:{name} -->\n");
        let close = format!("<!-- end catalogue:{name} -->");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&close)?;
        Some((start, end))
    }

    #[test]
    fn the_protocol_document_has_the_catalogues_tables() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(DOC);
        let mut text = std::fs::read_to_string(&path).unwrap();
        let bless = std::env::var_os("URMOVE_BLESS").is_some();
        let mut wrong = Vec::new();
        for b in render_blocks() {
            let Some((start, end)) = section(&text, b.name) else {
                wrong.push(format!(
                    "{DOC} has no block {0}: add\n<!-- catalogue:{0} -->\n{1}<!-- end catalogue:{0} -->",
                    b.name, b.text
                ));
                continue;
            };
            if text[start..end] != b.text {
                if bless {
                    text.replace_range(start..end, &b.text);
                } else {
                    wrong.push(format!(
                        "{DOC}: block {} differs from the catalogue; paste this between its markers \
                         (or run with URMOVE_BLESS=1):\n{}",
                        b.name, b.text
                    ));
                }
            }
        }
        if bless {
            std::fs::write(&path, &text).unwrap();
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
    }

    #[test]
    fn cells_hold_no_bare_pipes_or_newlines() {
        assert_eq!(cell("u8 0|1\n and more"), "u8 0\\|1 and more");
    }
}
