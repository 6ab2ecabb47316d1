//! Challenges in progress, in this process's memory: the links handed to
//! callers and their `check_url` status, and the short-lived records of the
//! flows they start (a flow sent to a provider, a sign-in, a flow awaiting
//! its application's confirmation).
//!
//! A link is not a bearer: opening it changes nothing about it. Its own
//! user may open it again until a flow completes or its lifetime ends, and
//! a preview bot or another user opening it uses nothing up. (With `[state]
//! redis` the same lives in Redis: `links_redis.rs`.) Bounded: expired
//! entries are dropped as new ones come, and one user holds at most
//! [`MAX_PER_USER`] open links.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::seal::random_id;
use super::OAuthError;

/// Open links one user may hold at once; the oldest goes first.
const MAX_PER_USER: usize = 20;
/// Open links, and records, in all, beyond which the oldest are dropped.
const MAX_ENTRIES: usize = 100_000;
/// How long a finished link's status stays readable at its `check_url`.
pub(super) const STATUS_KEPT: Duration = Duration::from_secs(600);

/// What `check_url` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkStatus {
    /// Issued, or opened and not finished yet.
    Pending,
    /// The grant is stored.
    Completed,
    /// The provider refused its own user, or the code could not be exchanged.
    Failed,
    /// Not finished within its lifetime.
    Expired,
}

impl LinkStatus {
    /// The JSON `status` value.
    pub fn as_str(self) -> &'static str {
        match self {
            LinkStatus::Pending => "pending",
            LinkStatus::Completed => "completed",
            LinkStatus::Failed => "failed",
            LinkStatus::Expired => "expired",
        }
    }

    /// The status a store wrote.
    pub(super) fn parse(text: &str) -> LinkStatus {
        match text {
            "completed" => LinkStatus::Completed,
            "failed" => LinkStatus::Failed,
            "expired" => LinkStatus::Expired,
            _ => LinkStatus::Pending,
        }
    }
}

/// One issued link.
#[derive(Debug)]
struct Link {
    provider: String,
    user: String,
    scopes: BTreeSet<String>,
    check_id: String,
    /// When the link can no longer be opened.
    expires: Instant,
    /// The lifetime of the link, and of each flow from the moment it opens.
    ttl: Duration,
    status: LinkStatus,
    finished: Option<Instant>,
}

/// What opening a link needs of it.
#[derive(Debug, Clone)]
pub(super) struct OpenLink {
    /// The link as its store names it (the id here, its digest in Redis).
    pub link: String,
    /// The user it was made for.
    pub user: String,
    /// The scopes it asks.
    pub scopes: BTreeSet<String>,
    /// The lifetime of a flow it starts.
    pub ttl: Duration,
}

/// Why a link or a record cannot be used.
#[derive(Debug, Clone)]
pub(super) enum Refusal {
    /// Never issued (or forgotten), or for another provider.
    Unknown,
    /// Past its lifetime.
    Expired,
    /// Its flow completed already (or failed for its own user).
    Used,
    /// The shared store could not answer.
    Unavailable(OAuthError),
}

/// A short-lived record: its JSON and when it expires.
type Record = (Instant, String);

#[derive(Default, Debug)]
struct Inner {
    links: HashMap<String, Link>,
    /// check id → link id.
    checks: HashMap<String, String>,
    /// (kind, id) → record.
    records: HashMap<(&'static str, String), Record>,
}

/// The links and records of every provider.
#[derive(Default, Debug)]
pub(super) struct Links {
    inner: Mutex<Inner>,
}

impl Links {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // Every change is a few map operations; a panic cannot leave them
        // half done in a way that matters.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// A new link for `user` at `provider` asking `scopes`: (link id, check id).
    pub(super) fn issue(
        &self,
        provider: &str,
        user: &str,
        scopes: BTreeSet<String>,
        ttl: Duration,
    ) -> Result<(String, String), OAuthError> {
        let (link_id, check_id) = (random_id(32)?, random_id(32)?);
        let now = Instant::now();
        let mut inner = self.lock();
        inner.prune(now);
        let mut own: Vec<(Instant, String)> = inner
            .links
            .iter()
            .filter(|(_, l)| l.user == user && l.provider == provider && l.status == LinkStatus::Pending)
            .map(|(id, l)| (l.expires, id.clone()))
            .collect();
        if own.len() >= MAX_PER_USER {
            own.sort();
            for (_, id) in own.iter().take(own.len() + 1 - MAX_PER_USER) {
                inner.remove_link(id);
            }
        }
        let link = Link {
            provider: provider.to_owned(),
            user: user.to_owned(),
            scopes,
            check_id: check_id.clone(),
            expires: now + ttl,
            ttl,
            status: LinkStatus::Pending,
            finished: None,
        };
        inner.checks.insert(check_id.clone(), link_id.clone());
        inner.links.insert(link_id.clone(), link);
        Ok((link_id, check_id))
    }

    /// A link that can still be opened, as it stands; nothing changes.
    pub(super) fn open(&self, provider: &str, link_id: &str) -> Result<OpenLink, Refusal> {
        let inner = self.lock();
        let link = inner.links.get(link_id).filter(|l| l.provider == provider).ok_or(Refusal::Unknown)?;
        match link.status {
            LinkStatus::Pending if link.expires > Instant::now() => Ok(OpenLink {
                link: link_id.to_owned(),
                user: link.user.clone(),
                scopes: link.scopes.clone(),
                ttl: link.ttl,
            }),
            LinkStatus::Pending | LinkStatus::Expired => Err(Refusal::Expired),
            LinkStatus::Completed | LinkStatus::Failed => Err(Refusal::Used),
        }
    }

