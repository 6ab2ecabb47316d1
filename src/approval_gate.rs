//! The approve step of a call (`call.rs`): a call an `[[approval]]` rule
//! holds runs only once a person has approved it, and only once
//! (docs/approvals.md).
//!
//! It runs after validation (a call that could not run asks nobody) and
//! before anything is injected (the approver sees the input as the caller
//! sent it, never a secret).

use crate::approvals::{self, Ask, Refusal, Request, State};
use crate::auth::Caller;
use crate::catalog::Route;
use crate::config::{ApprovalConfig, Approver};
use crate::error::{ended, ApprovalChallenge, MissingRequirements, RequestError};
use crate::gateway::{Gateway, Generation};
use crate::idempotency::{CallerScope, Fingerprint};
use crate::otel::{self, Kind, Span};
use crate::wire::Input;
use serde_json::Value;

/// A call a rule held and a person approved: it may run once.
pub(crate) struct Approved {
    /// The request's id.
    id: String,
    /// Whether it ran already (its answer, if still kept, is replayed).
    ran: bool,
    /// The caller's scope, for the claim of a call without a `call_id`.
    pub(crate) scope: CallerScope,
    /// What the idempotency store keeps the one run under when the client
    /// sent no `call_id` (MCP clients): repeats are answered from it.
    pub(crate) claim_id: String,
}

/// Whether the call may go on: `None` when no rule holds it, the approval
/// when one does and it was approved; else the challenge (pending) or the
/// refusal (denied, expired).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn approve_call(
    gateway: &Gateway,
    generation: &Generation,
    route: &Route,
    caller: &Caller,
    call_id: Option<&str>,
    input: &Input,
    context: &crate::wire::CallContext,
    span: Option<&Span>,
) -> Result<Option<Approved>, RequestError> {
    let tool = &route.tool;
    let Some(rule) = approvals::rule_for(&generation.config.approval, &tool.key, tool.annotations.as_ref(), caller)
    else {
        return Ok(None);
    };
    // A step of its own only for a call a rule holds.
    let mut step = otel::child(span, "approve", Kind::Internal);
    let decided =
        decide(gateway, generation, route, caller, rule, call_id, &input.value(), context, step.as_mut()).await;
    ended(step, decided)
}

/// The request for a call `rule` holds, and where it stands.
#[allow(clippy::too_many_arguments)]
async fn decide(
    gateway: &Gateway,
    generation: &Generation,
    route: &Route,
    caller: &Caller,
    rule: &ApprovalConfig,
    call_id: Option<&str>,
    input: &Value,
    context: &crate::wire::CallContext,
    span: Option<&mut Span>,
) -> Result<Option<Approved>, RequestError> {
    let tool = &route.tool;
    let user = caller.authenticated_user();
    if rule.approver == Approver::Caller && user.is_none() {
        // Nobody could sign in as an anonymous caller to approve its call.
        return Err(RequestError::MissingRequirements(MissingRequirements { user_id: true, ..Default::default() }));
    }
    let scope = CallerScope::of(caller, context);
    let tool_id = tool.definition.id.as_str();
    let fingerprint = Fingerprint::of(tool_id, input);
    let caller_call = scope.key(call_id.unwrap_or_default());
    let id = approvals::request_id(&rule.name, caller_call.as_str(), fingerprint.as_str());
    let upstream = route.targets.first().map_or("", |t| &*t.upstream.name);
    let ask = Ask {
        id: id.clone(),
        rule,
        tool: tool_id,
        upstream,
        caller: user,
        owner: scope.key("approval owner").as_str().to_owned(),
        call_id,
        input,
    };
    let (request, new) = gateway.approvals.ask(ask).await?;
    if new {
        gateway.metrics.record_approval(&rule.name, "requested");
    }
    let state = request.state();
    if let Some(span) = span {
        span.event(
            "approval",
            &[
                ("otc.approval.id", &request.id),
                ("otc.approval.rule", &rule.name),
                ("otc.approval.state", state.as_str()),
            ],
        );
    }
    match state {
        State::Pending => Err(challenge(gateway, generation, &request)),
        State::Approved => Ok(Some(Approved {
            ran: request.used_at.is_some(),
            scope,
            claim_id: format!("approval:{}", request.id),
            id: request.id,
        })),
        State::Denied => {
            let decision = request.decision.unwrap_or_else(|| approvals::Decision {
                approved: false,
                by: String::new(),
                at: request.expires_at,
            });
            Err(RequestError::ApprovalRefused(Refusal::Denied { by: decision.by, at: decision.at }))
        }
        State::Expired => {
            if gateway.approvals.first_expiry_seen(&request.id) {
                gateway.metrics.record_approval(&rule.name, "expired");
            }
            Err(RequestError::ApprovalRefused(Refusal::Expired(request.expires_at)))
        }
    }
}

impl Approved {
    /// The approved call is about to run (its `call_id` claimed): once
    /// only. The idempotency store answers repeats; should it have lost the
    /// answer, the journal still knows the call ran, and it does not run again.
    pub(crate) fn unspent(&self) -> Result<(), RequestError> {
        if self.ran {
            return Err(RequestError::ApprovalRefused(Refusal::Ran));
        }
        Ok(())
    }

    /// The tool answered (a question to the client is no answer yet: its
    /// retry runs the call): the approval is spent.
    pub(crate) async fn spend(&self, gateway: &Gateway, question: bool) {
        if question {
            return;
        }
        if let Err(e) = gateway.approvals.used(&self.id).await {
            tracing::warn!(error = %e, approval = self.id, "an approved call ran, but its run was not recorded");
        }
    }
}

/// The challenge a held call answers with: the request's page and where
/// its caller checks on it.
fn challenge(gateway: &Gateway, generation: &Generation, request: &Request) -> RequestError {
    let public_url = gateway.public_url(generation);
    RequestError::MissingRequirements(MissingRequirements {
        approval: vec![ApprovalChallenge {
            id: request.id.clone(),
            url: format!("{public_url}/oauth/approval/{}", request.link),
            check_url: format!("{public_url}/oauth/approval/check/{}", request.id),
            rule: request.rule.clone(),
            by_caller: request.approver == Approver::Caller,
            expires_at: request.expires_at,
        }],
        ..Default::default()
    })
}
