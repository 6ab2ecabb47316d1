//! Where each user's grant is kept: the embedded store (one redb file under
//! `[state] dir`, every record sealed) or Vault KV v2 (one secret per user,
//! written with check-and-set so replicas share grants).

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use redb::{ReadableDatabase, TableDefinition};
use serde::{Deserialize, Serialize};

use super::seal::Sealer;
use super::OAuthError;
use crate::config::GrantStoreRef;
use crate::secret::SecretString;
use crate::vault::kv2::{SecretData, Written};
use crate::vault::{Kv2Key, Kv2Source, SecretResolver};

/// The embedded store's file under `[state] dir`.
pub(super) const DB_FILE: &str = "oauth-grants.redb";

const GRANTS: TableDefinition<&str, &[u8]> = TableDefinition::new("grants");

/// One user's grant at one provider.
#[derive(Clone, Debug)]
pub(crate) struct Grant {
    /// The access token injected into calls.
    pub access_token: SecretString,
    /// The refresh token, when the provider gave one.
    pub refresh_token: Option<SecretString>,
    /// When the access token expires (Unix seconds), when the provider said.
    pub expires_at: Option<u64>,
    /// The scopes it covers.
    pub scopes: BTreeSet<String>,
    /// Vault store only: another replica is refreshing it until then.
    pub refreshing_until: Option<u64>,
    /// When the user first connected (Unix seconds); `None` for a grant
    /// stored before this was recorded.
    pub connected_at: Option<u64>,
    /// When the gateway last refreshed it (Unix seconds), if ever.
    pub refreshed_at: Option<u64>,
}

impl Grant {
    /// Whether it covers every scope in `wanted`.
    pub(super) fn covers<'a>(&self, wanted: impl IntoIterator<Item = &'a String>) -> bool {
        wanted.into_iter().all(|s| self.scopes.contains(s))
    }

    /// Whether the access token expires within `margin` seconds of now.
    pub(super) fn expiring(&self, margin: u64) -> bool {
        self.expires_at.is_some_and(|at| at <= now().saturating_add(margin))
    }

    /// Whether the access token has expired.
    pub(super) fn expired(&self) -> bool {
        self.expires_at.is_some_and(|at| at <= now())
    }

    /// As written down (JSON, with its tokens: seal it before it leaves).
    pub(super) fn to_json(&self) -> Result<Vec<u8>, OAuthError> {
        serde_json::to_vec(&Record::of(self)).map_err(|e| OAuthError::Store(e.to_string()))
    }

    /// A grant [`Grant::to_json`] wrote.
    pub(super) fn from_json(json: &[u8]) -> Result<Grant, OAuthError> {
        let record: Record = serde_json::from_slice(json).map_err(|e| OAuthError::Store(e.to_string()))?;
        Ok(record.into_grant())
    }
}

