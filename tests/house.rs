//! The size and type rules of conventions.md, checked on the source tree:
//! no file over about 900 lines but a codec's tables, no function over 100
//! lines but a codec's, no `Result<_, String>` below `cli`, and no
//! parameters packed into a tuple to slip under clippy's argument count.

use std::path::Path;

/// Files and functions that are a table: one entry per message kind, read
/// one entry at a time, not as a whole. The catalogue's declarations fit
/// the file rule; its test samples (one per message) do not fit the
/// function rule.
const CODEC_FILES: [&str; 0] = [];
const CODEC_FNS: [(&str, &str); 1] = [("src/protocol/catalogue/tests.rs", "samples")];
const FILE_LINES_MAX: usize = 900;
const FN_LINES_MAX: usize = 100;

/// Every `.rs` under `src/`, as (path relative to the crate, text).
fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out: Vec<(String, String)> = crate::util::rust_sources(&root.join("src"))
        .into_iter()
        .map(|(p, text)| (p.strip_prefix(root).unwrap().display().to_string(), text))
        .collect();
    assert!(out.len() > 50, "too few sources found: {}", out.len());
    out
}

/// The text with the insides of string and char literals and of comments
/// blanked (newlines kept), so braces and parentheses in them do not count.
fn blanked(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let blank = |out: &mut Vec<u8>, from: usize, to: usize| {
        for c in &mut out[from..to] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => {
                let end = text[i..].find('\n').map_or(b.len(), |n| i + n);
                blank(&mut out, i, end);
                i = end;
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let end = text[i + 2..].find("*/").map_or(b.len(), |n| i + 2 + n + 2);
                blank(&mut out, i, end);
                i = end;
            }
            b'r' if matches!(b.get(i + 1), Some(b'"' | b'#')) && !ident_before(b, i) => {
                let hashes = b[i + 1..].iter().take_while(|&&c| c == b'#').count();
                if b.get(i + 1 + hashes) != Some(&b'"') {
                    i += 1;
                    continue;
                }
                let close = format!("\"{}", "#".repeat(hashes));
                let start = i + 2 + hashes;
                let end = text[start..].find(&close).map_or(b.len(), |n| start + n);
                blank(&mut out, start, end);
                i = end + close.len();
            }
            b'"' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'"' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                blank(&mut out, i + 1, j.min(b.len()));
                i = j + 1;
            }
            b'\'' => {
                // A char literal ('x', '\n', '\u{..}'), not a lifetime.
                let end = if b.get(i + 1) == Some(&b'\\') {
                    text[i + 2..].find('\'').map(|n| i + 2 + n)
                } else {
                    let c = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                    (b.get(i + 1 + c) == Some(&b'\'')).then_some(i + 1 + c)
                };
                match end {
                    Some(e) => {
                        blank(&mut out, i + 1, e);
                        i = e + 1;
                    }
                    None => i += 1,
                }
            }
            _ => i += 1,
        }
    }
    String::from_utf8(out).unwrap()
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// A function: its name, the line it starts on, its lines, and its
/// parameters' text.
struct Func {
    name: String,
    line: usize,
    lines: usize,
    params: String,
}

