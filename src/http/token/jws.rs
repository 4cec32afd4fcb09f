//! Compact JWS (RFC 7515) as WLCG tokens use it: a header naming an
//! asymmetric algorithm and a key id, the claims, a signature checked with
//! ring against a key from the issuer's JWKS (RFC 7517). RS256 and ES256
//! (which the profile requires), RS384, RS512 and ES384; `none` and the HMAC
//! algorithms are refused (the profile forbids shared-secret signatures).
//!
//! The token's text and its decoded parts never reach a `Debug` or an
//! error message: those show lengths and names only.

use std::fmt;

use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, URL_SAFE_NO_PAD};
use base64::engine::DecodePaddingMode;
use base64::{alphabet, Engine};
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};

/// The longest token read: WLCG tokens are a kilobyte or two.
pub const TOKEN_BYTES_MAX: usize = 16 * 1024;
/// The longest JWKS document read.
pub const JWKS_BYTES_MAX: usize = 1 << 20;

/// JWKS values are base64url; some issuers pad them.
const JWK_BASE64: GeneralPurpose = GeneralPurpose::new(
    &alphabet::URL_SAFE,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// A signature algorithm this side verifies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Rs384,
    Rs512,
    Es256,
    Es384,
}

impl Alg {
    fn parse(name: &str) -> Option<Alg> {
        Some(match name {
            "RS256" => Alg::Rs256,
            "RS384" => Alg::Rs384,
            "RS512" => Alg::Rs512,
            "ES256" => Alg::Es256,
            "ES384" => Alg::Es384,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Alg::Rs256 => "RS256",
            Alg::Rs384 => "RS384",
            Alg::Rs512 => "RS512",
            Alg::Es256 => "ES256",
            Alg::Es384 => "ES384",
        }
    }
}

/// Why a token is not a compact JWS this side accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwsError {
    #[error("token of {0} bytes is over the {TOKEN_BYTES_MAX}-byte limit")]
    TooLong(usize),
    #[error("token is not three base64url parts joined by dots")]
    Shape,
    #[error("token's {0} is not base64url")]
    Base64(&'static str),
    #[error("token's {0} is not the JSON object a JWT needs")]
    Json(&'static str),
    #[error("token is unsigned (alg none)")]
    Unsigned,
    #[error("token's alg {0} is a shared-secret (HMAC) one, refused")]
    Hmac(String),
    #[error("token's alg {0} is not one this endpoint verifies")]
    Alg(String),
    #[error("token's header has no kid")]
    NoKid,
    #[error("token's header has critical extensions (crit), not understood")]
    Crit,
}

/// A parsed compact JWS. It holds the token's parts, so its `Debug` shows
/// only the algorithm, the key id and lengths.
pub struct Jws<'t> {
    pub alg: Alg,
    pub kid: String,
    /// `header.payload`, the bytes the signature covers.
    signed: &'t str,
    /// The decoded claims (JSON).
    pub payload: Vec<u8>,
    signature: Vec<u8>,
}

impl fmt::Debug for Jws<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jws")
            .field("alg", &self.alg)
            .field("kid", &self.kid)
            .field("payload_len", &self.payload.len())
            .field("signature_len", &self.signature.len())
            .finish_non_exhaustive()
    }
}

#[derive(serde::Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
    crit: Option<serde_json::Value>,
}

/// Split and decode a compact JWS, checking its header (not its signature).
pub fn parse(token: &str) -> Result<Jws<'_>, JwsError> {
    if token.len() > TOKEN_BYTES_MAX {
        return Err(JwsError::TooLong(token.len()));
    }
    let mut parts = token.split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(JwsError::Shape);
    };
    if h.is_empty() || p.is_empty() {
        return Err(JwsError::Shape);
    }
    let header = URL_SAFE_NO_PAD
        .decode(h)
        .map_err(|_| JwsError::Base64("header"))?;
    let payload = URL_SAFE_NO_PAD
        .decode(p)
        .map_err(|_| JwsError::Base64("payload"))?;
    let signature = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| JwsError::Base64("signature"))?;
    let header: Header = serde_json::from_slice(&header).map_err(|_| JwsError::Json("header"))?;
    let alg = match header.alg.as_str() {
        "none" | "None" | "NONE" => return Err(JwsError::Unsigned),
        a if a.starts_with("HS") => return Err(JwsError::Hmac(super::printable(a))),
        a => Alg::parse(a).ok_or_else(|| JwsError::Alg(super::printable(a)))?,
    };
    if header.crit.is_some() {
        return Err(JwsError::Crit);
    }
    let kid = header.kid.ok_or(JwsError::NoKid)?;
    Ok(Jws {
        alg,
        kid,
        signed: &token[..h.len() + 1 + p.len()],
        payload,
        signature,
    })
}

