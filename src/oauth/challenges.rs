//! Where challenges in progress are kept, whichever store that is: this
//! process's memory (`links.rs`) or the Redis a fleet shares
//! (`links_redis.rs`). One interface for the flow code, records typed.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::links::{LinkStatus, Links, OpenLink, Refusal};
use super::links_redis::RedisLinks;
use super::OAuthError;

/// The kinds of short-lived records.
#[derive(Debug, Clone, Copy)]
pub(super) enum Kind {
    /// A flow sent to a provider, by its `state`.
    Flow,
    /// A flow awaiting its application's confirmation, by its `flow_id`.
    Confirmation,
    /// A confirmed flow awaiting its browser at `return_to`, by the value
    /// in it.
    Return,
    /// A browser's sign-in at `[login]`'s provider, by its `state`.
    SignIn,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Flow => "flow",
            Kind::Confirmation => "confirm",
            Kind::Return => "return",
            Kind::SignIn => "signin",
        }
    }
}

/// The store in use.
pub(super) enum Challenges<'s> {
    /// This process's memory.
    Memory(&'s Links),
    /// The Redis the fleet shares.
    Redis(&'s RedisLinks),
}

impl Challenges<'_> {
    /// A new link: (link id, check id).
    pub(super) async fn issue(
        &self,
        provider: &str,
        user: &str,
        scopes: BTreeSet<String>,
        ttl: Duration,
    ) -> Result<(String, String), OAuthError> {
        match self {
            Challenges::Memory(links) => links.issue(provider, user, scopes, ttl),
            Challenges::Redis(redis) => redis.issue(provider, user, scopes, ttl).await,
        }
    }

    /// A link that can still be opened; nothing about it changes.
    pub(super) async fn open(&self, provider: &str, link_id: &str) -> Result<OpenLink, Refusal> {
        match self {
            Challenges::Memory(links) => links.open(provider, link_id),
            Challenges::Redis(redis) => redis.open(provider, link_id).await,
        }
    }

    /// Records how a link ended (`link` as [`OpenLink::link`] names it).
    pub(super) async fn finish(&self, link: &str, status: LinkStatus) {
        match self {
            Challenges::Memory(links) => links.finish(link, status),
            Challenges::Redis(redis) => redis.finish(link, status).await,
        }
    }

    /// A link's status, for its own user only.
    pub(super) async fn status(&self, provider: &str, check_id: &str, user: &str) -> Option<LinkStatus> {
        match self {
            Challenges::Memory(links) => links.status(provider, check_id, user),
            Challenges::Redis(redis) => redis.status(provider, check_id, user).await,
        }
    }

    /// Keeps `record` of `kind` under `id` for `ttl`.
    pub(super) async fn put<T: Serialize>(
        &self,
        kind: Kind,
        id: &str,
        record: &T,
        ttl: Duration,
    ) -> Result<(), OAuthError> {
        let json = serde_json::to_string(record).map_err(|e| OAuthError::Store(e.to_string()))?;
        match self {
            Challenges::Memory(links) => {
                links.put(kind.name(), id, json, ttl);
                Ok(())
            }
            Challenges::Redis(redis) => redis.put(kind.name(), id, json, ttl).await,
        }
    }

    /// The record of `kind` under `id`, left in place.
    pub(super) async fn get<T: DeserializeOwned>(&self, kind: Kind, id: &str) -> Result<Option<T>, OAuthError> {
        let json = match self {
            Challenges::Memory(links) => links.get(kind.name(), id),
            Challenges::Redis(redis) => redis.get(kind.name(), id).await?,
        };
        parse(json)
    }

    /// Takes the record of `kind` under `id`: one taker gets it.
    pub(super) async fn take<T: DeserializeOwned>(&self, kind: Kind, id: &str) -> Result<Option<T>, OAuthError> {
        let json = match self {
            Challenges::Memory(links) => links.take(kind.name(), id),
            Challenges::Redis(redis) => redis.take(kind.name(), id).await?,
        };
        parse(json)
    }
}

fn parse<T: DeserializeOwned>(json: Option<String>) -> Result<Option<T>, OAuthError> {
    json.map(|json| serde_json::from_str(&json).map_err(|e| OAuthError::Store(format!("a stored record: {e}"))))
        .transpose()
}