/// Every `fn` with a body in `code` (blanked).
fn functions(code: &str) -> Vec<Func> {
    let b = code.as_bytes();
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(n) = code[at..].find("fn ") {
        let start = at + n;
        at = start + 3;
        if ident_before(b, start) {
            continue;
        }
        let name: String = code[at..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(open) = code[at..].find('(').map(|n| at + n) else {
            break;
        };
        let close = matching(b, open, b'(', b')');
        // The body: the first `{` after the parameters, unless a `;` ends
        // the declaration first (a trait's method without a body).
        let rest = &code[close..];
        let (Some(brace), semi) = (rest.find('{'), rest.find(';')) else {
            continue;
        };
        if semi.is_some_and(|s| s < brace) {
            continue;
        }
        let body = close + brace;
        let end = matching(b, body, b'{', b'}');
        out.push(Func {
            name,
            line: code[..start].lines().count() + 1,
            lines: code[start..end].lines().count(),
            params: code[open + 1..close].to_string(),
        });
    }
    out
}

/// The index just past the `close` that matches the `open` at `at`.
fn matching(b: &[u8], at: usize, open: u8, close: u8) -> usize {
    let mut depth = 0;
    for (i, &c) in b.iter().enumerate().skip(at) {
        if c == open {
            depth += 1;
        } else if c == close {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
    }
    b.len()
}

/// The parameters, split at commas outside brackets.
fn params(text: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    let mut prev = ' ';
    for c in text.chars() {
        match c {
            '(' | '[' | '<' => depth += 1,
            ')' | ']' => depth -= 1,
            '>' if prev != '-' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                prev = c;
                continue;
            }
            _ => {}
        }
        cur.push(c);
        prev = c;
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|p| !p.is_empty())
        .collect()
}

/// Whether a parameter is a tuple: its pattern destructures one, or its
/// type is one (or a reference to one).
fn packed(param: &str) -> bool {
    let Some((pattern, ty)) = param.split_once(':') else {
        return false;
    };
    let ty = ty.trim();
    let ty = ty.strip_prefix('&').unwrap_or(ty).trim_start();
    let ty = match ty.strip_prefix('\'') {
        Some(t) => t.split_once(' ').map_or("", |(_, r)| r),
        None => ty,
    };
    let ty = ty.strip_prefix("mut ").unwrap_or(ty).trim_start();
    // `&(dyn Fn(u8) + Sync)` is a trait object in parentheses, not a tuple.
    let tuple =
        ty.starts_with('(') && ty != "()" && !ty.starts_with("(dyn ") && !ty.starts_with("(impl ");
    pattern.trim().starts_with('(') || tuple
}

#[test]
fn no_file_is_over_900_lines_but_a_codec_table() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter(|(p, t)| t.lines().count() > FILE_LINES_MAX && !CODEC_FILES.contains(&p.as_str()))
        .map(|(p, t)| format!("{p}: {} lines", t.lines().count()))
        .collect();
    assert!(
        long.is_empty(),
        "files over {FILE_LINES_MAX} lines (one concept a file):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_function_is_over_100_lines_but_a_codec() {
    let mut long = Vec::new();
    for (path, text) in sources() {
        for f in functions(&blanked(&text)) {
            if f.lines > FN_LINES_MAX && !CODEC_FNS.contains(&(path.as_str(), f.name.as_str())) {
                long.push(format!("{path}:{} {}: {} lines", f.line, f.name, f.lines));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over {FN_LINES_MAX} lines (named steps, conventions.md):\n{}",
        long.join("\n")
    );
}

#[test]
fn no_string_errors_below_cli() {
    let mut found = Vec::new();
    for (path, text) in sources() {
        if path.starts_with("src/cli/") || path.starts_with("src/bin/") {
            continue;
        }
        let code = blanked(&text)
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ");
        for (i, _) in code.match_indices("Result<") {
            let end = matching(code.as_bytes(), i + 6, b'<', b'>');
            let args = &code[i + 7..end - 1];
            let args = params(args);
            if args.len() == 2 && args[1] == "String" {
                found.push(format!("{path}: {}", &code[i..end]));
            }
        }
    }
    assert!(
        found.is_empty(),
        "Result<_, String> below cli (a typed error says what failed):\n{}",
        found.join("\n")
    );
}

#[test]
fn no_parameters_are_packed_into_tuples() {
    let mut found = Vec::new();
    for (path, text) in sources() {
        for f in functions(&blanked(&text)) {
            for p in params(&f.params).into_iter().filter(|p| packed(p)) {
                found.push(format!("{path}:{} {}: {p}", f.line, f.name));
            }
        }
    }
    assert!(
        found.is_empty(),
        "parameters packed into tuples (a named struct says what travels together):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_checkers_see_what_they_look_for() {
    let code = blanked(
        "fn a((x, y): (u8, u8), z: &'a (u8, u8), w: [(u8, u8); 2]) -> () { let s = \"{\"; let c = '}'; }\nfn b<'a>(v: &'a mut (u8, u16), f: &dyn Fn(u8) -> u8, g: &(dyn Fn() + Sync)) {}",
    );
    let fs = functions(&code);
    assert_eq!(
        fs.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
        ["a", "b"]
    );
    let packed_a: Vec<_> = params(&fs[0].params)
        .into_iter()
        .filter(|p| packed(p))
        .collect();
    assert_eq!(packed_a, ["(x, y): (u8, u8)", "z: &'a (u8, u8)"]);
    let packed_b: Vec<_> = params(&fs[1].params)
        .into_iter()
        .filter(|p| packed(p))
        .collect();
    assert_eq!(packed_b, ["v: &'a mut (u8, u16)"]);
    assert_eq!(fs[0].lines, 1);
    assert_eq!(params("a: Result<u8, String>, b: u8").len(), 2);
}
