//! `urmove recv --http` driven by the real clients (issue 37): gfal2's
//! tools for the WebDAV subset and the checksums, curl for exact requests
//! and refusals, WLCG tokens minted for real. Every byte is compared.

use std::fs;

use crate::endpoint::{curl, Endpoint};
use crate::gfal::Gfal;
use crate::pki::Pki;
use crate::tokens::{bearer, Key, TestIssuer, AUDIENCE};
use crate::util::noise;
use crate::xrootd::adler32;

/// A PKI, an issuer, an endpoint trusting it, and a token for everything.
pub struct Site {
    pub pki: Pki,
    pub issuer: TestIssuer,
    pub endpoint: Endpoint,
    pub token: String,
    /// The issuers file every endpoint of the site trusts.
    pub issuers: std::path::PathBuf,
}

/// The scopes of a token that may do everything beneath the root.
pub const ALL: &str = "storage.read:/ storage.create:/ storage.modify:/";

impl Site {
    pub fn new() -> Site {
        let pki = Pki::new();
        let issuer = TestIssuer::new(&pki.dir, "site", false).expect("an issuer");
        let issuers = issuer.write_issuers(&pki.dir, "/");
        let endpoint = Endpoint::start(&pki, &issuers);
        let token = issuer.mint(&issuer.claims(ALL), Key::Ec);
        Site {
            pki,
            issuer,
            endpoint,
            token,
            issuers,
        }
    }

    /// gfal with the token, told not to ask for macaroons.
    pub fn gfal(&self) -> Gfal {
        assert!(
            crate::gfal::missing().is_none(),
            "{:?}",
            crate::gfal::missing()
        );
        Gfal::new(&self.pki).token(&self.token)
    }

    /// curl with `token`.
    pub fn curl_as(&self, token: &str, args: &[&str]) -> (u16, String) {
        let auth = format!("Authorization: {}", bearer(token));
        let mut all = vec!["-H", auth.as_str()];
        all.extend_from_slice(args);
        curl(&self.pki, &all)
    }
}

#[test]
fn gfal_uploads_lists_stats_sums_downloads_and_removes() {
    let site = Site::new();
    let e = &site.endpoint;
    let g = site.gfal();
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = noise(5 << 20, 37);
    let local = work.path().join("five");
    fs::write(&local, &data).unwrap();
    let local_url = format!("file://{}", local.display());

    let r = g.run("gfal-mkdir", &["-p", &e.davs("a/b/c")]);
    assert!(r.ok(), "{r:?}");
    assert!(e.path("a/b/c").is_dir());
    let r = g.run(
        "gfal-copy",
        &["-K", "adler32", &local_url, &e.davs("a/b/c/five")],
    );
    assert!(r.ok(), "{r:?}");
    assert_eq!(fs::read(e.path("a/b/c/five")).unwrap(), data);

    let r = g.run("gfal-ls", &["-l", &e.davs("a/b/c")]);
    assert!(
        r.ok() && r.stdout.contains("five") && r.stdout.contains(&data.len().to_string()),
        "{r:?}"
    );
    let r = g.run("gfal-stat", &[&e.davs("a/b/c/five")]);
    assert!(
        r.ok() && r.stdout.contains(&format!("Size: {}", data.len())),
        "{r:?}"
    );
    let r = g.run("gfal-stat", &[&e.davs("a/b/nothing")]);
    assert_eq!(r.code, 2, "{r:?}");

    let r = g.run("gfal-sum", &[&e.davs("a/b/c/five"), "ADLER32"]);
    assert!(
        r.stdout.contains(&format!("{:08x}", adler32(&data))),
        "{r:?}"
    );
    let md5 = {
        use md5::Digest;
        let d = md5::Md5::digest(&data);
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let r = g.run("gfal-sum", &[&e.davs("a/b/c/five"), "MD5"]);
    assert!(r.stdout.contains(&md5), "{r:?}");
    let crc = crc32c::crc32c(&data).to_be_bytes();
    let r = g.run("gfal-sum", &[&e.davs("a/b/c/five"), "CRC32C"]);
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(crc);
    assert!(r.stdout.contains(&b64), "{r:?}");

    let back = work.path().join("back");
    let r = g.run(
        "gfal-copy",
        &[&e.davs("a/b/c/five"), &format!("file://{}", back.display())],
    );
    assert!(r.ok(), "{r:?}");
    assert_eq!(fs::read(&back).unwrap(), data);

    let r = g.run("gfal-rm", &["-r", &e.davs("a")]);
    assert!(r.ok(), "{r:?}");
    assert!(!e.path("a").exists(), "gfal-rm -r left {:?}", e.listing());
    // One access-log line per request, never the token.
    let log = e.log_with("PUT /a/b/c/five 201");
    assert!(log.contains("PUT /a/b/c/five 201"), "{log}");
    assert!(!log.contains(&site.token), "the token reached the log");
}

#[test]
fn ranges_heads_and_digests_answer_as_curl_asks() {
    let site = Site::new();
    let e = &site.endpoint;
    let data = noise(3 << 20, 5);
    fs::write(e.path("f"), &data).unwrap();
    let out = e.dir().join("range");
    let o = out.to_str().unwrap();
    let (code, _) = site.curl_as(&site.token, &["-r", "1000-1999", "-o", o, &e.https("f")]);
    assert_eq!(code, 206);
    assert_eq!(fs::read(&out).unwrap(), &data[1000..2000]);
    let (code, head) = site.curl_as(
        &site.token,
        &[
            "-I",
            "-H",
            "Want-Digest: adler32",
            "-H",
            "Want-Repr-Digest: crc32c=5",
            &e.https("f"),
        ],
    );
    assert_eq!(code, 200);
    let lower = head.to_ascii_lowercase();
    assert!(
        lower.contains(&format!("digest: adler32={:08x}", adler32(&data))),
        "{head}"
    );
    assert!(lower.contains("repr-digest: crc32c=:"), "{head}");
    let (code, _) = site.curl_as(&site.token, &["-r", "4000000-", &e.https("f")]);
    assert_eq!(code, 416);
    let (code, body) = site.curl_as(
        &site.token,
        &["-X", "PROPFIND", "-H", "Depth: infinity", &e.https("/")],
    );
    assert_eq!(code, 403, "{body}");
}

#[test]
fn a_put_whose_checksum_disagrees_is_never_named() {
    let site = Site::new();
    let e = &site.endpoint;
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let data = noise(2 << 20, 9);
    let local = work.path().join("d");
    fs::write(&local, &data).unwrap();
    let lf = local.to_str().unwrap();
    let wrong = format!("Digest: adler32={:08x}", adler32(&data) ^ 1);
    let (code, body) = site.curl_as(&site.token, &["-T", lf, "-H", &wrong, &e.https("d")]);
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("checksum mismatch"), "{body}");
    assert!(e.listing().is_empty(), "{:?}", e.listing());
    let right = format!("Digest: adler32={:08x}", adler32(&data));
    let (code, _) = site.curl_as(&site.token, &["-T", lf, "-H", &right, &e.https("d")]);
    assert_eq!(code, 201);
    assert_eq!(fs::read(e.path("d")).unwrap(), data);
}

