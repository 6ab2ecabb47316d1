//! Grants at rest: AES-256-GCM, with the key from `[state] encryption_key`
//! or generated once in `[state] dir`. Each sealed record is bound to its
//! provider and user (the associated data), so records cannot be swapped
//! between users in the file.

use std::io::Write;
use std::path::Path;

use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use super::OAuthError;
use crate::secret::SecretString;

/// The key file written when no `encryption_key` is configured.
pub(super) const KEY_FILE: &str = "oauth.key";

/// Seals and opens records with one key.
pub(super) struct Sealer {
    key: LessSafeKey,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(AES-256-GCM)")
    }
}

impl Sealer {
    /// A sealer for a configured key: 64 hex digits or base64 of 32 bytes.
    pub(super) fn from_text(text: &SecretString) -> Result<Sealer, OAuthError> {
        let text = text.expose().trim();
        let bytes = if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            (0..32).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap_or(0)).collect()
        } else {
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .or_else(|_| base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text))
                .unwrap_or_default()
        };
        if bytes.len() != 32 {
            return Err(OAuthError::Setup(
                "[state] encryption_key must be 32 bytes, written as 64 hex digits or base64".into(),
            ));
        }
        Sealer::from_bytes(&bytes)
    }

    /// The key in `dir`, made (mode 0600) when it is not there yet.
    pub(super) fn from_dir(dir: &Path) -> Result<Sealer, OAuthError> {
        let path = dir.join(KEY_FILE);
        let setup = |what: &str, e: std::io::Error| OAuthError::Setup(format!("{what} {}: {e}", path.display()));
        match std::fs::read_to_string(&path) {
            Ok(text) => return Sealer::from_text(&SecretString::from(text)),
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(setup("cannot read", e)),
            Err(_) => {}
        }
        let mut bytes = [0u8; 32];
        SystemRandom::new().fill(&mut bytes).map_err(|_| OAuthError::Setup("no system randomness".into()))?;
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&path).map_err(|e| setup("cannot create", e))?;
        file.write_all(hex.as_bytes()).and_then(|()| file.sync_all()).map_err(|e| setup("cannot write", e))?;
        tracing::warn!(
            path = %path.display(),
            "generated the key that encrypts OAuth grants at rest; back it up with the state directory, or set [state] encryption_key"
        );
        Sealer::from_bytes(&bytes)
    }

    /// A sealer for a key of 32 bytes.
    pub(super) fn from_bytes(bytes: &[u8]) -> Result<Sealer, OAuthError> {
        let key = UnboundKey::new(&AES_256_GCM, bytes).map_err(|_| OAuthError::Setup("bad key length".into()))?;
        Ok(Sealer { key: LessSafeKey::new(key) })
    }

    /// `nonce || ciphertext || tag`, bound to `context`.
    pub(super) fn seal(&self, context: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, OAuthError> {
        let mut nonce = [0u8; NONCE_LEN];
        SystemRandom::new().fill(&mut nonce).map_err(|_| OAuthError::Setup("no system randomness".into()))?;
        let mut out = plaintext.to_vec();
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(context), &mut out)
            .map_err(|_| OAuthError::Setup("sealing failed".into()))?;
        let mut sealed = nonce.to_vec();
        sealed.append(&mut out);
        Ok(sealed)
    }

    /// The plaintext, or `None` when the record was not sealed with this
    /// key for this `context` (or was altered).
    pub(super) fn open(&self, context: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self.key.open_in_place(nonce, Aad::from(context), &mut body).ok()?;
        Some(plain.to_vec())
    }
}

/// A value's SHA-256, hex: what is kept of a browser's binding cookie.
pub(super) fn digest(value: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(value.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// `bytes` random bytes as unpadded base64url: link ids, states.
pub(super) fn random_id(bytes: usize) -> Result<String, OAuthError> {
    let mut buf = vec![0u8; bytes];
    SystemRandom::new().fill(&mut buf).map_err(|_| OAuthError::Setup("no system randomness".into()))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_records_open_only_for_their_context() {
        let sealer = Sealer::from_text(&SecretString::from("00".repeat(32))).expect("key");
        let sealed = sealer.seal(b"google\0alice", b"token").expect("seal");
        assert!(!sealed.windows(5).any(|w| w == b"token"));
        assert_eq!(sealer.open(b"google\0alice", &sealed).as_deref(), Some(&b"token"[..]));
        assert_eq!(sealer.open(b"google\0bob", &sealed), None);
        let mut altered = sealed.clone();
        *altered.last_mut().expect("byte") ^= 1;
        assert_eq!(sealer.open(b"google\0alice", &altered), None);
        let other = Sealer::from_text(&SecretString::from("01".repeat(32))).expect("key");
        assert_eq!(other.open(b"google\0alice", &sealed), None);
    }

    #[test]
    fn keys_are_32_bytes() {
        assert!(Sealer::from_text(&SecretString::from("short")).is_err());
        let b64 = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
        assert!(Sealer::from_text(&SecretString::from(b64)).is_ok());
    }
}
