//! Human approval of risky calls (docs/approvals.md): which `[[approval]]`
//! rule holds a call, and the requests and decisions, kept in a journal
//! (`journal.rs`: `[state] dir`'s `approvals.jsonl`, or a Redis list a
//! fleet shares) so that any replica runs an approved call and a restart
//! forgets nothing.
//!
//! A request is for one call: its caller, its `call_id` (none for clients
//! that send none, such as MCP clients), the tool and a digest of its
//! input. Its id is a digest of these, so every replica, and every repeat
//! of the call, names it alike. Every replica folds the journal in order:
//! the first request written under an id is the request, the first
//! decision written before it expires is its decision.

mod book;

use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::auth::Caller;
use crate::config::{ApprovalConfig, Approver};
use crate::journal::{Journal, JournalError};
use crate::redis_client::SharedRedis;
use book::{Book, Event};
pub use book::{Decision, Request, State};

/// The journal's file in the state directory.
const JOURNAL_FILE: &str = "approvals.jsonl";

/// The Redis list of a fleet's journal.
const JOURNAL_KEY: &str = "otc-gateway:approvals:v1";

/// How many undecided requests one user (or all anonymous callers together)
/// may have: beyond it a held call opens no request, so one caller cannot
/// fill the journal, the memory or the approvers' queue. A replica's bound;
/// replicas racing may each let one more through.
pub const MAX_WAITING_PER_CALLER: usize = 50;

/// Why an approval could not be asked for, decided or used.
#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    /// No request has this id (or it is another caller's).
    #[error("no approval request {0}")]
    Unknown(String),
    /// The request was decided, or expired, before this decision.
    #[error("approval request {id} was already {state}")]
    AlreadyDecided {
        /// The request.
        id: String,
        /// What it is now.
        state: &'static str,
    },
    /// The caller has [`MAX_WAITING_PER_CALLER`] requests waiting already.
    #[error("{0} requests of this caller wait for a decision already")]
    TooManyWaiting(usize),
    /// The journal could not be read or written.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Why a held call will not run: final for that call.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Refusal {
    /// Someone denied it.
    #[error("denied by {by} at {at}")]
    Denied {
        /// Who: `user:<id>` or `admin`.
        by: String,
        /// When, in seconds since the Unix epoch.
        at: u64,
    },
    /// Nobody decided in time.
    #[error("expired at {0}")]
    Expired(u64),
    /// It was approved and ran; its answer is no longer kept to replay.
    #[error("the approved call ran already")]
    Ran,
}

impl Refusal {
    /// Who decided, as a person reads it.
    pub fn decider(by: &str) -> String {
        match by.strip_prefix("user:") {
            Some(user) => user.to_owned(),
            None => "an operator".to_owned(),
        }
    }
}

/// The first `[[approval]]` rule that holds a call of `key`
/// (`Toolkit.Name`), whose tool has `annotations`, by `caller`.
pub(crate) fn rule_for<'r>(
    rules: &'r [ApprovalConfig],
    key: &str,
    annotations: Option<&Value>,
    caller: &Caller,
) -> Option<&'r ApprovalConfig> {
    rules.iter().find(|rule| {
        let tools = rule.tools.is_empty() || rule.tools.iter().any(|p| p.matches(key));
        let annotated = rule.annotations.iter().all(|(name, want)| annotations.and_then(|a| a.get(name)) == Some(want));
        let caller_matches = rule.when.as_ref().is_none_or(|when| crate::policy::applies(when, caller));
        tools && annotated && caller_matches
    })
}

/// The id of the request for one call: the rule, the caller's scope and
/// `call_id` (`idempotency::CallerScope::key`), and the call's fingerprint
/// (tool and input). Long enough that ids do not collide, short enough to
/// read.
pub(crate) fn request_id(rule: &str, caller_call: &str, fingerprint: &str) -> String {
    let mut hasher = Sha256::new();
    for part in ["approval v1", rule, caller_call, fingerprint] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize()[..16].iter().map(|b| format!("{b:02x}")).collect()
}

/// A new request, before it is written.
#[derive(Debug, Clone)]
pub(crate) struct Ask<'a> {
    /// [`request_id`].
    pub id: String,
    /// The rule that holds the call.
    pub rule: &'a ApprovalConfig,
    /// The resolved tool id.
    pub tool: &'a str,
    /// The upstream that would run it.
    pub upstream: &'a str,
    /// The calling user, when authenticated.
    pub caller: Option<&'a str>,
    /// The caller's scope digest: who may check on the request.
    pub owner: String,
    /// The client's `call_id`, when it sent one.
    pub call_id: Option<&'a str>,
    /// The input as the caller sent it (nothing injected yet).
    pub input: &'a Value,
}