/// An elliptic curve of a JWK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Curve {
    P256,
    P384,
}

impl Curve {
    fn coordinate_len(self) -> usize {
        match self {
            Curve::P256 => 32,
            Curve::P384 => 48,
        }
    }
}

/// A public key from a JWKS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// Modulus and exponent, big-endian without leading zeros.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// The uncompressed point 0x04 || x || y.
    Ec { curve: Curve, point: Vec<u8> },
}

/// One signing key of an issuer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Jwk {
    pub kid: String,
    /// The algorithm the JWKS pins the key to, if it does.
    pub alg: Option<Alg>,
    pub key: PublicKey,
}

/// Why a signature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    #[error("key {kid} is {have}, the token is signed {want}")]
    KeyType {
        kid: String,
        have: &'static str,
        want: &'static str,
    },
    #[error("bad signature (key {0})")]
    Signature(String),
}

impl Jwk {
    /// Check `jws`'s signature with this key.
    pub fn verify(&self, jws: &Jws<'_>) -> Result<(), VerifyError> {
        let mismatch = |have| VerifyError::KeyType {
            kid: super::printable(&self.kid),
            have,
            want: jws.alg.name(),
        };
        if let Some(pinned) = self.alg {
            if pinned != jws.alg {
                return Err(mismatch(pinned.name()));
            }
        }
        let msg = jws.signed.as_bytes();
        let sig = jws.signature.as_slice();
        let checked = match (&self.key, jws.alg) {
            (PublicKey::Rsa { n, e }, Alg::Rs256 | Alg::Rs384 | Alg::Rs512) => {
                let params = match jws.alg {
                    Alg::Rs256 => &signature::RSA_PKCS1_2048_8192_SHA256,
                    Alg::Rs384 => &signature::RSA_PKCS1_2048_8192_SHA384,
                    _ => &signature::RSA_PKCS1_2048_8192_SHA512,
                };
                RsaPublicKeyComponents { n, e }.verify(params, msg, sig)
            }
            (PublicKey::Ec { curve, point }, Alg::Es256 | Alg::Es384) => {
                let algorithm = match (curve, jws.alg) {
                    (Curve::P256, Alg::Es256) => &signature::ECDSA_P256_SHA256_FIXED,
                    (Curve::P384, Alg::Es384) => &signature::ECDSA_P384_SHA384_FIXED,
                    (Curve::P256, _) => return Err(mismatch("EC P-256")),
                    (Curve::P384, _) => return Err(mismatch("EC P-384")),
                };
                UnparsedPublicKey::new(algorithm, point).verify(msg, sig)
            }
            (PublicKey::Rsa { .. }, _) => return Err(mismatch("RSA")),
            (PublicKey::Ec { .. }, _) => return Err(mismatch("EC")),
        };
        checked.map_err(|_| VerifyError::Signature(super::printable(&self.kid)))
    }
}

/// An issuer's signing keys.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySet {
    pub keys: Vec<Jwk>,
}

/// Why a JWKS document is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("JWKS of {0} bytes is over the limit")]
    TooLong(usize),
    #[error("JWKS is not a JSON object with a \"keys\" array")]
    Json,
    #[error("JWKS has no usable signing key (RSA, or EC P-256/P-384, each with a kid)")]
    NoKeys,
}

