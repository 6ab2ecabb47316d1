//! JWT verification: HS256 from a shared secret, RS*/PS*/ES* from a JWKS.
//!
//! The algorithm comes from a fixed allow-list, never from the token alone:
//! HS256 only when a shared secret is configured (so an RSA public key can
//! never be used as an HMAC secret), the asymmetric ones only with a key of
//! the matching type from the JWKS, and `none` never (`jsonwebtoken` cannot
//! even parse it). `exp` is required; `nbf` is checked when present; `iss`
//! when configured. (`aud` depends on the route: the `Authenticator` checks
//! it.) A header with `crit` is refused: the gateway
//! understands no JWS extension (RFC 7515 section 4.1.11).
//!
//! The JWKS is held in an [`ArcSwap`], so verification takes no lock; a
//! background task reloads it periodically, and sooner when a token names a
//! key id it does not know (a rotated key), at most once per
//! `min(30s, refresh interval)`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, AlgorithmFamily, DecodingKey, Validation};
use serde_json::Value;
use tokio::sync::Notify;

use super::AuthError;
use crate::http_client::{self, HttpClient};

/// Algorithms accepted with a key from the JWKS.
const JWKS_ALGORITHMS: [Algorithm; 8] = [
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
];

/// Tokens longer than this are refused before any parsing.
const MAX_TOKEN_LEN: usize = 16 * 1024;

/// Bound on one JWKS fetch.
const JWKS_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

/// Early reloads (unknown `kid`) are at most this frequent.
const MAX_EARLY_RELOAD_INTERVAL: Duration = Duration::from_secs(30);

/// Where the JWKS comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum JwksSource {
    /// `file:/path`: a local JWKS document.
    File(PathBuf),
    /// `http(s)://...`: fetched with GET.
    Url(http::Uri),
}

impl JwksSource {
    /// Parses the `jwks` setting: `file:/path` or an `http(s)://` URL.
    pub fn parse(s: &str) -> Result<Self, AuthError> {
        if let Some(path) = s.strip_prefix("file:") {
            if path.is_empty() {
                return Err(AuthError::Config("jwks = \"file:\" needs a path".into()));
            }
            return Ok(JwksSource::File(PathBuf::from(path)));
        }
        if s.starts_with("http://") || s.starts_with("https://") {
            let uri: http::Uri = s.parse().map_err(|e| AuthError::Config(format!("jwks URL {s:?} is invalid: {e}")))?;
            return Ok(JwksSource::Url(uri));
        }
        Err(AuthError::Config(format!("jwks {s:?} must be \"file:/path\" or an http(s):// URL")))
    }
}

impl std::fmt::Display for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwksSource::File(p) => write!(f, "file:{}", p.display()),
            JwksSource::Url(u) => write!(f, "{u}"),
        }
    }
}

/// One verification key from the JWKS.
struct JwksKey {
    kid: Option<String>,
    /// The `alg` the JWK declares, if any: then only that one is accepted.
    alg: Option<Algorithm>,
    /// The algorithms this key's type and curve can verify.
    accepts: &'static [Algorithm],
    key: DecodingKey,
}

impl JwksKey {
    fn fits(&self, alg: Algorithm) -> bool {
        self.accepts.contains(&alg) && self.alg.is_none_or(|a| a == alg)
    }
}

/// The keys loaded from one JWKS document.
#[derive(Default)]
struct KeySet {
    keys: Vec<JwksKey>,
}

