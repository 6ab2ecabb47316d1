//! JWTs signed here, as a client's identity provider would sign them, and
//! the hand-made ones an attacker would send.

use super::*;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{encode, get_current_timestamp, Algorithm, EncodingKey, Header};

/// An RSA private key (tests/fixtures/jwt_rsa_private.pem).
pub const RSA_PEM: &str = include_str!("../fixtures/jwt_rsa_private.pem");
/// Its public half.
pub const RSA_PUBLIC_PEM: &str = include_str!("../fixtures/jwt_rsa_public.pem");
/// Another RSA private key (an attacker's).
pub const RSA_OTHER_PEM: &str = include_str!("../fixtures/jwt_rsa_other_private.pem");
/// A P-256 private key.
pub const EC_PEM: &str = include_str!("../fixtures/jwt_ec_private.pem");

/// Seconds since the epoch.
pub fn now() -> u64 {
    get_current_timestamp()
}

/// `{"sub": sub, "exp": in ten minutes, "iat": now}` with `extra` merged in
/// (a null in `extra` removes that claim).
pub fn claims(sub: &str, extra: Value) -> Value {
    merged(json!({"sub": sub, "exp": now() + 600, "iat": now()}), extra)
}

/// `base` with every claim of `extra` set, and those that are null in
/// `extra` removed.
pub fn merged(mut base: Value, extra: Value) -> Value {
    if let (Value::Object(base), Value::Object(extra)) = (&mut base, extra) {
        for (k, v) in extra {
            if v.is_null() {
                base.remove(&k);
            } else {
                base.insert(k, v);
            }
        }
    }
    base
}

/// Signed with HS256 and this shared secret.
pub fn hs256(claims: &Value, secret: &[u8]) -> String {
    sign(Header::new(Algorithm::HS256), claims, &EncodingKey::from_secret(secret))
}

/// Signed with RS256 and this PEM private key, with this `kid` if any.
pub fn rs256(claims: &Value, pem: &str, kid: Option<&str>) -> String {
    let mut header = Header::new(Algorithm::RS256);
    header.kid = kid.map(str::to_owned);
    sign(header, claims, &EncodingKey::from_rsa_pem(pem.as_bytes()).expect("an RSA key"))
}

/// Signed with ES256 and [`EC_PEM`], with this `kid`.
pub fn es256(claims: &Value, kid: &str) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    sign(header, claims, &EncodingKey::from_ec_pem(EC_PEM.as_bytes()).expect("an EC key"))
}

/// Signed with any header and key.
pub fn sign(header: Header, claims: &Value, key: &EncodingKey) -> String {
    encode(&header, claims, key).expect("sign")
}

/// An unsigned token: header `{"alg": alg, "typ": "JWT"}`, these claims, an
/// empty signature.
pub fn unsigned(alg: &str, claims: &Value) -> String {
    format!(
        "{}.{}.",
        URL_SAFE_NO_PAD.encode(json!({"alg": alg, "typ": "JWT"}).to_string()),
        URL_SAFE_NO_PAD.encode(claims.to_string())
    )
}

/// `Bearer TOKEN`, an `Authorization` value.
pub fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
