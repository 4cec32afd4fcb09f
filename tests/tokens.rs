//! WLCG bearer tokens for the HTTP front's tests: `TestIssuer` makes real
//! keys (ES256 with ring, RS256 from `openssl genpkey`), writes its JWKS and
//! an issuers file `recv` reads, and mints signed tokens with the claims a
//! test chooses. The tests here drive `http::token::Authorizer` through those
//! files as `recv` would, one refusal class at a time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, RsaKeyPair, RsaPublicKeyComponents, ECDSA_P256_SHA256_FIXED_SIGNING,
    RSA_PKCS1_SHA256,
};
use serde_json::{json, Value};
use urmove::http::token::{Authorizer, Fetcher, Op, Refusal, TokenConfig};
use urmove::http::HttpError;

/// The audience the tests' endpoint answers to.
pub const AUDIENCE: &str = "https://dtn.test:8443";
/// The WLCG profile's audience for every relying party.
pub const ANY_AUDIENCE: &str = "https://wlcg.cern.ch/jwt/v1/any";

/// A directory under /var/tmp/token, removed when dropped.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let dir = PathBuf::from(format!("/var/tmp/token/{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Seconds since the epoch, now.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Which of an issuer's keys signs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    /// ES256 with the issuer's P-256 key, kid "ec-1".
    Ec,
    /// RS256 with the issuer's 2048-bit RSA key, kid "rsa-1".
    Rsa,
}

/// A token issuer with real keys, its JWKS written to `jwks_path`.
pub struct TestIssuer {
    pub iss: String,
    pub jwks_path: PathBuf,
    ec: EcdsaKeyPair,
    rsa: Option<RsaKeyPair>,
}

impl TestIssuer {
    /// An issuer `iss` with an ES256 key, and an RS256 one when `with_rsa`
    /// (made by `openssl genpkey`; None when openssl cannot run), its JWKS
    /// written into `dir` as `<name>.jwks`.
    pub fn new(dir: &Path, name: &str, with_rsa: bool) -> Option<TestIssuer> {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let ec = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let rsa = if with_rsa {
            Some(rsa_key(&dir.join(format!("{name}.rsa.der")))?)
        } else {
            None
        };
        let issuer = TestIssuer {
            iss: format!("https://{name}.issuer.test"),
            jwks_path: dir.join(format!("{name}.jwks")),
            ec,
            rsa,
        };
        std::fs::write(&issuer.jwks_path, issuer.jwks().to_string()).unwrap();
        Some(issuer)
    }

    /// The issuer's public keys as a JWKS document.
    pub fn jwks(&self) -> Value {
        let p = self.ec.public_key().as_ref();
        let mut keys = vec![json!({
            "kty": "EC", "crv": "P-256", "kid": "ec-1", "use": "sig", "alg": "ES256",
            "x": b64(&p[1..33]), "y": b64(&p[33..]),
        })];
        if let Some(rsa) = &self.rsa {
            let c: RsaPublicKeyComponents<Vec<u8>> = rsa.public().into();
            keys.push(json!({
                "kty": "RSA", "kid": "rsa-1", "use": "sig", "n": b64(&c.n), "e": b64(&c.e),
            }));
        }
        json!({ "keys": keys })
    }

    /// This issuer's `[[issuer]]` entry for an issuers file; with `jwks_file`
    /// false the keys are to be fetched.
    pub fn entry(&self, base_path: &str, jwks_file: bool) -> String {
        let mut e = format!(
            "[[issuer]]\niss = \"{}\"\nbase_path = \"{base_path}\"\n",
            self.iss
        );
        if jwks_file {
            e.push_str(&format!("jwks = \"{}\"\n", self.jwks_path.display()));
        }
        e
    }

    /// An issuers file at `dir/issuers.toml` trusting this issuer alone
    /// (its JWKS file, scope paths from `base_path`) for `AUDIENCE`.
    pub fn write_issuers(&self, dir: &Path, base_path: &str) -> PathBuf {
        write_issuers(dir, &[AUDIENCE], &[self.entry(base_path, true)])
    }