/// Parses a JWKS document, keeping the usable signature keys: RSA and EC
/// P-256/P-384 keys whose `use` (if given) is `sig` and whose `alg` (if
/// given) is on the allow-list. Symmetric keys in a JWKS are refused: a
/// JWKS is public.
fn parse_jwks(body: &[u8]) -> Result<KeySet, String> {
    let doc: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    let Some(entries) = doc.get("keys").and_then(Value::as_array) else {
        return Err("no \"keys\" array".into());
    };
    let mut keys = Vec::new();
    for entry in entries {
        let kid_shown = entry.get("kid").and_then(Value::as_str).unwrap_or("<none>").to_owned();
        let jwk: Jwk = match serde_json::from_value(entry.clone()) {
            Ok(j) => j,
            Err(e) => {
                tracing::debug!(kid = %kid_shown, error = %e, "skipping an unparsable JWK");
                continue;
            }
        };
        if matches!(jwk.common.public_key_use, Some(ref u) if *u != PublicKeyUse::Signature) {
            continue;
        }
        let accepts: &'static [Algorithm] = match &jwk.algorithm {
            AlgorithmParameters::RSA(_) => AlgorithmFamily::Rsa.algorithms(),
            AlgorithmParameters::EllipticCurve(p) => match p.curve {
                EllipticCurve::P256 => &[Algorithm::ES256],
                EllipticCurve::P384 => &[Algorithm::ES384],
                _ => continue,
            },
            _ => continue,
        };
        let alg = match jwk.common.key_algorithm {
            None => None,
            Some(ka) => match Algorithm::try_from(ka) {
                Ok(a) if JWKS_ALGORITHMS.contains(&a) && accepts.contains(&a) => Some(a),
                _ => {
                    tracing::debug!(kid = %kid_shown, "skipping a JWK whose alg is not allowed");
                    continue;
                }
            },
        };
        let key = match DecodingKey::from_jwk(&jwk) {
            Ok(k) => k,
            Err(e) => {
                tracing::debug!(kid = %kid_shown, error = %e, "skipping an unusable JWK");
                continue;
            }
        };
        keys.push(JwksKey { kid: jwk.common.key_id.clone(), alg, accepts, key });
    }
    if keys.is_empty() {
        return Err("no usable signature keys (RSA or EC P-256/P-384)".into());
    }
    Ok(KeySet { keys })
}

async fn load_jwks(source: &JwksSource, client: &HttpClient) -> Result<KeySet, String> {
    let body: bytes::Bytes = match source {
        JwksSource::File(path) => {
            tokio::fs::read(path).await.map_err(|e| format!("cannot read the file: {}", e.kind()))?.into()
        }
        JwksSource::Url(uri) => {
            let accept = (http::header::ACCEPT, http::HeaderValue::from_static("application/json"));
            let (status, body) = http_client::get(client, uri.clone(), vec![accept], JWKS_FETCH_TIMEOUT).await?;
            if status != http::StatusCode::OK {
                return Err(format!("HTTP {status}"));
            }
            body
        }
    };
    parse_jwks(&body)
}

/// A loaded JWKS and the task that keeps it fresh.
struct Jwks {
    source: JwksSource,
    keys: Arc<ArcSwap<KeySet>>,
    reload_now: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Jwks {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Jwks {
    async fn start(source: JwksSource, refresh: Duration) -> Result<Self, AuthError> {
        let client = http_client::build(JWKS_FETCH_TIMEOUT).map_err(AuthError::Config)?;
        let initial = load_jwks(&source, &client)
            .await
            .map_err(|reason| AuthError::Jwks { location: source.to_string(), reason })?;
        tracing::info!(jwks = %source, keys = initial.keys.len(), "JWKS loaded");
        let keys = Arc::new(ArcSwap::from_pointee(initial));
        let reload_now = Arc::new(Notify::new());
        let task = tokio::spawn(refresh_loop(source.clone(), client, keys.clone(), reload_now.clone(), refresh));
        Ok(Self { source, keys, reload_now, task })
    }
}

async fn refresh_loop(
    source: JwksSource,
    client: HttpClient,
    keys: Arc<ArcSwap<KeySet>>,
    reload_now: Arc<Notify>,
    refresh: Duration,
) {
    let min_gap = refresh.min(MAX_EARLY_RELOAD_INTERVAL);
    let mut last = Instant::now();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(refresh.saturating_sub(last.elapsed())) => {}
            _ = reload_now.notified() => {
                // An unknown kid: reload soon, but never hammer the issuer.
                tokio::time::sleep(min_gap.saturating_sub(last.elapsed())).await;
            }
        }
        last = Instant::now();
        match load_jwks(&source, &client).await {
            Ok(set) => {
                tracing::debug!(jwks = %source, keys = set.keys.len(), "JWKS reloaded");
                keys.store(Arc::new(set));
            }
            Err(reason) => {
                tracing::warn!(jwks = %source, %reason, "JWKS reload failed; keeping the previous keys");
            }
        }
    }
}

