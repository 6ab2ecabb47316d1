//! API keys for service clients, compared in constant time.
//!
//! Only SHA-256 digests of the keys are kept, and a presented key is
//! compared with every configured digest without stopping at a match: the
//! time taken does not depend on which key (if any) matched, nor on how
//! many leading bytes were right, and no key is held in plain text after
//! startup.

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use crate::secret::SecretString;

/// The configured keys, as digests, with the user each stands for.
pub(crate) struct ApiKeys {
    entries: Vec<([u8; 32], String)>,
}

impl std::fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // User ids are not secret; the digests are not shown anyway.
        f.debug_struct("ApiKeys")
            .field("users", &self.entries.iter().map(|(_, u)| u.as_str()).collect::<Vec<_>>())
            .finish()
    }
}

fn digest(key: &str) -> [u8; 32] {
    Sha256::digest(key.as_bytes()).into()
}

impl ApiKeys {
    /// Builds the table. Refuses empty keys and the same key for two users
    /// (which user would it be?), naming the users, not the keys.
    pub(crate) fn new(keys: Vec<(SecretString, String)>) -> Result<Self, String> {
        let mut entries: Vec<([u8; 32], String)> = Vec::with_capacity(keys.len());
        for (key, user_id) in keys {
            if key.is_empty() {
                return Err(format!("the API key of user {user_id:?} is empty"));
            }
            if user_id.is_empty() {
                return Err("an API key has an empty user_id".into());
            }
            let d = digest(key.expose());
            if let Some((_, other)) = entries.iter().find(|(e, _)| *e == d) {
                if *other != user_id {
                    return Err(format!("users {other:?} and {user_id:?} are configured with the same API key"));
                }
                continue;
            }
            entries.push((d, user_id));
        }
        Ok(Self { entries })
    }

    /// Whether any key is configured.
    pub(crate) fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Whether some key stands for `user_id`.
    pub(crate) fn has_user(&self, user_id: &str) -> bool {
        self.entries.iter().any(|(_, u)| u == user_id)
    }

    /// The user id `presented` stands for, if it is a configured key.
    pub(crate) fn lookup(&self, presented: &str) -> Option<&str> {
        let d = digest(presented);
        let mut found = subtle::Choice::from(0);
        let mut index = 0u32;
        for (i, (e, _)) in self.entries.iter().enumerate() {
            let hit = e.ct_eq(&d);
            // `i` fits: the table is built from a config file.
            index = u32::conditional_select(&index, &(i as u32), hit);
            found |= hit;
        }
        if bool::from(found) {
            self.entries.get(index as usize).map(|(_, u)| u.as_str())
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(pairs: &[(&str, &str)]) -> Result<ApiKeys, String> {
        ApiKeys::new(pairs.iter().map(|(k, u)| (SecretString::from(*k), (*u).to_owned())).collect())
    }

    #[test]
    fn looks_up_the_user() {
        let k = keys(&[("key-reports-123", "svc-reports"), ("key-billing-456", "svc-billing")]).expect("valid");
        assert_eq!(k.lookup("key-reports-123"), Some("svc-reports"));
        assert_eq!(k.lookup("key-billing-456"), Some("svc-billing"));
        assert_eq!(k.lookup("key-billing-45"), None);
        assert_eq!(k.lookup("key-billing-4567"), None);
        assert_eq!(k.lookup(""), None);
        assert!(!k.is_empty());
        assert!(keys(&[]).expect("empty").is_empty());
    }

    #[test]
    fn refuses_ambiguous_or_empty_keys() {
        let err = keys(&[("dup-key-xyz", "a"), ("dup-key-xyz", "b")]).expect_err("ambiguous");
        assert!(err.contains("\"a\"") && err.contains("\"b\""), "{err}");
        assert!(!err.contains("dup-key"), "{err}");
        assert!(keys(&[("same", "a"), ("same", "a")]).is_ok());
        assert!(keys(&[("", "a")]).is_err());
        assert!(keys(&[("k", "")]).is_err());
    }

    #[test]
    fn debug_shows_users_not_keys() {
        let k = keys(&[("key-reports-123", "svc-reports")]).expect("valid");
        let shown = format!("{k:?}");
        assert!(shown.contains("svc-reports"));
        assert!(!shown.contains("key-reports-123"));
    }
}