    /// Records how a link ended (the first end counts).
    pub(super) fn finish(&self, link_id: &str, status: LinkStatus) {
        let mut inner = self.lock();
        if let Some(link) = inner.links.get_mut(link_id) {
            if link.status == LinkStatus::Pending {
                link.status = status;
                link.finished = Some(Instant::now());
            }
        }
    }

    /// The status of the link whose check id this is, for its own caller
    /// only (anyone else learns nothing, not even that it exists).
    pub(super) fn status(&self, provider: &str, check_id: &str, user: &str) -> Option<LinkStatus> {
        let inner = self.lock();
        let link = inner.checks.get(check_id).and_then(|id| inner.links.get(id))?;
        if link.provider != provider || link.user != user {
            return None;
        }
        Some(match link.status {
            LinkStatus::Pending if link.expires <= Instant::now() => LinkStatus::Expired,
            status => status,
        })
    }

    /// Keeps a record of `kind` under `id` for `ttl`.
    pub(super) fn put(&self, kind: &'static str, id: &str, json: String, ttl: Duration) {
        let now = Instant::now();
        let mut inner = self.lock();
        inner.prune(now);
        inner.records.insert((kind, id.to_owned()), (now + ttl, json));
    }

    /// The record of `kind` under `id`, if it is there and alive.
    pub(super) fn get(&self, kind: &'static str, id: &str) -> Option<String> {
        let inner = self.lock();
        let (expires, json) = inner.records.get(&(kind, id.to_owned()))?;
        (*expires > Instant::now()).then(|| json.clone())
    }

    /// Takes the record of `kind` under `id` (once), if it is alive.
    pub(super) fn take(&self, kind: &'static str, id: &str) -> Option<String> {
        let (expires, json) = self.lock().records.remove(&(kind, id.to_owned()))?;
        (expires > Instant::now()).then_some(json)
    }
}

impl Inner {
    fn remove_link(&mut self, id: &str) {
        if let Some(link) = self.links.remove(id) {
            self.checks.remove(&link.check_id);
        }
    }

    /// Drops what no one can use or read any more; past [`MAX_ENTRIES`],
    /// the oldest links or records too.
    fn prune(&mut self, now: Instant) {
        let gone: Vec<String> = self
            .links
            .iter()
            .filter(|(_, l)| l.finished.unwrap_or(l.expires) + STATUS_KEPT <= now)
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove_link(&id);
        }
        self.records.retain(|_, (expires, _)| *expires > now);
        if self.links.len() >= MAX_ENTRIES {
            let mut by_age: Vec<(Instant, String)> = self.links.iter().map(|(id, l)| (l.expires, id.clone())).collect();
            by_age.sort();
            for (_, id) in by_age.into_iter().take(MAX_ENTRIES / 10) {
                self.remove_link(&id);
            }
        }
        if self.records.len() >= MAX_ENTRIES {
            let mut by_age: Vec<(Instant, (&'static str, String))> =
                self.records.iter().map(|(key, (expires, _))| (*expires, key.clone())).collect();
            by_age.sort();
            for (_, key) in by_age.into_iter().take(MAX_ENTRIES / 10) {
                self.records.remove(&key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_until_it_finishes_and_its_status_is_its_users_alone() {
        let links = Links::default();
        let (link, check) = links.issue("p", "alice", BTreeSet::new(), Duration::from_secs(60)).expect("issue");
        assert_eq!(links.status("p", &check, "alice"), Some(LinkStatus::Pending));
        assert_eq!(links.status("p", &check, "bob"), None);
        assert_eq!(links.status("q", &check, "alice"), None);
        assert!(matches!(links.open("q", &link), Err(Refusal::Unknown)));
        for _ in 0..3 {
            assert_eq!(links.open("p", &link).expect("opens again and again").user, "alice");
        }
        links.finish(&link, LinkStatus::Completed);
        links.finish(&link, LinkStatus::Failed);
        assert_eq!(links.status("p", &check, "alice"), Some(LinkStatus::Completed), "the first end counts");
        assert!(matches!(links.open("p", &link), Err(Refusal::Used)));
    }

    #[test]
    fn expired_links_say_so() {
        let links = Links::default();
        let (link, check) = links.issue("p", "alice", BTreeSet::new(), Duration::ZERO).expect("issue");
        assert_eq!(links.status("p", &check, "alice"), Some(LinkStatus::Expired));
        assert!(matches!(links.open("p", &link), Err(Refusal::Expired)));
    }

    #[test]
    fn one_user_holds_a_bounded_number_of_links() {
        let links = Links::default();
        let first = links.issue("p", "alice", BTreeSet::new(), Duration::from_secs(60)).expect("issue");
        for _ in 0..MAX_PER_USER {
            links.issue("p", "alice", BTreeSet::new(), Duration::from_secs(60)).expect("issue");
        }
        let bob = links.issue("p", "bob", BTreeSet::new(), Duration::from_secs(60)).expect("issue");
        assert_eq!(links.status("p", &first.1, "alice"), None, "the oldest went");
        assert_eq!(links.status("p", &bob.1, "bob"), Some(LinkStatus::Pending), "another user's are untouched");
    }

    #[test]
    fn records_are_read_taken_once_and_expire() {
        let links = Links::default();
        links.put("flow", "s1", "{}".into(), Duration::from_secs(60));
        assert_eq!(links.get("flow", "s1").as_deref(), Some("{}"));
        assert_eq!(links.get("login", "s1"), None, "kinds apart");
        assert_eq!(links.take("flow", "s1").as_deref(), Some("{}"));
        assert_eq!(links.take("flow", "s1"), None);
        links.put("flow", "s2", "{}".into(), Duration::ZERO);
        assert_eq!(links.get("flow", "s2"), None);
    }
}