/// What the verifier needs from `[auth]`.
pub(crate) struct JwtSettings {
    pub hs256: Option<DecodingKey>,
    pub jwks: Option<(JwksSource, Duration)>,
    pub issuer: Option<String>,
    pub leeway: Duration,
    pub user_id_claim: String,
}

/// Verifies JWTs; cheap and lock-free per call.
pub(crate) struct JwtVerifier {
    hs256: Option<DecodingKey>,
    hs256_validation: Validation,
    jwks: Option<Jwks>,
    jwks_validations: Vec<(Algorithm, Validation)>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    leeway: u64,
    user_id_claim: String,
}

impl std::fmt::Debug for JwtVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwtVerifier")
            .field("hs256", &self.hs256.is_some())
            .field("jwks", &self.jwks.as_ref().map(|j| j.source.to_string()))
            .field("user_id_claim", &self.user_id_claim)
            .finish_non_exhaustive()
    }
}

/// The verified claims and the user id taken from them.
pub(crate) struct Verified {
    pub user_id: String,
    pub claims: Value,
}

impl JwtVerifier {
    pub(crate) async fn new(s: JwtSettings) -> Result<Self, AuthError> {
        let validation = |alg: Algorithm| {
            let mut v = Validation::new(alg);
            // A configured iss must be present, not merely "not wrong".
            // `exp` and `nbf` are checked by `check_times`, `aud` by the
            // `Authenticator`, not here.
            let required: &[&str] = if s.issuer.is_some() { &["iss"] } else { &[] };
            v.set_required_spec_claims(required);
            v.validate_exp = false;
            v.validate_nbf = false;
            v.validate_aud = false;
            v.leeway = s.leeway.as_secs();
            if let Some(iss) = &s.issuer {
                v.set_issuer(&[iss]);
            }
            v
        };
        let jwks = match s.jwks {
            Some((source, refresh)) => Some(Jwks::start(source, refresh).await?),
            None => None,
        };
        Ok(Self {
            hs256: s.hs256,
            hs256_validation: validation(Algorithm::HS256),
            jwks,
            jwks_validations: JWKS_ALGORITHMS.iter().map(|a| (*a, validation(*a))).collect(),
            leeway: s.leeway.as_secs(),
            user_id_claim: s.user_id_claim,
        })
    }

