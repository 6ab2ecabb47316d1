//! Challenges in progress: the single-use links handed to callers, their
//! `check_url` status, and the `state` of each flow sent to a provider.
//!
//! Kept in this process's memory: a link is opened, and its callback
//! answered, by the gateway that issued it (a fleet routes `/oauth/` to one
//! replica, or shares grants through the Vault store and lets a stray
//! callback fail cleanly). Bounded: expired entries are dropped as new ones
//! come, and one user holds at most [`MAX_PER_USER`] open links.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::seal::random_id;
use super::OAuthError;

/// Open links one user may hold at once; the oldest goes first.
const MAX_PER_USER: usize = 20;
/// Open links and flows in all, beyond which the oldest are dropped.
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
    /// The provider refused, or the code could not be exchanged.
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
}

/// One issued link.
#[derive(Debug)]
struct Link {
    provider: String,
    user: String,
    scopes: BTreeSet<String>,
    check_id: String,
    /// Until opened, when the link expires; once opened, when its flow does.
    expires: Instant,
    /// The lifetime of the link, and of its flow from the moment it opens.
    ttl: Duration,
    opened: bool,
    status: LinkStatus,
    finished: Option<Instant>,
}

/// A flow sent to a provider: what the callback's `state` stands for.
#[derive(Debug, Clone)]
pub(super) struct Flow {
    /// The link it came from.
    pub link_id: String,
    /// The provider it was sent to.
    pub provider: String,
    /// The caller it is for.
    pub user: String,
    /// The scopes asked for.
    pub scopes: BTreeSet<String>,
    /// The PKCE verifier.
    pub verifier: String,
    /// The redirect URI sent (the token request repeats it).
    pub redirect_uri: String,
    expires: Instant,
}

impl Flow {
    /// A flow of the link `link_id` (as its store names it) with `left` to
    /// run.
    pub(super) fn new(
        link_id: String,
        provider: &str,
        user: &str,
        scopes: BTreeSet<String>,
        verifier: String,
        redirect_uri: String,
        left: Duration,
    ) -> Flow {
        Flow {
            link_id,
            provider: provider.to_owned(),
            user: user.to_owned(),
            scopes,
            verifier,
            redirect_uri,
            expires: Instant::now() + left,
        }
    }
}

/// Why a link or a callback's state cannot be used.
#[derive(Debug, Clone)]
pub(super) enum Refusal {
    /// Never issued (or forgotten), or for another provider.
    Unknown,
    /// Past its lifetime.
    Expired,
    /// Opened before: links are single-use.
    Used,
    /// The shared store could not answer.
    Unavailable(OAuthError),
}

#[derive(Default, Debug)]
struct Inner {
    links: HashMap<String, Link>,
    /// check id → link id.
    checks: HashMap<String, String>,
    /// state → flow.
    flows: HashMap<String, Flow>,
}

/// The links and flows of every provider.
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
            opened: false,
            status: LinkStatus::Pending,
            finished: None,
        };
        inner.checks.insert(check_id.clone(), link_id.clone());
        inner.links.insert(link_id.clone(), link);
        Ok((link_id, check_id))
    }

    /// Opens a link (once): the flow to send to the provider, under a new
    /// `state`. Returns (state, flow).
    pub(super) fn open(
        &self,
        provider: &str,
        link_id: &str,
        verifier: String,
        redirect_uri: String,
    ) -> Result<(String, Flow), Refusal> {
        let state = random_id(32).map_err(Refusal::Unavailable)?;
        let now = Instant::now();
        let mut inner = self.lock();
        let link = inner.links.get_mut(link_id).filter(|l| l.provider == provider).ok_or(Refusal::Unknown)?;
        if link.opened {
            return Err(Refusal::Used);
        }
        if link.expires <= now {
            return Err(Refusal::Expired);
        }
        link.opened = true;
        // The person at the provider gets a whole lifetime, however late in
        // the link's they opened it.
        link.expires = now + link.ttl;
        let flow =
            Flow::new(link_id.to_owned(), provider, &link.user, link.scopes.clone(), verifier, redirect_uri, link.ttl);
        inner.flows.insert(state.clone(), flow.clone());
        Ok((state, flow))
    }

    /// Takes the flow a callback's `state` names (once).
    pub(super) fn take_flow(&self, provider: &str, state: &str) -> Result<Flow, Refusal> {
        let mut inner = self.lock();
        let flow = match inner.flows.get(state) {
            Some(flow) if flow.provider == provider => inner.flows.remove(state).ok_or(Refusal::Unknown)?,
            _ => return Err(Refusal::Unknown),
        };
        if flow.expires <= Instant::now() {
            inner.finish(&flow.link_id, LinkStatus::Expired);
            return Err(Refusal::Expired);
        }
        Ok(flow)
    }

    /// Records how a flow ended.
    pub(super) fn finish(&self, link_id: &str, status: LinkStatus) {
        self.lock().finish(link_id, status);
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
}