/// Now, in Unix seconds.
pub(super) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A grant as it is written down (inside the sealed record, or as the Vault
/// secret's fields: `access_token` is where the read-only form reads it).
#[derive(Serialize, Deserialize)]
struct Record {
    access_token: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refresh_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at: Option<u64>,
    /// Space-separated, as OAuth writes scopes.
    #[serde(default)]
    scope: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refreshing_until: Option<u64>,
    // Absent from records written before they were kept: read as unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    connected_at: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    refreshed_at: Option<u64>,
}

impl Record {
    fn of(grant: &Grant) -> Record {
        Record {
            access_token: grant.access_token.expose().to_owned(),
            refresh_token: grant.refresh_token.as_ref().map(|t| t.expose().to_owned()),
            expires_at: grant.expires_at,
            scope: grant.scopes.iter().cloned().collect::<Vec<_>>().join(" "),
            refreshing_until: grant.refreshing_until,
            connected_at: grant.connected_at,
            refreshed_at: grant.refreshed_at,
        }
    }

    fn into_grant(self) -> Grant {
        Grant {
            access_token: SecretString::from(self.access_token),
            refresh_token: self.refresh_token.filter(|t| !t.is_empty()).map(SecretString::from),
            expires_at: self.expires_at,
            scopes: self.scope.split_whitespace().map(str::to_owned).collect(),
            refreshing_until: self.refreshing_until,
            connected_at: self.connected_at,
            refreshed_at: self.refreshed_at,
        }
    }
}

/// A grant read with what a check-and-set write needs.
pub(super) struct Versioned {
    /// The grant.
    pub grant: Grant,
    /// The Vault secret's version (0 in the embedded store).
    pub version: u64,
}

/// One provider's store.
#[derive(Clone, Debug)]
pub(super) enum GrantStore {
    /// The embedded file, shared by every embedded provider.
    Embedded(Arc<EmbeddedStore>),
    /// Vault KV v2 under this reference.
    Vault { secrets: Arc<SecretResolver>, at: GrantStoreRef },
}

impl GrantStore {
    /// The user's grant through the cache (the call path).
    pub(super) async fn get(&self, provider: &str, user: &str) -> Result<Option<Grant>, OAuthError> {
        match self {
            GrantStore::Embedded(db) => db.get(provider, user),
            GrantStore::Vault { secrets, at } => {
                let (vault, key) = vault_key(secrets, at, user)?;
                match vault.get_secret(&key).await {
                    Ok(data) => Ok(from_fields(&data)),
                    Err(e) if !e.is_transient() => Ok(None),
                    Err(e) => Err(OAuthError::Store(e.to_string())),
                }
            }
        }
    }

    /// The user's grant past any cache, with its version.
    pub(super) async fn get_versioned(&self, provider: &str, user: &str) -> Result<Option<Versioned>, OAuthError> {
        match self {
            GrantStore::Embedded(db) => Ok(db.get(provider, user)?.map(|grant| Versioned { grant, version: 0 })),
            GrantStore::Vault { secrets, at } => {
                let (vault, key) = vault_key(secrets, at, user)?;
                let read = vault.read_versioned(&key).await.map_err(|e| OAuthError::Store(e.to_string()))?;
                Ok(read.and_then(|(data, version)| from_fields(&data).map(|grant| Versioned { grant, version })))
            }
        }
    }

    /// Stores the user's grant; with `cas`, only over that version (Vault).
    /// `false` when another writer got there first.
    pub(super) async fn put(
        &self,
        provider: &str,
        user: &str,
        grant: &Grant,
        cas: Option<u64>,
    ) -> Result<bool, OAuthError> {
        match self {
            GrantStore::Embedded(db) => {
                let db = db.clone();
                let (provider, user, grant) = (provider.to_owned(), user.to_owned(), grant.clone());
                tokio::task::spawn_blocking(move || db.put(&provider, &user, &grant))
                    .await
                    .map_err(|e| OAuthError::Store(e.to_string()))??;
                Ok(true)
            }
            GrantStore::Vault { secrets, at } => {
                let (vault, key) = vault_key(secrets, at, user)?;
                let fields = match serde_json::to_value(Record::of(grant)) {
                    Ok(serde_json::Value::Object(fields)) => fields,
                    _ => return Err(OAuthError::Store("a grant did not serialise".into())),
                };
                match vault.write(&key, fields, cas).await.map_err(|e| OAuthError::Store(e.to_string()))? {
                    Written::Done => Ok(true),
                    Written::CasMismatch => Ok(false),
                }
            }
        }
    }

    /// Forgets the user's grant.
    pub(super) async fn delete(&self, provider: &str, user: &str) -> Result<(), OAuthError> {
        match self {
            GrantStore::Embedded(db) => {
                let db = db.clone();
                let (provider, user) = (provider.to_owned(), user.to_owned());
                tokio::task::spawn_blocking(move || db.delete(&provider, &user))
                    .await
                    .map_err(|e| OAuthError::Store(e.to_string()))?
            }
            GrantStore::Vault { secrets, at } => {
                let (vault, key) = vault_key(secrets, at, user)?;
                vault.destroy(&key).await.map_err(|e| OAuthError::Store(e.to_string()))
            }
        }
    }

    /// Every user holding a grant at `provider`, with it (for the admin
    /// listing: the caller never shows the tokens). Embedded: a range scan;
    /// Vault: a KV v2 LIST of the directory holding `{user_id}`, then one
    /// read per user.
    pub(super) async fn list(&self, provider: &str) -> Result<Vec<(String, Grant)>, OAuthError> {
        match self {
            GrantStore::Embedded(db) => {
                let (db, provider) = (db.clone(), provider.to_owned());
                tokio::task::spawn_blocking(move || db.list(&provider))
                    .await
                    .map_err(|e| OAuthError::Store(e.to_string()))?
            }
            GrantStore::Vault { secrets, at } => {
                let vault =
                    secrets.vault().ok_or_else(|| OAuthError::Setup(format!("{at} needs a [vault] section")))?;
                let (dir, before, after) = listable(at)?;
                let names = vault.list(&at.mount, &dir).await.map_err(|e| OAuthError::Store(e.to_string()))?;
                let mut grants = Vec::new();
                for name in names {
                    // `alice` is a secret, `alice/` a folder: whichever the
                    // path after `{user_id}` needs.
                    let entry = if after.contains('/') {
                        name.strip_suffix('/')
                    } else {
                        Some(name.as_str()).filter(|n| !n.ends_with('/'))
                    };
                    let user = entry.and_then(|e| e.strip_prefix(before.as_str())).and_then(|e| {
                        let rest_of_segment = after.split('/').next().unwrap_or_default();
                        e.strip_suffix(rest_of_segment)
                    });
                    let Some(user) = user.filter(|u| !u.is_empty()) else { continue };
                    if let Some(grant) = self.get_versioned(provider, user).await?.map(|v| v.grant) {
                        grants.push((user.to_owned(), grant));
                    }
                }
                Ok(grants)
            }
        }
    }

    /// Whether replicas share it (and so must coordinate refreshes).
    pub(super) fn is_shared(&self) -> bool {
        matches!(self, GrantStore::Vault { .. })
    }
}

/// The Vault backend and the user's secret.
fn vault_key<'s>(
    secrets: &'s SecretResolver,
    at: &GrantStoreRef,
    user: &str,
) -> Result<(&'s Kv2Source, Kv2Key), OAuthError> {
    let vault = secrets.vault().ok_or_else(|| OAuthError::Setup(format!("{at} needs a [vault] section")))?;
    // The same checks as any `{user_id}` reference: no traversal, no `#`.
    let reference = crate::config::SecretRef::Vault {
        mount: at.mount.clone(),
        path: at.path.clone(),
        field: "access_token".into(),
    };
    let concrete = reference.with_user_id(Some(user)).map_err(|e| OAuthError::Store(e.to_string()))?;
    match &*concrete {
        crate::config::SecretRef::Vault { mount, path, field } => {
            Ok((vault, Kv2Key { mount: mount.clone(), path: path.clone(), field: field.clone() }))
        }
        _ => Err(OAuthError::Setup(format!("{at} is not a vault reference"))),
    }
}