    /// Verifies `token` and extracts the user id.
    pub(crate) fn verify(&self, token: &str) -> Result<Verified, AuthError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(AuthError::Invalid("token too long".into()));
        }
        if token.split('.').count() != 3 {
            return Err(AuthError::Invalid("not a JWT".into()));
        }
        // The header is unauthenticated: it only chooses among keys we trust.
        let header = read_header(token)?;
        let claims = match header.alg {
            Algorithm::HS256 => {
                let Some(key) = &self.hs256 else {
                    return Err(AuthError::Invalid("algorithm HS256 not accepted".into()));
                };
                decode(token, key, &self.hs256_validation)?
            }
            alg => {
                let Some(validation) = self.jwks_validations.iter().find(|(a, _)| *a == alg).map(|(_, v)| v) else {
                    return Err(AuthError::Invalid(format!("algorithm {alg:?} not accepted")));
                };
                let Some(jwks) = &self.jwks else {
                    return Err(AuthError::Invalid(format!("algorithm {alg:?} not accepted")));
                };
                self.verify_with_jwks(jwks, token, alg, header.kid.as_deref(), validation)?
            }
        };
        check_times(&claims, self.leeway)?;
        // RFC 7519 4.1.1: `iss` is one StringOrURI. (`jsonwebtoken` accepts
        // an array when one element matches.)
        if claims.get("iss").is_some_and(|iss| !iss.is_string()) {
            return Err(AuthError::Invalid("claim \"iss\" is not a string".into()));
        }
        let user_id = match claims.get(&self.user_id_claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            _ => return Err(AuthError::MissingUserClaim { claim: self.user_id_claim.clone() }),
        };
        Ok(Verified { user_id, claims })
    }

    fn verify_with_jwks(
        &self,
        jwks: &Jwks,
        token: &str,
        alg: Algorithm,
        kid: Option<&str>,
        validation: &Validation,
    ) -> Result<Value, AuthError> {
        let set = jwks.keys.load();
        let mut candidates =
            set.keys.iter().filter(|k| k.fits(alg)).filter(|k| kid.is_none() || k.kid.as_deref() == kid).peekable();
        if candidates.peek().is_none() {
            if kid.is_some() {
                // Maybe the issuer rotated its keys: have the JWKS reloaded.
                jwks.reload_now.notify_one();
            }
            return Err(AuthError::Invalid(match kid {
                Some(k) => format!("no {alg:?} key with kid {k:?} in the JWKS"),
                None => format!("no {alg:?} key in the JWKS"),
            }));
        }
        // With a kid there is normally one candidate; without one, each key
        // of the right type is tried (a signature error means "not this
        // key", any other error is final).
        let mut last = AuthError::Invalid("bad signature".into());
        for key in candidates {
            match decode(token, &key.key, validation) {
                Ok(claims) => return Ok(claims),
                Err(AuthError::Invalid(reason)) if reason == "bad signature" => {
                    last = AuthError::Invalid(reason);
                }
                Err(other) => return Err(other),
            }
        }
        Err(last)
    }
}

/// `exp` (required) and `nbf` (when present) of verified claims, with
/// `leeway` seconds of skew, as `jsonwebtoken` would check them. Checked here
/// because the gateway's serde_json keeps numbers as text
/// (`arbitrary_precision`), and `jsonwebtoken` then reads a fractional
/// NumericDate (`"exp": 1767225600.5`, RFC 7519 allows it) as a claim of the
/// wrong type.
fn check_times(claims: &Value, leeway: u64) -> Result<(), AuthError> {
    let now = jsonwebtoken::get_current_timestamp();
    let date = |name: &str| -> Result<Option<u64>, AuthError> {
        match claims.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => numeric_date(value)
                .map(Some)
                .ok_or_else(|| AuthError::Invalid(format!("claim {name:?} has the wrong type"))),
        }
    };
    let Some(exp) = date("exp")? else {
        return Err(AuthError::Invalid("missing required claim \"exp\"".into()));
    };
    let nbf = date("nbf")?;
    if exp < now.saturating_sub(leeway) {
        return Err(AuthError::Expired);
    }
    if nbf.is_some_and(|nbf| nbf > now.saturating_add(leeway)) {
        return Err(AuthError::NotYetValid);
    }
    Ok(())
}

/// A NumericDate as whole seconds: a non-negative number below 2^64,
/// rounded (as `jsonwebtoken` reads one).
fn numeric_date(value: &Value) -> Option<u64> {
    let Value::Number(number) = value else { return None };
    number.as_u64().or_else(|| {
        number.as_f64().filter(|v| v.is_finite() && *v >= 0.0 && *v < u64::MAX as f64).map(|v| v.round() as u64)
    })
}

/// The protected header of a JWT: its algorithm and key id.
struct Header {
    alg: Algorithm,
    kid: Option<String>,
}

/// Reads `token`'s protected header, decoded once: its algorithm and key id,
/// refusing one with `crit`. RFC 7515 section 4.1.11: a recipient must
/// refuse a JWS whose `crit` names an extension it does not understand, and
/// the gateway understands none, so any `crit` (even empty or malformed) is
/// refused.
fn read_header(token: &str) -> Result<Header, AuthError> {
    use base64::Engine;
    let malformed = || AuthError::Invalid("malformed header or algorithm not supported".into());
    let encoded = token.split('.').next().unwrap_or_default();
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(encoded).map_err(|_| malformed())?;
    let mut fields: serde_json::Map<String, Value> = serde_json::from_slice(&bytes).map_err(|_| malformed())?;
    if fields.contains_key("crit") {
        return Err(AuthError::Invalid("the header names critical extensions (crit), which are not supported".into()));
    }
    let alg = fields
        .remove("alg")
        .map(serde_json::from_value::<Algorithm>)
        .ok_or_else(malformed)?
        .map_err(|_| malformed())?;
    let kid = match fields.remove("kid") {
        None | Some(Value::Null) => None,
        Some(Value::String(kid)) => Some(kid),
        Some(_) => return Err(malformed()),
    };
    Ok(Header { alg, kid })
}