/// Every request and decision of one gateway (shared by a fleet through Redis).
pub struct Approvals {
    book: Mutex<Book>,
    journal: Journal,
    /// Held while the journal is read or written, so the book folds
    /// entries once and in order.
    syncing: tokio::sync::Mutex<()>,
}

impl std::fmt::Debug for Approvals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Approvals").field("journal", &self.journal).finish_non_exhaustive()
    }
}

impl Approvals {
    /// Opens the journal in `dir` (or Redis) and folds it; `read_only` for
    /// `otc-gateway check`, which writes nothing.
    pub(crate) async fn open(
        dir: &std::path::Path,
        redis: Option<Arc<SharedRedis>>,
        read_only: bool,
    ) -> Result<Approvals, JournalError> {
        let journal = Journal::open(dir, JOURNAL_FILE, redis.map(|r| (r, JOURNAL_KEY)), read_only)?;
        let approvals = Approvals { book: Mutex::new(Book::default()), journal, syncing: tokio::sync::Mutex::new(()) };
        match approvals.compact().await {
            Ok(Some(dropped)) if dropped > 0 => {
                tracing::info!(entries = dropped, "approvals journal compacted: ended requests forgotten")
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "the approvals journal could not be read or compacted; it is read again at the next request")
            }
        }
        Ok(approvals)
    }

    /// Reads the whole journal and, for the state directory's file, writes
    /// back only what the book keeps: requests forgotten a day after they
    /// ended leave the file. How many entries were dropped; `None` for a
    /// Redis list (never rewritten) or a read-only journal.
    async fn compact(&self) -> Result<Option<usize>, JournalError> {
        let _one = self.syncing.lock().await;
        let (events, next) = self.journal.read_from::<Event>(0).await?;
        let read = events.len();
        self.book().fold(events, next);
        let kept = self.book().events();
        if kept.len() == read {
            return Ok(Some(0));
        }
        let Some(end) = self.journal.replace(&kept).await? else { return Ok(None) };
        self.book().offset = end;
        Ok(Some(read - kept.len()))
    }

    /// Approvals kept nowhere (benchmarks).
    pub fn in_memory() -> Approvals {
        Approvals { book: Mutex::new(Book::default()), journal: Journal::nowhere(), syncing: Default::default() }
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads what this and other replicas wrote since the last read.
    async fn sync(&self) -> Result<(), JournalError> {
        let _one = self.syncing.lock().await;
        self.read_new().await
    }

    async fn read_new(&self) -> Result<(), JournalError> {
        let from = self.book().offset;
        let (events, next) = self.journal.read_from::<Event>(from).await?;
        self.book().fold(events, next);
        Ok(())
    }

    /// Writes `event` and folds it (with whatever others wrote before it),
    /// so the book says what the journal's order decided.
    async fn write(&self, event: Event) -> Result<(), JournalError> {
        let _one = self.syncing.lock().await;
        self.read_new().await?;
        if self.journal.is_kept() {
            self.journal.append(std::slice::from_ref(&event)).await?;
            self.read_new().await
        } else {
            self.book().apply(event);
            Ok(())
        }
    }

    /// The request for a call: the one written already, else a new one
    /// (`true`).
    pub(crate) async fn ask(&self, ask: Ask<'_>) -> Result<(Request, bool), ApprovalError> {
        self.sync().await?;
        let now = book::now();
        {
            let book = self.book();
            if let Some(request) = book.get(&ask.id) {
                return Ok((request, false));
            }
            if book.waiting_of(ask.caller, now) >= MAX_WAITING_PER_CALLER {
                return Err(ApprovalError::TooManyWaiting(MAX_WAITING_PER_CALLER));
            }
        }
        let event = Event::Requested {
            id: ask.id.clone(),
            link: book::random_link(),
            rule: ask.rule.name.clone(),
            approver: ask.rule.approver,
            tool: ask.tool.to_owned(),
            upstream: ask.upstream.to_owned(),
            caller: ask.caller.map(str::to_owned),
            owner: ask.owner,
            call_id: ask.call_id.map(str::to_owned),
            input: ask.input.clone(),
            at: now,
            expires: now + ask.rule.timeout.0.as_secs(),
        };
        self.write(event).await?;
        let request = self.book().get(&ask.id).ok_or_else(|| ApprovalError::Unknown(ask.id.clone()))?;
        audit(&request, "requested", None, request.requested_at, "approval requested");
        Ok((request, true))
    }

    /// A request by id, as the journal has it now.
    pub async fn get(&self, id: &str) -> Result<Option<Request>, ApprovalError> {
        self.sync().await?;
        Ok(self.book().get(id))
    }

    /// A request by its page's link.
    pub(crate) async fn by_link(&self, link: &str) -> Result<Option<Request>, ApprovalError> {
        self.sync().await?;
        Ok(self.book().by_link(link))
    }

    /// A decision on a pending request by `by` (`user:<id>` or `admin`).
    pub async fn decide(
        &self,
        id: &str,
        approve: bool,
        by: &str,
        metrics: &crate::metrics::Metrics,
    ) -> Result<Request, ApprovalError> {
        self.sync().await?;
        let pending = self.book().get(id).ok_or_else(|| ApprovalError::Unknown(id.to_owned()))?;
        if pending.state() != State::Pending {
            return Err(ApprovalError::AlreadyDecided { id: id.to_owned(), state: pending.state().as_str() });
        }
        let event = Event::Decided { id: id.to_owned(), approve, by: by.to_owned(), at: book::now() };
        self.write(event).await?;
        let request = self.book().get(id).ok_or_else(|| ApprovalError::Unknown(id.to_owned()))?;
        // Another replica's decision (or the clock) may have come first.
        let ours = request.decision.as_ref().is_some_and(|d| d.by == by && d.approved == approve);
        if !ours {
            return Err(ApprovalError::AlreadyDecided { id: id.to_owned(), state: request.state().as_str() });
        }
        let at = request.decision.as_ref().map_or(0, |d| d.at);
        audit(&request, request.state().as_str(), Some(by), at, "approval decided");
        metrics.record_approval(&request.rule, request.state().as_str());
        Ok(request)
    }

    /// Records that the approved call ran (once: a later repeat is answered
    /// from that run, never run again).
    pub(crate) async fn used(&self, id: &str) -> Result<(), ApprovalError> {
        self.write(Event::Used { id: id.to_owned(), at: book::now() }).await?;
        Ok(())
    }

    /// The requests in `state` (all with `None`), newest first.
    pub async fn list(&self, state: Option<State>) -> Result<Vec<Request>, ApprovalError> {
        self.sync().await?;
        let now = book::now();
        let mut requests: Vec<Request> =
            self.book().all().filter(|r| state.is_none_or(|s| r.state_at(now) == s)).collect();
        requests.sort_by(|a, b| b.requested_at.cmp(&a.requested_at).then(a.id.cmp(&b.id)));
        Ok(requests)
    }

    /// Whether this is the first time this replica sees `id` expired (the
    /// metric counts each expiry once a replica).
    pub(crate) fn first_expiry_seen(&self, id: &str) -> bool {
        self.book().expiry_counted.insert(id.to_owned())
    }

    /// How many requests wait for a decision.
    pub fn pending(&self) -> usize {
        let now = book::now();
        self.book().all().filter(|r| r.state_at(now) == State::Pending).count()
    }
}