    /// Good claims for `scope`: this issuer, `AUDIENCE`, valid for ten
    /// minutes from now. Change any member before minting.
    pub fn claims(&self, scope: &str) -> Value {
        let now = now_secs();
        json!({
            "iss": self.iss, "sub": "test-user", "aud": AUDIENCE, "scope": scope,
            "exp": now + 600, "iat": now - 5, "nbf": now - 5,
            "jti": format!("jti-{now}"), "wlcg.ver": "1.0",
        })
    }

    /// `claims` signed with `key` (kid "ec-1" or "rsa-1").
    pub fn mint(&self, claims: &Value, key: Key) -> String {
        let (alg, kid) = match key {
            Key::Ec => ("ES256", "ec-1"),
            Key::Rsa => ("RS256", "rsa-1"),
        };
        self.sign(&json!({"alg": alg, "kid": kid, "typ": "JWT"}), claims, key)
    }

    /// `claims` under any `header`, signed with `key` (the header is not
    /// checked against the key: tests make mismatches on purpose).
    pub fn sign(&self, header: &Value, claims: &Value, key: Key) -> String {
        let signed = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let sig = match key {
            Key::Ec => self
                .ec
                .sign(&rng, signed.as_bytes())
                .unwrap()
                .as_ref()
                .to_vec(),
            Key::Rsa => {
                let rsa = self.rsa.as_ref().expect("this issuer has no RSA key");
                let mut sig = vec![0; rsa.public().modulus_len()];
                rsa.sign(&RSA_PKCS1_SHA256, &rng, signed.as_bytes(), &mut sig)
                    .unwrap();
                sig
            }
        };
        format!("{signed}.{}", b64(&sig))
    }
}

/// A 2048-bit RSA key from `openssl genpkey`, kept at `path` (its DER
/// output is PKCS#1 RSAPrivateKey).
fn rsa_key(path: &Path) -> Option<RsaKeyPair> {
    let out = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "RSA",
            "-pkeyopt",
            "rsa_keygen_bits:2048",
        ])
        .args(["-outform", "DER", "-out"])
        .arg(path)
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "openssl genpkey: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(RsaKeyPair::from_der(&std::fs::read(path).unwrap()).unwrap())
}