#[test]
fn tokens_with_the_wrong_scope_path_audience_issuer_or_time_write_nothing() {
    let site = Site::new();
    let e = &site.endpoint;
    let i = &site.issuer;
    let stranger = TestIssuer::new(&site.pki.dir, "stranger", false).unwrap();
    let work = tempfile::tempdir_in("/var/tmp").unwrap();
    let local = work.path().join("x");
    fs::write(&local, noise(100_000, 3)).unwrap();
    let lf = local.to_str().unwrap();
    let with = |scope: &str, change: &dyn Fn(&mut serde_json::Value)| {
        let mut c = i.claims(scope);
        change(&mut c);
        i.mint(&c, Key::Ec)
    };
    let same = |_: &mut serde_json::Value| {};
    let cases: Vec<(&str, String, u16)> = vec![
        ("read-only scope", with("storage.read:/", &same), 403),
        ("another path", with("storage.create:/other", &same), 403),
        (
            "a path that only shares a prefix",
            with("storage.create:/dat", &same),
            403,
        ),
        (
            "another audience",
            with(ALL, &|c| c["aud"] = "https://elsewhere.test".into()),
            401,
        ),
        (
            "another issuer",
            stranger.mint(&stranger.claims(ALL), Key::Ec),
            401,
        ),
        (
            "expired",
            with(ALL, &|c| {
                c["exp"] = (crate::tokens::now_secs() - 120).into()
            }),
            401,
        ),
        ("no token", String::new(), 401),
    ];
    for (what, token, status) in cases {
        let (code, body) = if token.is_empty() {
            curl(&site.pki, &["-T", lf, &e.https("data/x")])
        } else {
            site.curl_as(&token, &["-T", lf, &e.https("data/x")])
        };
        assert_eq!(code, status, "{what}: {body}");
        assert!(e.listing().is_empty(), "{what}: {:?}", e.listing());
        assert!(
            !e.log_text().contains(&token) || token.is_empty(),
            "{what}: token logged"
        );
    }
    let (code, _) = site.curl_as(
        &with("storage.create:/data", &same),
        &["-T", lf, &e.https("data/x")],
    );
    assert_eq!(code, 201);
    assert!(e.path("data/x").is_file());
}

#[test]
fn the_test_issuer_script_of_the_docs_makes_a_token_the_front_takes() {
    let pki = Pki::new();
    let dir = pki.dir.join("issuer");
    let o = std::process::Command::new(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test-token.sh"),
    )
    .arg(&dir)
    .arg(AUDIENCE)
    .arg("storage.read:/ storage.create:/in")
    .output()
    .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let token = String::from_utf8(o.stdout).unwrap().trim().to_string();
    let e = Endpoint::start(&pki, &dir.join("issuers.toml"));
    let auth = format!("Authorization: Bearer {token}");
    let f = pki.dir.join("f");
    fs::write(&f, b"hello").unwrap();
    let fs_ = f.to_str().unwrap();
    let (code, body) = curl(&pki, &["-H", &auth, "-T", fs_, &e.https("in/f")]);
    assert_eq!(code, 201, "{body}");
    let (code, _) = curl(&pki, &["-H", &auth, "-T", fs_, &e.https("elsewhere/f")]);
    assert_eq!(code, 403);
    assert_eq!(fs::read(e.path("in/f")).unwrap(), b"hello");
}
