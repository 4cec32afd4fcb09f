//! The Authorizer end to end with a key made here: the Authorization header,
//! the refusal classes, the key cache, and that no token text escapes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

use super::*;

const ISS: &str = "https://issuer.test";
const AUD: &str = "https://dtn.test";
const NOW: u64 = 1_800_000_000;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

struct Signer {
    pair: EcdsaKeyPair,
}

impl Signer {
    fn new() -> Signer {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        Signer { pair }
    }

    fn jwks(&self, kid: &str) -> String {
        let p = self.pair.public_key().as_ref();
        let b = |x: &[u8]| URL_SAFE_NO_PAD.encode(x);
        format!(
            r#"{{"keys":[{{"kty":"EC","crv":"P-256","kid":"{kid}","x":"{}","y":"{}"}}]}}"#,
            b(&p[1..33]),
            b(&p[33..])
        )
    }

    /// A token signed with key `kid`; `scope` and the issuer vary.
    fn token(&self, kid: &str, iss: &str, scope: &str) -> String {
        let header = format!(r#"{{"alg":"ES256","kid":"{kid}","typ":"JWT"}}"#);
        let claims = serde_json::json!({
            "iss": iss, "sub": "user-7", "aud": AUD, "exp": NOW + 600, "iat": NOW - 5,
            "jti": "jti-1", "wlcg.ver": "1.0", "scope": scope,
        });
        let b = |x: &[u8]| URL_SAFE_NO_PAD.encode(x);
        let signed = format!(
            "{}.{}",
            b(header.as_bytes()),
            b(claims.to_string().as_bytes())
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), signed.as_bytes())
            .unwrap();
        format!("{signed}.{}", b(sig.as_ref()))
    }
}

/// An authorizer whose one issuer's keys are fetched from `jwks` (which the
/// test may change), counting the JWKS fetches; a `None` JWKS fails.
struct Fixture {
    auth: Authorizer,
    jwks: Arc<std::sync::Mutex<Option<String>>>,
    fetched: Arc<AtomicUsize>,
}

fn fixture(base_path: &str, jwks: Option<String>) -> Fixture {
    let text = format!(
        "audiences = [\"{AUD}\"]\n[[issuer]]\niss = \"{ISS}\"\nbase_path = \"{base_path}\"\n"
    );
    let config = TokenConfig::parse(&text, std::path::Path::new("/")).unwrap();
    let jwks = Arc::new(std::sync::Mutex::new(jwks));
    let fetched = Arc::new(AtomicUsize::new(0));
    let (served, count) = (jwks.clone(), fetched.clone());
    let fetch: Fetcher = Box::new(move |url: &str| {
        if url == "https://issuer.test/.well-known/openid-configuration" {
            let doc = r#"{"issuer":"https://issuer.test","jwks_uri":"https://issuer.test/jwks"}"#;
            return Ok(doc.as_bytes().to_vec());
        }
        assert_eq!(url, "https://issuer.test/jwks");
        count.fetch_add(1, Ordering::SeqCst);
        match served.lock().unwrap().clone() {
            Some(doc) => Ok(doc.into_bytes()),
            None => Err(HttpError::Status {
                url: url.into(),
                status: 502,
                reason: "Bad Gateway".into(),
            }),
        }
    });
    let auth = Authorizer::new(config, Some(fetch)).unwrap();
    Fixture {
        auth,
        jwks,
        fetched,
    }
}

fn bearer_of(token: &str) -> String {
    format!("Bearer {token}")
}

#[test]
fn the_header_is_read_as_rfc_6750_says() {
    let s = Signer::new();
    let f = fixture("/", Some(s.jwks("k1")));
    let check = |h: Option<&str>| f.auth.check(h, Op::Read, "/f", at(NOW));
    let e = check(None).unwrap_err();
    assert_eq!((e.status(), e.www_authenticate()), (401, Some("Bearer")));
    assert_eq!(
        check(Some("Basic dXNlcjpwdw==")).unwrap_err().refusal,
        Refusal::NoToken
    );
    for bad in [
        "Bearer",
        "Bearer ",
        "Bearer a b",
        "Bearer a\"b",
        "Bearer ===",
    ] {
        let e = check(Some(bad)).unwrap_err();
        assert_eq!(e.refusal, Refusal::BadRequest, "{bad}");
        assert_eq!(
            e.www_authenticate(),
            Some("Bearer error=\"invalid_request\"")
        );
        assert_eq!(e.status(), 400);
    }
    let token = s.token("k1", ISS, "storage.read:/");
    let g = check(Some(&format!("bearer   {token} "))).unwrap();
    assert_eq!(g.subject, "user-7");
    assert_eq!(g.scope, "storage.read:/");
    assert_eq!(g.jti.as_deref(), Some("jti-1"));
    assert_eq!(g.expires_at, (NOW + 600) as i64);
    assert_eq!(g.token_id, token_id(&token));
}