/// An issuers file at `dir/issuers.toml` with `audiences` and the issuers'
/// `entries` (from [`TestIssuer::entry`]).
pub fn write_issuers(dir: &Path, audiences: &[&str], entries: &[String]) -> PathBuf {
    let auds: Vec<String> = audiences.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!("audiences = [{}]\n{}", auds.join(", "), entries.join(""));
    let path = dir.join("issuers.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A token with `alg: none` and no signature.
pub fn unsigned(claims: &Value) -> String {
    let header = json!({"alg": "none", "kid": "ec-1"});
    format!(
        "{}.{}.",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    )
}

/// `Bearer <token>`.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// An Authorizer from the issuers file, as recv builds it (no fetcher).
fn authorizer(issuers: &Path) -> Authorizer {
    Authorizer::new(TokenConfig::load(issuers).unwrap(), None).unwrap()
}

fn refusal(auth: &Authorizer, token: &str, op: Op, path: &str) -> Refusal {
    match auth.check(Some(&bearer(token)), op, path, SystemTime::now()) {
        Ok(g) => panic!("{op:?} {path} allowed by {}", g.scope),
        Err(e) => {
            assert!(!e.reason.contains(token), "{}", e.reason);
            e.refusal
        }
    }
}

#[test]
fn scopes_allow_their_operations_beneath_their_paths_only() {
    let dir = Scratch::new("scopes");
    let issuer = TestIssuer::new(dir.path(), "vo", false).unwrap();
    let auth = authorizer(&issuer.write_issuers(dir.path(), "/vo"));
    let token = issuer.mint(
        &issuer.claims("storage.read:/data storage.create:/up storage.modify:/own"),
        Key::Ec,
    );
    let h = bearer(&token);
    let allowed = |op, path| auth.check(Some(&h), op, path, SystemTime::now());
    let g = allowed(Op::Read, "/vo/data/run1/f.root").unwrap();
    assert_eq!(
        (g.subject.as_str(), g.scope.as_str()),
        ("test-user", "storage.read:/data")
    );
    assert_eq!(g.issuer, issuer.iss);
    assert_eq!(
        allowed(Op::Create, "/vo/up/new").unwrap().scope,
        "storage.create:/up"
    );
    assert_eq!(
        allowed(Op::CreateDir, "/vo/up/d").unwrap().scope,
        "storage.create:/up"
    );
    assert_eq!(
        allowed(Op::Modify, "/vo/own/f").unwrap().scope,
        "storage.modify:/own"
    );
    assert_eq!(
        allowed(Op::Create, "/vo/own/f").unwrap().scope,
        "storage.modify:/own"
    );
    assert_eq!(
        allowed(Op::Stat, "/vo/up/new").unwrap().scope,
        "storage.create:/up"
    );
    for (op, path) in [
        // The wrong scope for the operation.
        (Op::Create, "/vo/data/f"),
        (Op::Modify, "/vo/up/f"),
        (Op::Read, "/vo/up/f"),
        // The wrong path.
        (Op::Read, "/vo/other/f"),
        (Op::Read, "/data/f"),
        // A prefix of a name is not its directory.
        (Op::Read, "/vo/database"),
        (Op::Create, "/vo/upload/f"),
        (Op::Read, "/vo/data/../own/f"),
    ] {
        assert_eq!(
            refusal(&auth, &token, op, path),
            Refusal::Insufficient,
            "{op:?} {path}"
        );
    }
    let e = auth
        .check(Some(&h), Op::Modify, "/vo/up/f", SystemTime::now())
        .unwrap_err();
    assert_eq!(
        (e.status(), e.www_authenticate()),
        (403, Some("Bearer error=\"insufficient_scope\""))
    );
}

#[test]
fn a_scope_on_a_covers_a_and_beneath_but_not_ab() {
    let dir = Scratch::new("prefix");
    let issuer = TestIssuer::new(dir.path(), "vo", false).unwrap();
    let auth = authorizer(&issuer.write_issuers(dir.path(), "/"));
    let token = issuer.mint(&issuer.claims("storage.read:/a"), Key::Ec);
    let read = |path| auth.check(Some(&bearer(&token)), Op::Read, path, SystemTime::now());
    assert!(read("/a").is_ok());
    assert!(read("/a/b").is_ok());
    assert!(read("/a/b/c").is_ok());
    assert_eq!(read("/ab").unwrap_err().refusal, Refusal::Insufficient);
    assert_eq!(read("/ab/c").unwrap_err().refusal, Refusal::Insufficient);
}

#[test]
fn the_wrong_audience_or_issuer_is_invalid_token() {
    let dir = Scratch::new("aud");
    let issuer = TestIssuer::new(dir.path(), "vo", false).unwrap();
    let stranger = TestIssuer::new(dir.path(), "stranger", false).unwrap();
    let auth = authorizer(&issuer.write_issuers(dir.path(), "/"));
    let mut c = issuer.claims("storage.read:/");
    c["aud"] = json!(["https://other-dtn.test", "https://dtn.test"]);
    assert_eq!(
        refusal(&auth, &issuer.mint(&c, Key::Ec), Op::Read, "/f"),
        Refusal::WrongAudience
    );
    c["aud"] = json!(["https://other-dtn.test", ANY_AUDIENCE]);
    let any = issuer.mint(&c, Key::Ec);
    assert!(auth
        .check(Some(&bearer(&any)), Op::Read, "/f", SystemTime::now())
        .is_ok());
    // A stranger's token, and one claiming our issuer signed by the stranger.
    let theirs = stranger.mint(&stranger.claims("storage.read:/"), Key::Ec);
    assert_eq!(
        refusal(&auth, &theirs, Op::Read, "/f"),
        Refusal::UnknownIssuer
    );
    let forged = stranger.mint(&issuer.claims("storage.read:/"), Key::Ec);
    assert_eq!(
        refusal(&auth, &forged, Op::Read, "/f"),
        Refusal::BadSignature
    );
    let e = auth
        .check(Some(&bearer(&theirs)), Op::Read, "/f", SystemTime::now())
        .unwrap_err();
    assert_eq!(
        (e.status(), e.www_authenticate()),
        (401, Some("Bearer error=\"invalid_token\""))
    );
    assert!(e.reason.contains("stranger.issuer.test"), "{}", e.reason);
}

#[test]
fn expired_and_not_yet_valid_tokens_are_invalid() {
    let dir = Scratch::new("times");
    let issuer = TestIssuer::new(dir.path(), "vo", false).unwrap();
    let auth = authorizer(&issuer.write_issuers(dir.path(), "/"));
    let now = now_secs();
    let mut c = issuer.claims("storage.read:/");
    c["exp"] = json!(now - 1);
    assert_eq!(
        refusal(&auth, &issuer.mint(&c, Key::Ec), Op::Read, "/f"),
        Refusal::Expired
    );
    let mut c = issuer.claims("storage.read:/");
    c["nbf"] = json!(now + 300);
    assert_eq!(
        refusal(&auth, &issuer.mint(&c, Key::Ec), Op::Read, "/f"),
        Refusal::NotYetValid
    );
    // Within the minute of skew a fresh token from a fast clock passes.
    c["nbf"] = json!(now + 30);
    c["iat"] = json!(now + 30);
    let fast = issuer.mint(&c, Key::Ec);
    assert!(auth
        .check(Some(&bearer(&fast)), Op::Read, "/f", SystemTime::now())
        .is_ok());
    // The same token later than its exp.
    let later = SystemTime::now() + Duration::from_secs(601);
    let e = auth
        .check(Some(&bearer(&fast)), Op::Read, "/f", later)
        .unwrap_err();
    assert_eq!(e.refusal, Refusal::Expired);
}

#[test]
fn tampered_unsigned_and_mislabelled_tokens_are_refused() {
    let dir = Scratch::new("tamper");
    let issuer = TestIssuer::new(dir.path(), "vo", false).unwrap();
    let auth = authorizer(&issuer.write_issuers(dir.path(), "/"));
    let token = issuer.mint(&issuer.claims("storage.read:/a"), Key::Ec);
    let parts: Vec<&str> = token.split('.').collect();
    let wider = b64(issuer.claims("storage.modify:/").to_string().as_bytes());
    let tampered = format!("{}.{wider}.{}", parts[0], parts[2]);
    assert_eq!(
        refusal(&auth, &tampered, Op::Modify, "/f"),
        Refusal::BadSignature
    );
    let none = unsigned(&issuer.claims("storage.modify:/"));
    assert_eq!(refusal(&auth, &none, Op::Read, "/a"), Refusal::Malformed);
    let hs = issuer.sign(
        &json!({"alg": "HS256", "kid": "ec-1"}),
        &issuer.claims("storage.read:/"),
        Key::Ec,
    );
    assert_eq!(refusal(&auth, &hs, Op::Read, "/a"), Refusal::Malformed);
    let unknown = issuer.sign(
        &json!({"alg": "ES256", "kid": "ec-9"}),
        &issuer.claims("storage.read:/"),
        Key::Ec,
    );
    assert_eq!(
        refusal(&auth, &unknown, Op::Read, "/a"),
        Refusal::UnknownKey
    );
    let big = issuer.mint(
        &issuer.claims(&format!("storage.read:/{}", "a".repeat(17_000))),
        Key::Ec,
    );
    assert_eq!(refusal(&auth, &big, Op::Read, "/a"), Refusal::Malformed);
    let mut c = issuer.claims("storage.read");
    assert_eq!(
        refusal(&auth, &issuer.mint(&c, Key::Ec), Op::Read, "/a"),
        Refusal::BadClaims
    );
    c["scope"] = json!("storage.read:/a");
    c["wlcg.ver"] = json!("2.0");
    assert_eq!(
        refusal(&auth, &issuer.mint(&c, Key::Ec), Op::Read, "/a"),
        Refusal::BadClaims
    );
}

#[test]
fn rsa_and_ec_keys_both_verify() {
    let dir = Scratch::new("rsa");
    crate::require!(crate::util::have("openssl"), "openssl is not installed");
    let issuer = TestIssuer::new(dir.path(), "vo", true).unwrap();
    let auth = authorizer(&issuer.write_issuers(dir.path(), "/"));
    for key in [Key::Ec, Key::Rsa] {
        let token = issuer.mint(&issuer.claims("storage.read:/"), key);
        let g = auth.check(Some(&bearer(&token)), Op::Read, "/f", SystemTime::now());
        assert_eq!(g.unwrap().subject, "test-user", "{key:?}");
    }
    // An RS256 header over an EC signature, and an ES256 one naming the RSA key.
    let c = issuer.claims("storage.read:/");
    let t = issuer.sign(&json!({"alg": "RS256", "kid": "rsa-1"}), &c, Key::Ec);
    assert_eq!(refusal(&auth, &t, Op::Read, "/f"), Refusal::BadSignature);
    let t = issuer.sign(&json!({"alg": "ES256", "kid": "rsa-1"}), &c, Key::Ec);
    assert_eq!(refusal(&auth, &t, Op::Read, "/f"), Refusal::BadSignature);
}

#[test]
fn fetched_keys_are_fetched_once_and_an_unknown_kid_refetches_once() {
    let dir = Scratch::new("fetch");
    let issuer = TestIssuer::new(dir.path(), "vo", false).unwrap();
    let path = write_issuers(dir.path(), &[AUDIENCE], &[issuer.entry("/", false)]);
    let jwks_fetches = Arc::new(AtomicUsize::new(0));
    let (count, iss, jwks) = (
        jwks_fetches.clone(),
        issuer.iss.clone(),
        issuer.jwks().to_string(),
    );
    let fetch: Fetcher = Box::new(move |url: &str| {
        if url == format!("{iss}/.well-known/openid-configuration") {
            return Ok(json!({"issuer": iss, "jwks_uri": format!("{iss}/keys")})
                .to_string()
                .into_bytes());
        }
        if url == format!("{iss}/keys") {
            count.fetch_add(1, Ordering::SeqCst);
            return Ok(jwks.clone().into_bytes());
        }
        Err(HttpError::Malformed(format!("unexpected fetch {url}")))
    });
    let auth = Authorizer::new(TokenConfig::load(&path).unwrap(), Some(fetch)).unwrap();
    let good = issuer.mint(&issuer.claims("storage.read:/"), Key::Ec);
    for _ in 0..3 {
        auth.check(Some(&bearer(&good)), Op::Read, "/f", SystemTime::now())
            .unwrap();
    }
    assert_eq!(jwks_fetches.load(Ordering::SeqCst), 1);
    let t0 = SystemTime::now() + Duration::from_secs(120);
    let unknown = issuer.sign(
        &json!({"alg": "ES256", "kid": "new"}),
        &issuer.claims("storage.read:/"),
        Key::Ec,
    );
    for s in 0..5 {
        let e = auth
            .check(
                Some(&bearer(&unknown)),
                Op::Read,
                "/f",
                t0 + Duration::from_secs(s),
            )
            .unwrap_err();
        assert_eq!(e.refusal, Refusal::UnknownKey);
    }
    assert_eq!(jwks_fetches.load(Ordering::SeqCst), 2);
    assert_eq!(auth.fetch_count(&issuer.iss), 2);
}

#[test]
fn two_issuers_each_keep_to_their_base_path() {
    let dir = Scratch::new("two");
    let atlas = TestIssuer::new(dir.path(), "atlas", false).unwrap();
    let cms = TestIssuer::new(dir.path(), "cms", false).unwrap();
    let entries = [atlas.entry("/atlas", true), cms.entry("/cms", true)];
    let auth = authorizer(&write_issuers(dir.path(), &[AUDIENCE], &entries));
    let a = atlas.mint(&atlas.claims("storage.modify:/"), Key::Ec);
    let c = cms.mint(&cms.claims("storage.modify:/"), Key::Ec);
    let now = SystemTime::now();
    assert!(auth
        .check(Some(&bearer(&a)), Op::Modify, "/atlas/f", now)
        .is_ok());
    assert!(auth
        .check(Some(&bearer(&c)), Op::Modify, "/cms/f", now)
        .is_ok());
    assert_eq!(
        refusal(&auth, &a, Op::Modify, "/cms/f"),
        Refusal::Insufficient
    );
    assert_eq!(
        refusal(&auth, &c, Op::Read, "/atlas/f"),
        Refusal::Insufficient
    );
}