fn decode(token: &str, key: &DecodingKey, validation: &Validation) -> Result<Value, AuthError> {
    use jsonwebtoken::errors::ErrorKind;
    match jsonwebtoken::decode::<Value>(token, key, validation) {
        Ok(data) => {
            if !data.claims.is_object() {
                return Err(AuthError::Invalid("claims are not a JSON object".into()));
            }
            Ok(data.claims)
        }
        // The reasons name the check, never the token or claim contents.
        Err(e) => Err(match e.kind() {
            ErrorKind::ExpiredSignature => AuthError::Expired,
            ErrorKind::ImmatureSignature => AuthError::NotYetValid,
            ErrorKind::InvalidSignature => AuthError::Invalid("bad signature".into()),
            ErrorKind::InvalidIssuer => AuthError::Invalid("issuer mismatch".into()),
            ErrorKind::InvalidAudience => AuthError::Invalid("audience mismatch".into()),
            ErrorKind::MissingRequiredClaim(c) => AuthError::Invalid(format!("missing required claim {c:?}")),
            ErrorKind::InvalidClaimFormat(c) => AuthError::Invalid(format!("claim {c:?} has the wrong type")),
            ErrorKind::InvalidAlgorithm => AuthError::Invalid("algorithm does not match the key".into()),
            ErrorKind::InvalidEcdsaKey | ErrorKind::InvalidRsaKey(_) | ErrorKind::InvalidKeyFormat => {
                AuthError::Invalid("key cannot verify this token".into())
            }
            _ => AuthError::Invalid("malformed token".into()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jwks_source_parsing() {
        assert_eq!(JwksSource::parse("file:/etc/jwks.json").expect("file"), JwksSource::File("/etc/jwks.json".into()));
        assert!(matches!(JwksSource::parse("https://issuer/.well-known/jwks.json").expect("url"), JwksSource::Url(_)));
        assert!(JwksSource::parse("file:").is_err());
        assert!(JwksSource::parse("/etc/jwks.json").is_err());
        assert!(JwksSource::parse("ftp://x/jwks").is_err());
    }

    #[test]
    fn jwks_parsing_keeps_only_usable_signature_keys() {
        let doc = serde_json::json!({"keys": [
            // HMAC key in a JWKS: refused.
            {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
            // Encryption key: skipped.
            {"kty": "RSA", "use": "enc", "kid": "enc", "n": "sXch", "e": "AQAB"},
            // Unknown key type: skipped.
            {"kty": "weird", "kid": "w"},
            // Encryption algorithm: skipped.
            {"kty": "RSA", "alg": "RSA-OAEP", "kid": "oaep", "n": "sXch", "e": "AQAB"},
            // A usable one.
            {"kty": "RSA", "alg": "RS256", "use": "sig", "kid": "good", "n": "sXch", "e": "AQAB"},
        ]});
        let set = parse_jwks(doc.to_string().as_bytes()).expect("one usable key");
        assert_eq!(set.keys.len(), 1);
        assert_eq!(set.keys[0].kid.as_deref(), Some("good"));
        assert!(set.keys[0].fits(Algorithm::RS256));
        assert!(!set.keys[0].fits(Algorithm::PS256), "declared alg is binding");
        assert!(!set.keys[0].fits(Algorithm::ES256));

        assert!(parse_jwks(b"{\"keys\": []}").is_err());
        assert!(parse_jwks(b"not json").is_err());
        assert!(parse_jwks(b"{\"kty\": \"RSA\"}").is_err());
    }
}
