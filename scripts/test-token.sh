#!/usr/bin/env bash
# A test WLCG token issuer for trying `urmove recv --http` (and for the
# benchmarks): an RSA key made with openssl, its JWKS, an issuers file that
# trusts it, and a signed RS256 token for AUDIENCE with SCOPE, valid for
# HOURS (default 12). Not for production: a real site's tokens come from its
# issuer (INDIGO IAM, CILogon, ...).
#
#   scripts/test-token.sh DIR AUDIENCE [SCOPE] [HOURS]
#     writes DIR/issuer.key, DIR/issuer.jwks, DIR/issuers.toml; prints the token
set -euo pipefail
dir=${1:?usage: test-token.sh DIR AUDIENCE [SCOPE] [HOURS]}
aud=${2:?usage: test-token.sh DIR AUDIENCE [SCOPE] [HOURS]}
scope=${3:-storage.read:/ storage.create:/ storage.modify:/}
hours=${4:-12}
iss=https://test-issuer.invalid
mkdir -p "$dir"
[ -f "$dir/issuer.key" ] || openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 \
    -out "$dir/issuer.key" 2>/dev/null
b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }
modulus=$(openssl rsa -in "$dir/issuer.key" -noout -modulus 2>/dev/null | cut -d= -f2)
n=$(python3 -c 'import base64, sys; print(base64.urlsafe_b64encode(bytes.fromhex(sys.argv[1])).decode().rstrip("="))' "$modulus")
printf '{"keys":[{"kty":"RSA","kid":"test-1","use":"sig","alg":"RS256","n":"%s","e":"AQAB"}]}\n' \
    "$n" > "$dir/issuer.jwks"
cat > "$dir/issuers.toml" <<TOML
audiences = ["$aud"]
[[issuer]]
iss = "$iss"
jwks = "$dir/issuer.jwks"
base_path = "/"
TOML
now=$(date +%s)
header=$(printf '{"alg":"RS256","kid":"test-1","typ":"JWT"}' | b64url)
claims=$(printf '{"iss":"%s","sub":"tester","aud":"%s","scope":"%s","iat":%d,"nbf":%d,"exp":%d,"wlcg.ver":"1.0"}' \
    "$iss" "$aud" "$scope" "$now" "$((now - 60))" "$((now + hours * 3600))" | b64url)
sig=$(printf '%s.%s' "$header" "$claims" | openssl dgst -sha256 -sign "$dir/issuer.key" | b64url)
printf '%s.%s.%s\n' "$header" "$claims" "$sig"
