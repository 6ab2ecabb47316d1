//! The approvals journal folded in order: each request, its decision and
//! whether its call ran.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Approver;

/// How long a request is remembered after it expired or was decided: a
/// denial stays final, and `GET /approvals` lists it, for this long.
const KEPT_FOR_SECS: u64 = 24 * 3600;

/// One journal entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(super) enum Event {
    /// A call was held for approval.
    Requested {
        id: String,
        link: String,
        rule: String,
        approver: Approver,
        tool: String,
        upstream: String,
        caller: Option<String>,
        owner: String,
        call_id: Option<String>,
        input: Value,
        at: u64,
        expires: u64,
    },
    /// Someone decided.
    Decided { id: String, approve: bool, by: String, at: u64 },
    /// The approved call ran.
    Used { id: String, at: u64 },
}

/// Where a request stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Waiting for its decision.
    Pending,
    /// Approved: the call runs once.
    Approved,
    /// Denied: final.
    Denied,
    /// Not decided in time: final.
    Expired,
}

impl State {
    /// As `GET /approvals` and the metric name it.
    pub fn as_str(self) -> &'static str {
        match self {
            State::Pending => "pending",
            State::Approved => "approved",
            State::Denied => "denied",
            State::Expired => "expired",
        }
    }

    /// The state `?state=` names.
    pub fn parse(text: &str) -> Option<State> {
        [State::Pending, State::Approved, State::Denied, State::Expired].into_iter().find(|s| s.as_str() == text)
    }
}

/// A decision.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Decision {
    /// Approved, or denied.
    pub approved: bool,
    /// Who decided: `user:<id>` or `admin`.
    pub by: String,
    /// When, in seconds since the Unix epoch.
    pub at: u64,
}

/// One request, as `GET /approvals` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    /// Its id (a digest of the call it is for).
    pub id: String,
    /// The secret part of its page's URL.
    #[serde(skip)]
    pub(crate) link: String,
    /// The rule that held the call.
    pub rule: String,
    /// Who decides.
    pub approver: Approver,
    /// The resolved tool id.
    pub tool: String,
    /// The upstream that runs it.
    pub upstream: String,
    /// The calling user; `None` for an anonymous caller.
    pub caller: Option<String>,
    /// Who may check on it: a digest of the caller's scope.
    #[serde(skip)]
    pub(crate) owner: String,
    /// The client's `call_id`, when it sent one.
    pub call_id: Option<String>,
    /// The input as the caller sent it (nothing the gateway injects).
    pub input: Value,
    /// When it was asked for, in seconds since the Unix epoch.
    pub requested_at: u64,
    /// When it expires undecided.
    pub expires_at: u64,
    /// The decision, once made in time.
    pub decision: Option<Decision>,
    /// When the approved call ran.
    pub used_at: Option<u64>,
    /// [`State`] when listed.
    pub state: &'static str,
}

impl Request {
    /// Where it stands now.
    pub fn state(&self) -> State {
        self.state_at(now())
    }

    /// Where it stands at `now`.
    pub fn state_at(&self, now: u64) -> State {
        match &self.decision {
            Some(d) if d.approved => State::Approved,
            Some(_) => State::Denied,
            None if now >= self.expires_at => State::Expired,
            None => State::Pending,
        }
    }
}

/// The journal folded.
#[derive(Debug, Default)]
pub(super) struct Book {
    requests: HashMap<String, Request>,
    links: HashMap<String, String>,
    /// Requests whose expiry this replica has counted.
    pub(super) expiry_counted: std::collections::HashSet<String>,
    /// Where the next read of the journal starts.
    pub(super) offset: u64,
}

impl Book {
    /// Applies entries read from the journal, ending at `next`.
    pub(super) fn fold(&mut self, events: Vec<Event>, next: u64) {
        for event in events {
            self.apply(event);
        }
        self.offset = next;
        self.forget_old(now());
    }

    /// One entry: the first request under an id and the first decision
    /// made before it expired count; a later one changes nothing.
    pub(super) fn apply(&mut self, event: Event) {
        match event {
            Event::Requested {
                id,
                link,
                rule,
                approver,
                tool,
                upstream,
                caller,
                owner,
                call_id,
                input,
                at,
                expires,
            } => {
                if self.requests.contains_key(&id) {
                    return;
                }
                self.links.insert(link.clone(), id.clone());
                let request = Request {
                    id: id.clone(),
                    link,
                    rule,
                    approver,
                    tool,
                    upstream,
                    caller,
                    owner,
                    call_id,
                    input,
                    requested_at: at,
                    expires_at: expires,
                    decision: None,
                    used_at: None,
                    state: "",
                };
                self.requests.insert(id, request);
            }
            Event::Decided { id, approve, by, at } => {
                if let Some(request) = self.requests.get_mut(&id) {
                    if request.decision.is_none() && at < request.expires_at {
                        request.decision = Some(Decision { approved: approve, by, at });
                    }
                }
            }
            Event::Used { id, at } => {
                if let Some(request) = self.requests.get_mut(&id) {
                    request.used_at.get_or_insert(at);
                }
            }
        }
    }

    /// Drops requests finished more than [`KEPT_FOR_SECS`] ago.
    fn forget_old(&mut self, now: u64) {
        let old = |r: &Request| {
            let ended = r.decision.as_ref().map_or(r.expires_at, |d| d.at.min(r.expires_at)).max(r.expires_at);
            ended + KEPT_FOR_SECS < now
        };
        let gone: Vec<String> = self.requests.values().filter(|r| old(r)).map(|r| r.id.clone()).collect();
        for id in gone {
            if let Some(r) = self.requests.remove(&id) {
                self.links.remove(&r.link);
                self.expiry_counted.remove(&id);
            }
        }
    }

