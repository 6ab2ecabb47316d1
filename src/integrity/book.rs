//! The pin book: the journal's events folded in order, and the decision
//! for each tool a merge offers.

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::scan::{self, Finding};
use super::{hex, tool_key, Modes};
use crate::config::Review;
use crate::dialect::CatalogTool;

/// One tool as a merge found it.
#[derive(Debug, Clone, Copy)]
pub struct Offer<'a> {
    /// The winning definition.
    pub tool: &'a Arc<CatalogTool>,
    /// The upstream that serves it (the winner).
    pub upstream: &'a str,
    /// Pinned by `Toolkit.Name` (MCP and OpenAPI upstreams) rather than by
    /// `Toolkit.Name@version` (OTC upstreams, which version their tools).
    pub by_name: bool,
}

/// What to serve of an offered tool.
#[derive(Debug, Clone)]
pub enum Verdict {
    /// The tool as offered.
    Serve,
    /// The pinned definition, in place of the one offered (a change waits).
    Approved(Arc<CatalogTool>, String),
    /// Nothing: the tool waits for review (the change's id).
    Held(String),
}

/// Whether a change is a tool seen for the first time, or another
/// definition of a pinned one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    /// A tool not pinned yet (proposed because the scan flagged it).
    New,
    /// Another definition of a pinned tool.
    Changed,
}

impl ChangeKind {
    /// As the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::New => "new",
            ChangeKind::Changed => "changed",
        }
    }
}

/// Where a change stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeState {
    /// Waits for an operator.
    Pending,
    /// Approved: the proposed definition is pinned.
    Approved,
    /// Rejected: never served, and not offered again.
    Rejected,
}

impl ChangeState {
    /// As the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeState::Pending => "pending",
            ChangeState::Approved => "approved",
            ChangeState::Rejected => "rejected",
        }
    }

    /// From the API's word.
    pub fn parse(text: &str) -> Option<ChangeState> {
        match text {
            "pending" => Some(ChangeState::Pending),
            "approved" => Some(ChangeState::Approved),
            "rejected" => Some(ChangeState::Rejected),
            _ => None,
        }
    }
}

/// A definition that waits for (or had) an operator's review.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Change {
    /// A digest of the tool, the pinned definition and the proposed one.
    pub id: String,
    /// What the tool is pinned by (`Toolkit.Name@version` or `Toolkit.Name`).
    pub key: String,
    /// The tool id as proposed.
    pub tool: String,
    /// The upstream that proposed it.
    pub upstream: String,
    /// New or changed.
    pub kind: ChangeKind,
    /// What the scan found in the proposed definition.
    pub findings: Vec<Finding>,
    /// The proposed definition, as clients would be shown it.
    pub proposed: Value,
    /// Its digest.
    pub proposed_digest: String,
    /// The digest of the definition pinned when it was proposed.
    pub pinned_digest: Option<String>,
    /// When it was first seen (seconds since the Unix epoch).
    pub seen_at: u64,
    /// Where it stands.
    pub state: ChangeState,
    /// Who decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<String>,
    /// When.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<u64>,
}

/// One line of the journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub(super) enum Event {
    /// A tool seen for the first time, pinned.
    Pinned {
        /// What it is pinned by.
        key: String,
        /// Its digest.
        digest: String,
        /// What clients are shown.
        shown: Value,
    },
    /// A definition for review.
    Proposed(Box<Change>),
    /// An operator's decision.
    Decided {
        /// The change.
        id: String,
        /// Approved or rejected.
        approve: bool,
        /// Who.
        by: String,
        /// When.
        at: u64,
    },
}

/// A pinned definition.
#[derive(Debug)]
struct Pin {
    digest: [u8; 32],
    tool: Arc<CatalogTool>,
    /// Read from the journal (a fleet's), not only pinned here: a pin of
    /// another replica that the journal holds first replaces it.
    confirmed: bool,
}