impl KeySet {
    /// Read a JWKS document: keys of kty RSA or EC (P-256, P-384) with a kid,
    /// `use` "sig" or absent. Other keys, and malformed ones, are skipped;
    /// a document with none left is refused.
    pub fn parse(json: &[u8]) -> Result<KeySet, JwksError> {
        if json.len() > JWKS_BYTES_MAX {
            return Err(JwksError::TooLong(json.len()));
        }
        #[derive(serde::Deserialize)]
        struct Doc {
            keys: Vec<serde_json::Value>,
        }
        let doc: Doc = serde_json::from_slice(json).map_err(|_| JwksError::Json)?;
        let keys: Vec<Jwk> = doc.keys.iter().filter_map(jwk).collect();
        if keys.is_empty() {
            return Err(JwksError::NoKeys);
        }
        Ok(KeySet { keys })
    }

    pub fn find(&self, kid: &str) -> Option<&Jwk> {
        self.keys.iter().find(|k| k.kid == kid)
    }
}

/// One JWK, if it is a signing key this side can use.
fn jwk(v: &serde_json::Value) -> Option<Jwk> {
    let field = |name: &str| v.get(name).and_then(|x| x.as_str());
    let bytes = |name: &str| JWK_BASE64.decode(field(name)?).ok();
    if field("use").is_some_and(|u| u != "sig") {
        return None;
    }
    let kid = field("kid")?.to_string();
    let alg = match field("alg") {
        Some(a) => Some(Alg::parse(a)?),
        None => None,
    };
    let key = match field("kty")? {
        "RSA" => {
            let n = strip_zeros(bytes("n")?);
            let e = strip_zeros(bytes("e")?);
            if n.is_empty() || e.is_empty() {
                return None;
            }
            PublicKey::Rsa { n, e }
        }
        "EC" => {
            let curve = match field("crv")? {
                "P-256" => Curve::P256,
                "P-384" => Curve::P384,
                _ => return None,
            };
            let (x, y) = (bytes("x")?, bytes("y")?);
            let len = curve.coordinate_len();
            if x.len() != len || y.len() != len {
                return None;
            }
            let mut point = Vec::with_capacity(1 + 2 * len);
            point.push(4);
            point.extend_from_slice(&x);
            point.extend_from_slice(&y);
            PublicKey::Ec { curve, point }
        }
        _ => return None,
    };
    Some(Jwk { kid, alg, key })
}

