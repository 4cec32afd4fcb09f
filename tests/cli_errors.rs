//! Bad input gets one clear line and the right exit code, never a panic.

use crate::util::{run, stderr};

fn one_line_error(o: &std::process::Output, code: i32, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        lines.iter().any(|l| l.contains(needle)),
        "expected '{needle}' in: {err}"
    );
}

#[test]
fn bad_size_unit() {
    let o = run(&["bench", "--disk", "/var/tmp", "--size", "12Q"]);
    one_line_error(&o, 2, "unknown size unit 'Q'");
}

#[test]
fn bad_rate_and_duration() {
    one_line_error(
        &run(&["bench", "--disk", "/var/tmp", "--min-rate", "fast"]),
        2,
        "does not start with a number",
    );
    one_line_error(
        &run(&["bench", "--disk", "/var/tmp", "--time", "2 weeks"]),
        2,
        "unknown duration unit",
    );
}

#[test]
fn missing_directory() {
    let o = run(&[
        "bench",
        "--disk",
        "/nonexistent-urmove/dir/x",
        "--size",
        "1M",
    ]);
    one_line_error(&o, 2, "/nonexistent-urmove/dir");
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}

#[test]
fn misaligned_block_size_is_refused_under_o_direct() {
    let o = run(&[
        "bench", "--disk", "/var/tmp", "--size", "1M", "--bs", "1000", "--direct", "required",
    ]);
    one_line_error(&o, 2, "not a multiple of the direct I/O alignment");
}

#[test]
fn no_mode_flag_means_usage_error() {
    let o = run(&["bench", "/var/tmp"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn help_mentions_every_option_the_issue_names() {
    let o = run(&["bench", "--help"]);
    assert!(o.status.success());
    let h = String::from_utf8_lossy(&o.stdout);
    for opt in [
        "--mode",
        "--mix",
        "--bs",
        "--size",
        "--qd",
        "--time",
        "--ramp",
        "--interval",
        "--units",
        "--direct",
        "--fsync",
        "--verify",
        "--keep",
        "--zeros",
        "--destroy",
        "--min-rate",
        "--window",
        "--sweep",
        "--csv",
        "--json",
        "--json-stream",
    ] {
        assert!(h.contains(opt), "--help lacks {opt}");
    }
}

#[test]
fn machines_get_one_json_document_even_on_errors() {
    let o = run(&["bench", "--disk", "/nonexistent-urmove/x", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    let v = crate::util::json(&o);
    assert_eq!(v["status"], "error");
    assert!(v["error"].as_str().unwrap().contains("/nonexistent-urmove"));

    let o = run(&[
        "bench",
        "--disk",
        "/var/tmp",
        "--bs",
        "32",
        "--verify",
        "--direct",
        "off",
        "--json-stream",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let out = crate::util::stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["type"], "summary");
    assert!(v["error"].as_str().unwrap().contains("at least 64 bytes"));
}
