//! Tool integrity: what clients are shown of a tool is pinned, and a change
//! waits for an operator (docs/security.md, "Tool definitions are pinned").
//!
//! The first definition of each tool the gateway serves is pinned (trust on
//! first use), unless the scan (`scan.rs`) finds hidden instructions in it.
//! A later definition of the same tool (`Toolkit.Name@version` from an OTC
//! upstream, which versions its tools; `Toolkit.Name` from MCP and OpenAPI
//! upstreams, whose versions the gateway or the document assigns) is a
//! [`Change`]: under `[catalog] pin = "hold"` clients keep the pinned
//! definition until an operator approves it; a flagged new tool is not
//! served at all under `suspicious = "hold"`.
//!
//! Every decision is an [`Event`] in a journal (`journal.rs`: a file in the
//! state directory, or a Redis list a fleet shares). The [`PinBook`] is the
//! journal folded in order, so every replica reading one journal agrees:
//! the first pin of a tool written wins, and the first decision on a change.
//! A change's id is a digest of the tool, the pinned definition and the
//! proposed one, so replicas name it alike and an upstream flapping between
//! two definitions makes one change, not a stream of them.

mod book;
pub mod scan;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde::Serialize;

use crate::config::Review;
use crate::dialect::CatalogTool;
use crate::journal::Journal;
pub use crate::journal::JournalError;
use crate::redis_client::SharedRedis;
pub use book::{Change, ChangeKind, ChangeState, Offer, Verdict};
use book::{Event, PinBook};

/// The journal's file in the state directory.
pub(crate) const JOURNAL_FILE: &str = "tool-pins.jsonl";

/// The Redis list of a fleet's journal.
const JOURNAL_KEY: &str = "otc-gateway:pins:v1";

/// `[catalog] pin` and `suspicious`, as in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modes {
    /// What a changed definition does.
    pub pin: Review,
    /// What a flagged definition does.
    pub suspicious: Review,
}

/// The pins and changes of one gateway (shared by a fleet through Redis).
pub struct Integrity {
    book: Mutex<PinBook>,
    journal: Journal,
    /// Rung when the book holds events to write.
    written: tokio::sync::Notify,
    /// Held while the book's events are written, so the journal keeps the
    /// order they were decided in (a decision after its change).
    writing: tokio::sync::Mutex<()>,
    /// Rung when another replica's decisions changed what is served.
    republish: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for Integrity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Integrity").field("journal", &self.journal).finish_non_exhaustive()
    }
}

/// Why an operator's decision was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    /// No change has this id.
    #[error("no change {0}")]
    Unknown(String),
    /// It was decided already.
    #[error("change {id} was already {state}")]
    Decided {
        /// The change.
        id: String,
        /// How it was decided.
        state: &'static str,
    },
    /// The decision could not be written.
    #[error(transparent)]
    Journal(#[from] JournalError),
}