fn strip_zeros(mut b: Vec<u8>) -> Vec<u8> {
    let zeros = b.iter().take_while(|&&x| x == 0).count();
    b.drain(..zeros);
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn ec_key() -> (EcdsaKeyPair, Jwk) {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let point = pair.public_key().as_ref().to_vec();
        let jwk = Jwk {
            kid: "k1".into(),
            alg: None,
            key: PublicKey::Ec {
                curve: Curve::P256,
                point,
            },
        };
        (pair, jwk)
    }

    fn sign(pair: &EcdsaKeyPair, header: &str, payload: &str) -> String {
        let signed = format!("{}.{}", b64(header.as_bytes()), b64(payload.as_bytes()));
        let sig = pair.sign(&SystemRandom::new(), signed.as_bytes()).unwrap();
        format!("{signed}.{}", b64(sig.as_ref()))
    }

    #[test]
    fn an_es256_token_verifies_and_a_changed_one_does_not() {
        let (pair, jwk) = ec_key();
        let token = sign(&pair, r#"{"alg":"ES256","kid":"k1"}"#, r#"{"sub":"a"}"#);
        let jws = parse(&token).unwrap();
        assert_eq!(jws.payload, br#"{"sub":"a"}"#);
        jwk.verify(&jws).unwrap();
        let parts: Vec<&str> = token.split('.').collect();
        let forged = format!("{}.{}.{}", parts[0], b64(br#"{"sub":"b"}"#), parts[2]);
        assert!(matches!(
            jwk.verify(&parse(&forged).unwrap()),
            Err(VerifyError::Signature(_))
        ));
        let (_, other) = ec_key();
        assert!(other.verify(&jws).is_err());
        let pinned = Jwk {
            alg: Some(Alg::Es384),
            ..jwk.clone()
        };
        assert!(matches!(
            pinned.verify(&jws),
            Err(VerifyError::KeyType { .. })
        ));
    }

    #[test]
    fn unsigned_hmac_and_unknown_algorithms_are_refused() {
        let tok = |h: &str| format!("{}.{}.", b64(h.as_bytes()), b64(b"{}"));
        assert_eq!(
            parse(&tok(r#"{"alg":"none","kid":"k"}"#)).unwrap_err(),
            JwsError::Unsigned
        );
        assert!(matches!(
            parse(&tok(r#"{"alg":"HS256","kid":"k"}"#)),
            Err(JwsError::Hmac(_))
        ));
        assert!(matches!(
            parse(&tok(r#"{"alg":"PS256","kid":"k"}"#)),
            Err(JwsError::Alg(_))
        ));
        assert_eq!(
            parse(&tok(r#"{"alg":"ES256"}"#)).unwrap_err(),
            JwsError::NoKid
        );
        assert_eq!(
            parse(&tok(r#"{"alg":"ES256","kid":"k","crit":["b64"]}"#)).unwrap_err(),
            JwsError::Crit
        );
    }

    #[test]
    fn malformed_tokens_are_refused() {
        let h = b64(br#"{"alg":"ES256","kid":"k"}"#);
        let p = b64(b"{}");
        assert_eq!(parse("abc").unwrap_err(), JwsError::Shape);
        assert_eq!(parse(&format!("{h}.{p}")).unwrap_err(), JwsError::Shape);
        assert_eq!(
            parse(&format!("{h}.{p}.AA.AA")).unwrap_err(),
            JwsError::Shape
        );
        assert_eq!(parse(&format!(".{p}.AA")).unwrap_err(), JwsError::Shape);
        assert_eq!(
            parse(&format!("{h}.{p}=.AA")).unwrap_err(),
            JwsError::Base64("payload")
        );
        assert_eq!(
            parse(&format!("{h}.{p}.A+")).unwrap_err(),
            JwsError::Base64("signature")
        );
        assert_eq!(
            parse(&format!("{}.{p}.AA", b64(b"[1]"))).unwrap_err(),
            JwsError::Json("header")
        );
        let long = format!("{h}.{}.AA", "A".repeat(TOKEN_BYTES_MAX));
        assert!(matches!(parse(&long), Err(JwsError::TooLong(_))));
    }

    #[test]
    fn a_jwks_keeps_usable_signing_keys_only() {
        let (pair, _) = ec_key();
        let point = pair.public_key().as_ref();
        let (x, y) = (b64(&point[1..33]), b64(&point[33..]));
        let doc = format!(
            r#"{{"keys":[
            {{"kty":"EC","crv":"P-256","kid":"ec","x":"{x}","y":"{y}","use":"sig"}},
            {{"kty":"EC","crv":"P-256","kid":"enc","x":"{x}","y":"{y}","use":"enc"}},
            {{"kty":"EC","crv":"P-521","kid":"p521","x":"{x}","y":"{y}"}},
            {{"kty":"EC","crv":"P-256","x":"{x}","y":"{y}"}},
            {{"kty":"RSA","kid":"rsa","n":"AAE=","e":"AQAB","alg":"RS256"}},
            {{"kty":"RSA","kid":"bad","n":"!!","e":"AQAB"}},
            {{"kty":"oct","kid":"hmac","k":"AAAA"}}
            ]}}"#
        );
        let set = KeySet::parse(doc.as_bytes()).unwrap();
        let kids: Vec<&str> = set.keys.iter().map(|k| k.kid.as_str()).collect();
        assert_eq!(kids, ["ec", "rsa"]);
        assert_eq!(
            set.find("rsa").unwrap().key,
            PublicKey::Rsa {
                n: vec![1],
                e: vec![1, 0, 1]
            }
        );
        assert!(set.find("enc").is_none());
        assert_eq!(
            KeySet::parse(br#"{"keys":[]}"#).unwrap_err(),
            JwksError::NoKeys
        );
        assert_eq!(KeySet::parse(b"[]").unwrap_err(), JwksError::Json);
    }

    #[test]
    fn debug_of_a_parsed_token_shows_no_part_of_it() {
        let (pair, _) = ec_key();
        let token = sign(
            &pair,
            r#"{"alg":"ES256","kid":"k1"}"#,
            r#"{"sub":"secret-sub"}"#,
        );
        let shown = format!("{:?}", parse(&token).unwrap());
        for part in token.split('.') {
            assert!(!shown.contains(part), "{shown}");
        }
        assert!(!shown.contains("secret-sub"));
    }
}