/// One audit record: a log line on the `otc_gateway::audit` target (one
/// JSON object with `--log-format json`).
fn audit(request: &Request, decision: &str, decider: Option<&str>, at: u64, message: &'static str) {
    tracing::info!(
        target: "otc_gateway::audit",
        approval = request.id,
        call_id = request.call_id.as_deref(),
        tool = request.tool,
        caller = request.caller.as_deref().unwrap_or("anonymous"),
        rule = request.rule,
        decision,
        decider,
        at,
        "{message}"
    );
}

impl Approver {
    /// Whether `decider` may decide a request of this approver for `caller`:
    /// the calling user themselves, or an operator.
    pub(crate) fn lets(self, request: &Request, decider: &Decider<'_>) -> bool {
        match (self, decider) {
            (Approver::Caller, Decider::User(user)) => request.caller.as_deref() == Some(*user),
            (Approver::Admin, Decider::Admin) => true,
            _ => false,
        }
    }
}

/// Who decides.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Decider<'a> {
    /// A browser signed in as this user.
    User(&'a str),
    /// An operator with the admin token.
    Admin,
}

impl Decider<'_> {
    /// As the journal and the audit log name them.
    pub(crate) fn label(&self) -> String {
        match self {
            Decider::User(user) => format!("user:{user}"),
            Decider::Admin => "admin".to_owned(),
        }
    }
}
