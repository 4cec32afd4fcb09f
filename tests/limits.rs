//! The daemon's limits under real attack shapes: real processes, real
//! sockets on loopback (other 127.0.0.0/8 addresses as other hosts), its
//! metrics scraped over HTTP and its log read line by line.

use std::time::Duration;

use crate::util::{output_within, stderr, urmove};

#[test]
fn bad_limits_are_refused_alike_from_the_command_line_and_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    assert!(urmove().arg("keygen").arg(&key).status().unwrap().success());
    let base = format!(
        "listen = \"127.0.0.1:0\"\nroot = \"{}\"\nkey_file = \"{}\"\n",
        dir.path().display(),
        key.display()
    );
    let conf = dir.path().join("urmove.toml");
    for (flag, key_name, bad, reason) in [
        (
            "--max-sessions",
            "max_sessions",
            "0",
            "max_sessions (--max-sessions) must be 1 to 1048576, not 0",
        ),
        (
            "--timeout",
            "timeout",
            "0",
            "timeout (--timeout) must be more than 0 s and at most 24h, not 0 s",
        ),
    ] {
        std::fs::write(&conf, &base).unwrap();
        let cli = output_within(
            {
                let mut c = urmove();
                c.arg("recv").arg("--config").arg(&conf).args([flag, bad]);
                c
            },
            Duration::from_secs(10),
        );
        assert_eq!(cli.status.code(), Some(2), "{flag} {bad}: {}", stderr(&cli));
        assert!(
            stderr(&cli).contains(&format!("error: {reason}")),
            "{}",
            stderr(&cli)
        );
        std::fs::write(&conf, format!("{base}{key_name} = {bad}\n")).unwrap();
        let file = output_within(
            {
                let mut c = urmove();
                c.arg("recv").arg("--config").arg(&conf);
                c
            },
            Duration::from_secs(10),
        );
        assert_eq!(file.status.code(), Some(2), "{key_name}: {}", stderr(&file));
        assert!(
            stderr(&file).contains(&format!("urmove.toml, line 4: {reason}")),
            "{}",
            stderr(&file)
        );
    }
}