impl Inner {
    fn remove_link(&mut self, id: &str) {
        if let Some(link) = self.links.remove(id) {
            self.checks.remove(&link.check_id);
        }
    }

    fn finish(&mut self, link_id: &str, status: LinkStatus) {
        if let Some(link) = self.links.get_mut(link_id) {
            if link.status == LinkStatus::Pending {
                link.status = status;
                link.finished = Some(Instant::now());
            }
        }
    }

    /// Drops what no one can use or read any more; past [`MAX_ENTRIES`],
    /// the oldest links too.
    fn prune(&mut self, now: Instant) {
        let gone: Vec<String> = self
            .links
            .iter()
            .filter(|(_, l)| {
                let ended = l.finished.unwrap_or(l.expires);
                ended + STATUS_KEPT <= now
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in gone {
            self.remove_link(&id);
        }
        self.flows.retain(|_, f| f.expires > now);
        if self.links.len() >= MAX_ENTRIES {
            let mut by_age: Vec<(Instant, String)> = self.links.iter().map(|(id, l)| (l.expires, id.clone())).collect();
            by_age.sort();
            for (_, id) in by_age.into_iter().take(MAX_ENTRIES / 10) {
                self.remove_link(&id);
            }
        }
        if self.flows.len() >= MAX_ENTRIES {
            self.flows.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_opens_once_and_its_status_is_its_users_alone() {
        let links = Links::default();
        let (link, check) = links.issue("p", "alice", BTreeSet::new(), Duration::from_secs(60)).expect("issue");
        assert_eq!(links.status("p", &check, "alice"), Some(LinkStatus::Pending));
        assert_eq!(links.status("p", &check, "bob"), None);
        assert_eq!(links.status("q", &check, "alice"), None);
        assert!(matches!(links.open("q", &link, "v".into(), "r".into()), Err(Refusal::Unknown)));
        let (state, flow) = links.open("p", &link, "v".into(), "r".into()).expect("open");
        assert_eq!(flow.user, "alice");
        assert!(matches!(links.open("p", &link, "v".into(), "r".into()), Err(Refusal::Used)));
        assert!(matches!(links.take_flow("q", &state), Err(Refusal::Unknown)));
        let flow = links.take_flow("p", &state).expect("flow");
        assert!(matches!(links.take_flow("p", &state), Err(Refusal::Unknown)));
        links.finish(&flow.link_id, LinkStatus::Completed);
        assert_eq!(links.status("p", &check, "alice"), Some(LinkStatus::Completed));
    }

    #[test]
    fn expired_links_say_so() {
        let links = Links::default();
        let (link, check) = links.issue("p", "alice", BTreeSet::new(), Duration::ZERO).expect("issue");
        assert_eq!(links.status("p", &check, "alice"), Some(LinkStatus::Expired));
        assert!(matches!(links.open("p", &link, "v".into(), "r".into()), Err(Refusal::Expired)));
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
}