/// Where a Vault grant store's users can be listed: the folder holding the
/// `{user_id}` segment, and what precedes and follows `{user_id}` (the
/// latter to the end of the path). `{user_id}` must appear once, in the path.
fn listable(at: &GrantStoreRef) -> Result<(String, String, String), OAuthError> {
    let template = crate::config::USER_ID_TEMPLATE;
    let cannot = || OAuthError::Setup(format!("{at}: grants can be listed only with one {template} in the path"));
    if at.mount.contains(template) || at.path.matches(template).count() != 1 {
        return Err(cannot());
    }
    let (head, after) = at.path.split_once(template).ok_or_else(cannot)?;
    let (dir, before) = match head.rsplit_once('/') {
        Some((dir, before)) => (dir.to_owned(), before.to_owned()),
        None => (String::new(), head.to_owned()),
    };
    Ok((dir, before, after.to_owned()))
}

/// A grant from a Vault secret's fields; `None` when it has no access token.
fn from_fields(data: &SecretData) -> Option<Grant> {
    let text = |k: &str| data.get(k).and_then(Option::as_ref).map(|v| v.expose().to_owned());
    let number = |k: &str| text(k).and_then(|v| v.parse::<u64>().ok());
    let record = Record {
        access_token: text("access_token").filter(|t| !t.is_empty())?,
        refresh_token: text("refresh_token"),
        expires_at: number("expires_at"),
        scope: text("scope").unwrap_or_default(),
        refreshing_until: number("refreshing_until"),
        connected_at: number("connected_at"),
        refreshed_at: number("refreshed_at"),
    };
    Some(record.into_grant())
}

/// The embedded store: a redb file whose values are sealed records.
pub(crate) struct EmbeddedStore {
    db: redb::Database,
    sealer: Arc<Sealer>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EmbeddedStore")
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the file in `dir` with this sealer.
    pub(super) fn open(dir: &Path, sealer: Arc<Sealer>) -> Result<EmbeddedStore, OAuthError> {
        let path = dir.join(DB_FILE);
        let db = redb::Database::create(&path)
            .map_err(|e| OAuthError::Setup(format!("cannot open the grant store {}: {e}", path.display())))?;
        Ok(EmbeddedStore { db, sealer })
    }

    fn key(provider: &str, user: &str) -> String {
        format!("{provider}\0{user}")
    }

    fn get(&self, provider: &str, user: &str) -> Result<Option<Grant>, OAuthError> {
        let key = Self::key(provider, user);
        let store = |e: &dyn std::fmt::Display| OAuthError::Store(e.to_string());
        let read = self.db.begin_read().map_err(|e| store(&e))?;
        let table = match read.open_table(GRANTS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(store(&e)),
        };
        let Some(sealed) = table.get(key.as_str()).map_err(|e| store(&e))? else { return Ok(None) };
        let Some(plain) = self.sealer.open(key.as_bytes(), sealed.value()) else {
            // Another key sealed it (the key file was replaced): unusable,
            // so the user authorizes again.
            tracing::warn!(provider, "a stored grant cannot be opened with the current key; ignoring it");
            return Ok(None);
        };
        let record: Record = serde_json::from_slice(&plain).map_err(|e| store(&e))?;
        Ok(Some(record.into_grant()))
    }