#[test]
fn the_base_path_roots_the_scopes() {
    let s = Signer::new();
    let f = fixture("/vo", Some(s.jwks("k1")));
    let h = bearer_of(&s.token("k1", ISS, "storage.read:/ storage.create:/up"));
    let check = |op, path| f.auth.check(Some(&h), op, path, at(NOW));
    assert!(check(Op::Read, "/vo/f").is_ok());
    assert!(check(Op::Read, "/vo").is_ok());
    assert!(check(Op::Create, "/vo/up/new").is_ok());
    assert!(check(Op::CreateDir, "/vo").is_ok());
    for (op, path) in [
        (Op::Read, "/f"),
        (Op::Read, "/vox/f"),
        (Op::Create, "/up/new"),
        (Op::Create, "/vo/f"),
        (Op::Read, "/vo/../etc/passwd"),
        (Op::CreateDir, "/"),
    ] {
        let e = check(op, path).unwrap_err();
        assert_eq!(e.refusal, Refusal::Insufficient, "{op:?} {path}");
        assert_eq!(e.status(), 403);
        assert_eq!(
            e.www_authenticate(),
            Some("Bearer error=\"insufficient_scope\"")
        );
        assert!(e.reason.contains("user-7"), "{}", e.reason);
    }
}

#[test]
fn keys_are_fetched_once_then_cached_and_refetched_at_most_once_a_minute() {
    let s = Signer::new();
    let f = fixture("/", Some(s.jwks("k1")));
    let good = bearer_of(&s.token("k1", ISS, "storage.read:/"));
    let check = |h: &str, secs| f.auth.check(Some(h), Op::Read, "/f", at(secs));
    check(&good, NOW).unwrap();
    check(&good, NOW + 30).unwrap();
    assert_eq!(f.fetched.load(Ordering::SeqCst), 1);
    // A key the cache lacks: one refetch, then none for a minute.
    let other = bearer_of(&s.token("k2", ISS, "storage.read:/"));
    assert_eq!(
        check(&other, NOW + 70).unwrap_err().refusal,
        Refusal::UnknownKey
    );
    assert_eq!(
        check(&other, NOW + 71).unwrap_err().refusal,
        Refusal::UnknownKey
    );
    assert_eq!(
        check(&other, NOW + 129).unwrap_err().refusal,
        Refusal::UnknownKey
    );
    assert_eq!(f.fetched.load(Ordering::SeqCst), 2);
    // The issuer rotates to k2: found at the next allowed refetch.
    *f.jwks.lock().unwrap() = Some(s.jwks("k2"));
    check(&other, NOW + 131).unwrap();
    assert_eq!(f.fetched.load(Ordering::SeqCst), 3);
    assert_eq!(f.auth.fetch_count(ISS), 3);
}

#[test]
fn stale_keys_serve_while_the_issuer_is_down_for_up_to_a_day() {
    let s = Signer::new();
    let f = fixture("/", Some(s.jwks("k1")));
    let good = bearer_of(&s.token("k1", ISS, "storage.read:/"));
    // The token's own times would refuse it later: check the keys by the key error.
    f.auth.check(Some(&good), Op::Read, "/f", at(NOW)).unwrap();
    *f.jwks.lock().unwrap() = None;
    let later = |secs| {
        f.auth
            .check(Some(&good), Op::Read, "/f", at(secs))
            .unwrap_err()
    };
    // An hour on: refresh fails, the day-old keys still verify (then exp refuses).
    assert_eq!(later(NOW + 3700).refusal, Refusal::Expired);
    assert_eq!(f.fetched.load(Ordering::SeqCst), 2);
    let e = later(NOW + 90_000);
    assert_eq!(e.refusal, Refusal::KeysUnavailable, "{}", e.reason);
    assert_eq!((e.status(), e.www_authenticate()), (503, None));
    assert!(e.reason.contains("502"), "{}", e.reason);
}