    /// A request with its state filled in.
    pub(super) fn get(&self, id: &str) -> Option<Request> {
        let now = now();
        self.requests.get(id).map(|r| Request { state: r.state_at(now).as_str(), ..r.clone() })
    }

    /// The request a page's link is for.
    pub(super) fn by_link(&self, link: &str) -> Option<Request> {
        self.links.get(link).and_then(|id| self.get(id))
    }

    /// How many of `caller`'s requests (`None`: anonymous callers') wait
    /// for a decision at `now`.
    pub(super) fn waiting_of(&self, caller: Option<&str>, now: u64) -> usize {
        self.requests.values().filter(|r| r.caller.as_deref() == caller && r.state_at(now) == State::Pending).count()
    }

    /// The entries that rebuild this book: each request kept, then its
    /// decision and its run, oldest request first. What was forgotten, and
    /// what changed nothing (a second request under an id, a late or second
    /// decision), is not among them.
    pub(super) fn events(&self) -> Vec<Event> {
        let mut requests: Vec<&Request> = self.requests.values().collect();
        requests.sort_by(|a, b| (a.requested_at, &a.id).cmp(&(b.requested_at, &b.id)));
        let mut events = Vec::with_capacity(requests.len());
        for r in requests {
            events.push(Event::Requested {
                id: r.id.clone(),
                link: r.link.clone(),
                rule: r.rule.clone(),
                approver: r.approver,
                tool: r.tool.clone(),
                upstream: r.upstream.clone(),
                caller: r.caller.clone(),
                owner: r.owner.clone(),
                call_id: r.call_id.clone(),
                input: r.input.clone(),
                at: r.requested_at,
                expires: r.expires_at,
            });
            if let Some(d) = &r.decision {
                events.push(Event::Decided { id: r.id.clone(), approve: d.approved, by: d.by.clone(), at: d.at });
            }
            if let Some(at) = r.used_at {
                events.push(Event::Used { id: r.id.clone(), at });
            }
        }
        events
    }

    /// Every request, states filled in.
    pub(super) fn all(&self) -> impl Iterator<Item = Request> + '_ {
        let now = now();
        self.requests.values().map(move |r| Request { state: r.state_at(now).as_str(), ..r.clone() })
    }
}

/// Seconds since the Unix epoch.
pub(super) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// A page link's secret part: 32 random bytes, base64url.
pub(super) fn random_link() -> String {
    use base64::Engine as _;
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 32];
    // The system's randomness fails only on a broken host; a link made of
    // zeros would then still need the caller's own signed-in browser.
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requested(id: &str, at: u64, expires: u64) -> Event {
        Event::Requested {
            id: id.into(),
            link: format!("link-{id}"),
            rule: "r".into(),
            approver: Approver::Admin,
            tool: "Repo.Delete@1.0.0".into(),
            upstream: "u".into(),
            caller: Some("alice".into()),
            owner: "o".into(),
            call_id: None,
            input: serde_json::json!({"repo": "x"}),
            at,
            expires,
        }
    }

    #[test]
    fn the_first_request_and_the_first_timely_decision_count() {
        let t = now();
        let mut book = Book::default();
        book.fold(
            vec![
                requested("a", t, t + 600),
                requested("a", t + 1, t + 9999),
                Event::Decided { id: "a".into(), approve: false, by: "admin".into(), at: t + 2 },
                Event::Decided { id: "a".into(), approve: true, by: "user:alice".into(), at: t + 3 },
            ],
            4,
        );
        let a = book.get("a").unwrap();
        assert_eq!((a.expires_at, a.state()), (t + 600, State::Denied));
        assert_eq!(book.by_link("link-a").unwrap().id, "a");
        assert_eq!(book.offset, 4);
    }

    #[test]
    fn a_decision_after_the_expiry_changes_nothing_and_old_requests_are_forgotten() {
        let t = now();
        let mut book = Book::default();
        book.fold(
            vec![
                requested("late", t - 100, t - 10),
                Event::Decided { id: "late".into(), approve: true, by: "admin".into(), at: t - 5 },
                requested("old", t - 3 * KEPT_FOR_SECS, t - 2 * KEPT_FOR_SECS),
            ],
            3,
        );
        assert_eq!(book.get("late").unwrap().state(), State::Expired);
        assert!(book.get("old").is_none() && book.by_link("link-old").is_none());
    }

    #[test]
    fn the_entries_kept_rebuild_the_same_book_without_what_changed_nothing() {
        let t = now();
        let mut book = Book::default();
        let read = vec![
            requested("old", t - 3 * KEPT_FOR_SECS, t - 2 * KEPT_FOR_SECS),
            requested("a", t, t + 600),
            requested("a", t + 1, t + 9999),
            Event::Decided { id: "a".into(), approve: true, by: "admin".into(), at: t + 2 },
            Event::Decided { id: "a".into(), approve: false, by: "admin".into(), at: t + 3 },
            Event::Used { id: "a".into(), at: t + 4 },
            requested("b", t - 5, t + 600),
        ];
        book.fold(read, 7);
        let kept = book.events();
        assert_eq!(kept.len(), 4, "{kept:?}");
        let mut again = Book::default();
        again.fold(kept, 4);
        for id in ["a", "b"] {
            let (was, is) = (book.get(id).unwrap(), again.get(id).unwrap());
            assert_eq!(
                (was.state, was.decision, was.used_at, was.link, was.expires_at, was.input),
                (is.state, is.decision, is.used_at, is.link, is.expires_at, is.input)
            );
        }
        assert_eq!(again.get("a").unwrap().used_at, Some(t + 4), "the run is kept");
        assert!(again.get("old").is_none());
    }
}