/// Where pins are kept.
pub(crate) enum Keep<'a> {
    /// Nowhere: pins live as long as the process (`check`, which must not
    /// write a running gateway's journal, reads it and writes nothing).
    ReadOnly(&'a std::path::Path, Option<Arc<SharedRedis>>),
    /// `[state] dir` (`tool-pins.jsonl`), or the Redis the fleet shares.
    State(&'a std::path::Path, Option<Arc<SharedRedis>>),
}

impl Integrity {
    /// Opens the journal and folds it. A Redis that cannot be read now is
    /// read again by [`Integrity::sync`]; until then the book starts empty
    /// (docs/security.md says what that means).
    pub(crate) async fn open(keep: Keep<'_>, republish: Arc<tokio::sync::Notify>) -> Result<Integrity, JournalError> {
        let (dir, redis, read_only) = match keep {
            Keep::ReadOnly(dir, redis) => (dir, redis, true),
            Keep::State(dir, redis) => (dir, redis, false),
        };
        let journal = Journal::open(dir, JOURNAL_FILE, redis.map(|r| (r, JOURNAL_KEY)), read_only)?;
        let mut book = PinBook::default();
        match journal.read_from(0).await {
            Ok((events, next)) => {
                book.fold(events, next);
            }
            Err(e) => {
                tracing::warn!(error = %e, "tool pins could not be read; they are read again every poll interval")
            }
        }
        let (written, writing) = (tokio::sync::Notify::new(), tokio::sync::Mutex::new(()));
        Ok(Integrity { book: Mutex::new(book), journal, written, writing, republish })
    }

    /// Pins kept in memory only, nothing read or written (benchmarks).
    pub fn in_memory() -> Integrity {
        let journal = Journal::nowhere();
        let (written, writing) = (tokio::sync::Notify::new(), tokio::sync::Mutex::new(()));
        let republish = Arc::new(tokio::sync::Notify::new());
        Integrity { book: Mutex::new(PinBook::default()), journal, written, writing, republish }
    }

    fn book(&self) -> MutexGuard<'_, PinBook> {
        self.book.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What to serve of each tool a merge found (one verdict per offer, in
    /// order). `foreign` tells, for an offer's upstream, whether a reference
    /// names another toolkit's tool (the scan's shadowing rule).
    pub fn review(
        &self,
        offers: &[Offer<'_>],
        modes: Modes,
        foreign: &dyn Fn(&Offer<'_>, &str) -> Option<String>,
    ) -> Vec<Verdict> {
        let mut book = self.book();
        let verdicts = offers.iter().map(|offer| book.verdict(offer, modes, &|r| foreign(offer, r))).collect();
        if book.has_outbox() {
            self.written.notify_one();
        }
        verdicts
    }

    /// The changes in `state` (all of them with `None`), newest first.
    pub fn changes(&self, state: Option<ChangeState>) -> Vec<ChangeView> {
        let book = self.book();
        let mut changes: Vec<ChangeView> = book
            .changes()
            .filter(|c| state.is_none_or(|s| c.state == s))
            .map(|c| ChangeView { approved: book.pinned_shown(&c.key), change: c.clone() })
            .collect();
        changes.sort_by(|a, b| b.change.seen_at.cmp(&a.change.seen_at).then(a.change.id.cmp(&b.change.id)));
        changes
    }

    /// How many changes wait for a decision.
    pub fn pending(&self) -> usize {
        self.book().changes().filter(|c| c.state == ChangeState::Pending).count()
    }

    /// An operator's decision on a change: written to the journal first,
    /// then applied; the catalog is published again so clients see it.
    pub async fn decide(&self, id: &str, approve: bool, by: &str) -> Result<Change, ReviewError> {
        let event = {
            let book = self.book();
            let change = book.change(id).ok_or_else(|| ReviewError::Unknown(id.to_owned()))?;
            if change.state != ChangeState::Pending {
                return Err(ReviewError::Decided { id: id.to_owned(), state: change.state.as_str() });
            }
            Event::Decided { id: id.to_owned(), approve, by: by.to_owned(), at: book::now() }
        };
        {
            let _in_order = self.writing.lock().await;
            let mut events = self.book().take_outbox();
            events.push(event.clone());
            if let Err(e) = self.journal.append(&events).await {
                events.pop();
                self.book().requeue(events);
                return Err(e.into());
            }
        }
        let change = {
            let mut book = self.book();
            book.apply(event, true);
            book.change(id).cloned().ok_or_else(|| ReviewError::Unknown(id.to_owned()))?
        };
        tracing::info!(
            change = change.id,
            tool = change.tool,
            upstream = change.upstream,
            kind = change.kind.as_str(),
            decision = change.state.as_str(),
            by,
            "tool definition change decided"
        );
        self.republish.notify_one();
        Ok(change)
    }

    /// Writes the events decided here to the journal (at shutdown too).
    pub async fn flush(&self) {
        let _in_order = self.writing.lock().await;
        let outbox = self.book().take_outbox();
        if !outbox.is_empty() {
            if let Err(e) = self.journal.append(&outbox).await {
                tracing::warn!(error = %e, events = outbox.len(), "tool pins not written; trying again");
                self.book().requeue(outbox);
            }
        }
    }

    /// Writes what the book holds to the journal and, for a shared one,
    /// reads what other replicas wrote, forever: after each write, and
    /// every `every` (a fleet's decisions reach this replica within it).
    pub async fn sync(self: Arc<Self>, every: Duration) {
        loop {
            self.flush().await;
            let from = self.book().journal_len();
            match self.journal.read_from(from).await {
                Ok((events, next)) if next != from || !events.is_empty() => {
                    if self.book().fold(events, next) {
                        self.republish.notify_one();
                    }
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "tool pins not read; trying again"),
            }
            if !self.book().has_outbox() {
                let _ = tokio::time::timeout(every, self.written.notified()).await;
            } else {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

/// A change as `GET /changes` shows it: with the definition pinned now.
#[derive(Debug, Clone, Serialize)]
pub struct ChangeView {
    /// The change.
    #[serde(flatten)]
    pub change: Change,
    /// What clients are shown now, when the tool is pinned.
    pub approved: Option<serde_json::Value>,
}

/// The tools a catalog does not serve until an operator decides.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct HeldTool {
    /// The tool id as the upstream published it.
    pub tool: String,
    /// The upstream that serves it.
    pub upstream: String,
    /// The change that waits.
    pub change: String,
    /// `new` (flagged by the scan) or `changed` (kept at its pinned
    /// definition: this names the definition that is not shown).
    pub kind: ChangeKind,
}

/// The pins' own digests, written as hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    bytes.iter().flat_map(|b| [DIGITS[usize::from(b >> 4)], DIGITS[usize::from(b & 15)]]).map(char::from).collect()
}

/// A tool as an [`Offer`] names it.
pub(crate) fn tool_key(tool: &CatalogTool, by_name: bool) -> &str {
    if by_name {
        &tool.key
    } else {
        &tool.definition.id
    }
}