/// The journal folded, and what this replica has yet to write.
#[derive(Debug, Default)]
pub(super) struct PinBook {
    pins: HashMap<String, Pin>,
    changes: BTreeMap<String, Change>,
    /// The pending change of each tool that has one (by what it is pinned
    /// by): an index of `changes`, kept because every merge asks it for
    /// every tool whose definition is new.
    waiting: HashMap<String, String>,
    /// Events decided here, not written yet.
    outbox: Vec<Event>,
    /// How far the journal has been read.
    journal_len: u64,
}

/// Seconds since the Unix epoch.
pub(super) fn now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn change_id(key: &str, pinned: Option<&[u8; 32]>, proposed: &[u8; 32]) -> String {
    let mut hasher = Sha256::new();
    hasher.update(key.as_bytes());
    hasher.update([0]);
    hasher.update(pinned.map_or(&[0u8; 32][..], |p| &p[..]));
    hasher.update(proposed);
    hex(&hasher.finalize()[..12])
}

fn parse_digest(text: &str) -> Option<[u8; 32]> {
    let mut digest = [0u8; 32];
    if text.len() != 64 {
        return None;
    }
    for (i, byte) in digest.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(digest)
}

impl PinBook {
    pub(super) fn changes(&self) -> impl Iterator<Item = &Change> {
        self.changes.values()
    }

    pub(super) fn change(&self, id: &str) -> Option<&Change> {
        self.changes.get(id)
    }

    pub(super) fn pinned_shown(&self, key: &str) -> Option<Value> {
        self.pins.get(key).map(|pin| pin.tool.shown())
    }

    pub(super) fn has_outbox(&self) -> bool {
        !self.outbox.is_empty()
    }