    fn put(&self, provider: &str, user: &str, grant: &Grant) -> Result<(), OAuthError> {
        let key = Self::key(provider, user);
        let store = |e: &dyn std::fmt::Display| OAuthError::Store(e.to_string());
        let plain = serde_json::to_vec(&Record::of(grant)).map_err(|e| store(&e))?;
        let sealed = self.sealer.seal(key.as_bytes(), &plain)?;
        let write = self.db.begin_write().map_err(|e| store(&e))?;
        {
            let mut table = write.open_table(GRANTS).map_err(|e| store(&e))?;
            table.insert(key.as_str(), sealed.as_slice()).map_err(|e| store(&e))?;
        }
        write.commit().map_err(|e| store(&e))
    }

    /// Every grant at `provider`: the keys `provider\0user`, in order.
    fn list(&self, provider: &str) -> Result<Vec<(String, Grant)>, OAuthError> {
        let store = |e: &dyn std::fmt::Display| OAuthError::Store(e.to_string());
        let read = self.db.begin_read().map_err(|e| store(&e))?;
        let table = match read.open_table(GRANTS) {
            Ok(table) => table,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
            Err(e) => return Err(store(&e)),
        };
        // `\0` < `\x01`: the range holds exactly this provider's keys.
        let (from, to) = (format!("{provider}\0"), format!("{provider}\x01"));
        let mut grants = Vec::new();
        for entry in table.range(from.as_str()..to.as_str()).map_err(|e| store(&e))? {
            let (key, sealed) = entry.map_err(|e| store(&e))?;
            let Some(user) = key.value().strip_prefix(from.as_str()).map(str::to_owned) else { continue };
            // One that the current key cannot open is skipped, as `get` does.
            let Some(plain) = self.sealer.open(key.value().as_bytes(), sealed.value()) else { continue };
            let record: Record = serde_json::from_slice(&plain).map_err(|e| store(&e))?;
            grants.push((user, record.into_grant()));
        }
        Ok(grants)
    }

    fn delete(&self, provider: &str, user: &str) -> Result<(), OAuthError> {
        let key = Self::key(provider, user);
        let store = |e: &dyn std::fmt::Display| OAuthError::Store(e.to_string());
        let write = self.db.begin_write().map_err(|e| store(&e))?;
        {
            let mut table = write.open_table(GRANTS).map_err(|e| store(&e))?;
            table.remove(key.as_str()).map_err(|e| store(&e))?;
        }
        write.commit().map_err(|e| store(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store_at(path: &str) -> GrantStoreRef {
        GrantStoreRef { mount: "secret".into(), path: path.into() }
    }

    #[test]
    fn a_record_written_before_the_times_were_kept_still_reads() {
        let old = r#"{"access_token":"a","refresh_token":"r","expires_at":5,"scope":"x y"}"#;
        let grant = serde_json::from_str::<Record>(old).expect("an old record").into_grant();
        assert_eq!((grant.connected_at, grant.refreshed_at), (None, None));
        assert_eq!(grant.scopes.len(), 2);
        let mut newer = grant.clone();
        newer.connected_at = Some(7);
        let written = serde_json::to_value(Record::of(&newer)).expect("a record");
        assert_eq!(written["connected_at"], 7);
        assert!(written.get("refreshed_at").is_none(), "absent, not null: {written}");
    }

    #[test]
    fn where_a_vault_store_lists_its_users() {
        let in_mount = GrantStoreRef { mount: "m-{user_id}".into(), path: "x/{user_id}".into() };
        assert!(listable(&in_mount).is_err());
        let listable = |path: &str| listable(&store_at(path)).map_err(|e| e.to_string());
        assert_eq!(listable("oauth/google/{user_id}"), Ok(("oauth/google".into(), String::new(), String::new())));
        assert_eq!(listable("{user_id}"), Ok((String::new(), String::new(), String::new())));
        assert_eq!(listable("grants/{user_id}/google"), Ok(("grants".into(), String::new(), "/google".into())));
        assert_eq!(listable("g/u-{user_id}.json"), Ok(("g".into(), "u-".into(), ".json".into())));
        assert!(listable("a/{user_id}/{user_id}").is_err());
    }
}