#[test]
fn an_issuer_without_a_jwks_file_needs_a_fetcher() {
    let text = format!("audiences = [\"{AUD}\"]\n[[issuer]]\niss = \"{ISS}\"\n");
    let config = TokenConfig::parse(&text, std::path::Path::new("/")).unwrap();
    let e = Authorizer::new(config, None).unwrap_err().to_string();
    assert!(e.contains("jwks"), "{e}");
}

#[test]
fn no_debug_display_or_refusal_shows_the_token() {
    let s = Signer::new();
    let f = fixture("/", Some(s.jwks("k1")));
    let token = s.token("k1", ISS, "storage.read:/a");
    let parts: Vec<&str> = token.split('.').collect();
    let tampered = format!("{}.{}x.{}", parts[0], parts[1], parts[2]);
    let h = bearer_of(&token);
    let mut shown = vec![
        format!("{:?}", f.auth),
        format!("{:?}", jws::parse(&token).unwrap()),
        format!(
            "{:?}",
            f.auth.check(Some(&h), Op::Read, "/a/f", at(NOW)).unwrap()
        ),
    ];
    let cases = [
        (h.clone(), Op::Read, "/b", NOW),
        (h.clone(), Op::Read, "/a", NOW + 600),
        (h.clone(), Op::Modify, "/a", NOW),
        (bearer_of(&tampered), Op::Read, "/a", NOW),
        (bearer_of(&s.token("k9", ISS, "x")), Op::Read, "/a", NOW),
        (
            bearer_of(&s.token("k1", "https://evil.test", "x")),
            Op::Read,
            "/a",
            NOW,
        ),
        (format!("Bearer {token} extra"), Op::Read, "/a", NOW),
    ];
    for (header, op, path, secs) in cases {
        let e = f.auth.check(Some(&header), op, path, at(secs)).unwrap_err();
        shown.push(format!("{e:?}"));
        shown.push(e.to_string());
    }
    for text in &shown {
        assert!(!text.contains(&token), "{text}");
        for part in &parts {
            assert!(!text.contains(part), "{text}");
        }
    }
}

#[test]
fn a_token_id_is_eight_hex_digits_of_its_hash() {
    let id = token_id("abc").to_string();
    // SHA-256("abc") = ba7816bf...
    assert_eq!(id, "ba7816bf");
    assert_ne!(token_id("abd"), token_id("abc"));
}

#[test]
fn values_from_tokens_are_escaped_and_cut_for_logs() {
    assert_eq!(printable("a\nb\u{1b}"), "a\\nb\\u{1b}");
    let long = "x".repeat(500);
    assert_eq!(printable(&long).len(), SHOWN_CHARS_MAX + 3);
}

#[test]
fn every_one_character_change_and_truncation_of_a_token_is_refused() {
    let s = Signer::new();
    let f = fixture("/", Some(s.jwks("k1")));
    let token = s.token("k1", ISS, "storage.read:/");
    let check = |t: &str| f.auth.check(Some(&bearer_of(t)), Op::Read, "/f", at(NOW));
    check(&token).unwrap();
    for i in 0..token.len() {
        let mut changed = token.clone().into_bytes();
        changed[i] = if changed[i] == b'A' { b'B' } else { b'A' };
        let changed = String::from_utf8(changed).unwrap();
        assert!(check(&changed).is_err(), "byte {i} changed");
        assert!(check(&token[..i]).is_err(), "cut at {i}");
    }
}

#[test]
fn concurrent_first_requests_share_one_fetch() {
    fn shared<T: Send + Sync>(_: &T) {}
    let s = Signer::new();
    let f = fixture("/", Some(s.jwks("k1")));
    shared(&f.auth);
    let h = bearer_of(&s.token("k1", ISS, "storage.read:/"));
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| f.auth.check(Some(&h), Op::Read, "/f", at(NOW)).unwrap());
        }
    });
    assert_eq!(f.fetched.load(Ordering::SeqCst), 1);
}