    pub(super) fn take_outbox(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.outbox)
    }

    /// Events that could not be written, first in line again.
    pub(super) fn requeue(&mut self, mut events: Vec<Event>) {
        events.append(&mut self.outbox);
        self.outbox = events;
    }

    pub(super) fn journal_len(&self) -> u64 {
        self.journal_len
    }

    /// Folds events read from the journal (up to `next`); whether what is
    /// served may have changed.
    pub(super) fn fold(&mut self, events: Vec<Event>, next: u64) -> bool {
        self.journal_len = next;
        events.into_iter().fold(false, |changed, event| self.apply(event, true) | changed)
    }

    /// Applies one event; `confirmed` when it comes from the journal.
    pub(super) fn apply(&mut self, event: Event, confirmed: bool) -> bool {
        match event {
            Event::Pinned { key, digest, shown } => {
                let Some(digest) = parse_digest(&digest) else { return false };
                match self.pins.get_mut(&key) {
                    Some(pin) if pin.confirmed => false,
                    Some(pin) if pin.digest == digest => {
                        pin.confirmed |= confirmed;
                        false
                    }
                    // Another replica's pin came first: it is the fleet's.
                    _ => match CatalogTool::from_shown(shown) {
                        Ok(tool) => {
                            self.pins.insert(key, Pin { digest, tool: Arc::new(tool), confirmed });
                            true
                        }
                        Err(e) => {
                            tracing::warn!(tool = key, error = e, "a pinned definition in the journal is unreadable");
                            false
                        }
                    },
                }
            }
            Event::Proposed(change) => {
                if self.changes.contains_key(&change.id) {
                    return false;
                }
                if change.state == ChangeState::Pending {
                    self.waiting.entry(change.key.clone()).or_insert_with(|| change.id.clone());
                }
                self.changes.insert(change.id.clone(), *change);
                true
            }
            Event::Decided { id, approve, by, at } => {
                let Some(change) = self.changes.get_mut(&id) else { return false };
                if change.state != ChangeState::Pending {
                    return false;
                }
                change.state = if approve { ChangeState::Approved } else { ChangeState::Rejected };
                change.decided_by = Some(by);
                change.decided_at = Some(at);
                let key = change.key.clone();
                if self.waiting.get(&key) == Some(&id) {
                    // Two replicas may each have proposed one: the other waits still.
                    match self.changes.values().find(|c| c.key == key && c.state == ChangeState::Pending) {
                        Some(other) => self.waiting.insert(key, other.id.clone()),
                        None => self.waiting.remove(&key),
                    };
                }
                let Some(change) = self.changes.get(&id) else { return false };
                let digest = parse_digest(&change.proposed_digest);
                if approve {
                    match (digest, CatalogTool::from_shown(change.proposed.clone())) {
                        (Some(digest), Ok(tool)) => {
                            self.pins.insert(change.key.clone(), Pin { digest, tool: Arc::new(tool), confirmed: true });
                        }
                        _ => tracing::warn!(change = id, "an approved definition is unreadable"),
                    }
                } else if change.kind == ChangeKind::New {
                    // A flagged tool served under `suspicious = "record"` was
                    // pinned as it was served: rejected, it is not.
                    if self.pins.get(&change.key).is_some_and(|pin| Some(pin.digest) == digest) {
                        self.pins.remove(&change.key);
                    }
                }
                true
            }
        }
    }

    /// Records `event` here and for the journal.
    fn record(&mut self, event: Event) {
        self.apply(event.clone(), false);
        self.outbox.push(event);
    }

    /// What to serve of `offer`.
    pub(super) fn verdict(
        &mut self,
        offer: &Offer<'_>,
        modes: Modes,
        foreign: &dyn Fn(&str) -> Option<String>,
    ) -> Verdict {
        if modes.pin == Review::Off && modes.suspicious == Review::Off {
            return Verdict::Serve;
        }
        let key = tool_key(offer.tool, offer.by_name);
        let digest = offer.tool.digest();
        let pinned = self.pins.get_mut(key).filter(|_| modes.pin != Review::Off);
        let pinned_digest = pinned.as_ref().map(|pin| pin.digest);
        if let Some(pin) = pinned {
            if pin.digest == digest {
                // The same definition: share the catalog's copy.
                if !Arc::ptr_eq(&pin.tool, offer.tool) {
                    pin.tool = offer.tool.clone();
                }
                return Verdict::Serve;
            }
        }
        let key = key.to_owned();
        let id = change_id(&key, pinned_digest.as_ref(), &digest);
        let (state, flagged, id) = match self.changes.get(&id) {
            Some(change) => (change.state, !change.findings.is_empty(), id),
            None => match self.propose(offer, id, pinned_digest, modes, foreign) {
                ControlFlow::Continue(seen) => seen,
                ControlFlow::Break(verdict) => return verdict,
            },
        };
        let fallback = |book: &PinBook| match book.pins.get(&key).filter(|_| pinned_digest.is_some()) {
            Some(pin) => Verdict::Approved(pin.tool.clone(), id.clone()),
            None => Verdict::Held(id.clone()),
        };
        match state {
            ChangeState::Approved => Verdict::Serve,
            ChangeState::Rejected => fallback(self),
            ChangeState::Pending => {
                let hold = (pinned_digest.is_some() && modes.pin == Review::Hold)
                    || (flagged && modes.suspicious == Review::Hold);
                if hold {
                    fallback(self)
                } else {
                    if pinned_digest.is_none() && modes.pin != Review::Off {
                        // Served under `record`: pinned as served, so the
                        // next change to it is one too.
                        self.record(Event::Pinned { key, digest: hex(&digest), shown: offer.tool.shown() });
                    }
                    Verdict::Serve
                }
            }
        }
    }

    /// A definition not seen before: pinned when it is a clean new tool,
    /// else proposed as a change (or, when one of the tool's changes waits
    /// already, held as that one is). Breaks with the verdict when there is
    /// nothing to review; continues with the change's state, whether this
    /// definition is flagged, and the change's id.
    fn propose(
        &mut self,
        offer: &Offer<'_>,
        id: String,
        pinned_digest: Option<[u8; 32]>,
        modes: Modes,
        foreign: &dyn Fn(&str) -> Option<String>,
    ) -> ControlFlow<Verdict, (ChangeState, bool, String)> {
        let key = tool_key(offer.tool, offer.by_name);
        let digest = offer.tool.digest();
        let shown = offer.tool.shown();
        let findings = match modes.suspicious {
            Review::Off => Vec::new(),
            _ => scan::scan(&shown, foreign),
        };
        if pinned_digest.is_none() && findings.is_empty() {
            // A clean tool seen for the first time: pinned on first use.
            if modes.pin != Review::Off {
                self.record(Event::Pinned { key: key.to_owned(), digest: hex(&digest), shown });
            }
            return ControlFlow::Break(Verdict::Serve);
        }
        if pinned_digest.is_some() && findings.is_empty() && modes.pin == Review::Off {
            return ControlFlow::Break(Verdict::Serve);
        }
        let flagged = !findings.is_empty();
        if let Some(waiting) = self.waiting.get(key) {
            // One change of this tool waits already. Another definition is
            // not recorded, or an upstream rewriting the tool at every poll
            // would make a stream of changes (journal lines, memory,
            // reviews): it is held as that change is, and proposed once that
            // one is decided.
            return ControlFlow::Continue((ChangeState::Pending, flagged, waiting.clone()));
        }
        let kind = if pinned_digest.is_some() { ChangeKind::Changed } else { ChangeKind::New };
        tracing::warn!(
            change = id,
            tool = offer.tool.definition.id,
            upstream = offer.upstream,
            kind = kind.as_str(),
            findings = ?findings.iter().map(|f| format!("{:?} in {}", f.kind, f.field)).collect::<Vec<_>>(),
            "tool definition change seen; it waits for review"
        );
        self.record(Event::Proposed(Box::new(Change {
            id: id.clone(),
            key: key.to_owned(),
            tool: offer.tool.definition.id.clone(),
            upstream: offer.upstream.to_owned(),
            kind,
            findings,
            proposed: shown,
            proposed_digest: hex(&digest),
            pinned_digest: pinned_digest.map(|d| hex(&d)),
            seen_at: now(),
            state: ChangeState::Pending,
            decided_by: None,
            decided_at: None,
        })));
        ControlFlow::Continue((ChangeState::Pending, flagged, id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proposed(id: &str, key: &str) -> Event {
        Event::Proposed(Box::new(Change {
            id: id.into(),
            key: key.into(),
            tool: key.into(),
            upstream: "u".into(),
            kind: ChangeKind::Changed,
            findings: Vec::new(),
            proposed: serde_json::json!({}),
            proposed_digest: "0".repeat(64),
            pinned_digest: None,
            seen_at: 0,
            state: ChangeState::Pending,
            decided_by: None,
            decided_at: None,
        }))
    }

    fn decided(id: &str) -> Event {
        Event::Decided { id: id.into(), approve: false, by: "admin".into(), at: 1 }
    }

    /// Two replicas may each propose a change of one tool before reading the
    /// other's: the tool's waiting change is the first in the journal, and
    /// once it is decided, the other one.
    #[test]
    fn a_tool_s_waiting_change_is_the_first_undecided_one() {
        let mut book = PinBook::default();
        book.fold(vec![proposed("x", "T.A@1"), proposed("y", "T.A@1"), proposed("z", "T.B@1")], 3);
        assert_eq!(book.waiting.get("T.A@1").map(String::as_str), Some("x"));
        book.fold(vec![decided("x")], 4);
        assert_eq!(book.waiting.get("T.A@1").map(String::as_str), Some("y"));
        book.fold(vec![decided("y")], 5);
        assert_eq!(book.waiting.get("T.A@1"), None);
        assert_eq!(book.waiting.get("T.B@1").map(String::as_str), Some("z"));
    }
}
