//! The last step of every resolved call, whatever its end: counted in the
//! metrics, logged once, kept in the ring of recent calls.

use std::sync::Arc;
use std::time::Instant;

use super::{FinishedCall, ParsedCall};
use crate::auth::Caller;
use crate::catalog::Route;
use crate::error::{mark_failed, RequestError};
use crate::gateway::Gateway;
use crate::metrics::CallOutcome;
use crate::otel::Span;
use crate::recent_calls::CallRecord;

/// Counts a resolved call in the metrics, logs it once and keeps it in the
/// ring of recent calls (which takes the call's id: the call ends here).
/// Labels come from the catalog and the config only: the resolved id and
/// the upstream (the one that answered, else the route's first).
pub(super) fn record_call(
    gateway: &Gateway,
    caller: &Caller,
    route: &Route,
    call: &mut ParsedCall,
    finished: &Result<FinishedCall, RequestError>,
    started: Instant,
    span: Option<&mut Span>,
) {
    let first_upstream = || route.targets.first().map_or_else(|| Arc::from(""), |t| t.upstream.name.clone());
    // `None`: a rate-limited call, counted by its status (429) in
    // otc_gateway_http_requests_total, not as a call.
    let (upstream, outcome, took) = match finished {
        // Not an outcome yet: the client answers and calls again, and that
        // call is counted.
        Ok(completed) if completed.is_question() => return,
        Ok(completed) => (completed.upstream.clone(), Some(completed.outcome), completed.took),
        Err(RequestError::InvalidInput(_)) => (first_upstream(), Some(CallOutcome::ValidationError), started.elapsed()),
        Err(RequestError::Denied(_)) => (first_upstream(), Some(CallOutcome::Denied), started.elapsed()),
        Err(RequestError::RateLimited { .. }) => (first_upstream(), None, started.elapsed()),
        Err(_) => (first_upstream(), Some(CallOutcome::ServerError), started.elapsed()),
    };
    let (call_id, trace_id) = (std::mem::take(&mut call.call_id), call.trace_id.as_deref());
    if let Some(outcome) = outcome {
        let tool = route.tool.definition.id.as_str();
        let seconds = took.as_secs_f64();
        gateway.metrics.record_call(tool, &upstream, outcome, seconds);
        // The log line leads to the trace: its ids, when it is recorded.
        let span_ids = span.as_ref().map(|s| (s.trace_id_hex(), s.span_id_hex()));
        let trace_id = span_ids.as_ref().map_or(trace_id, |(trace, _)| Some(trace.as_str()));
        let span_id = span_ids.as_ref().map(|(_, span)| span.as_str());
        if let Some(span) = span {
            span.set("otc.upstream", &*upstream);
            span.set("otc.outcome", outcome.as_str());
            match finished {
                Err(e) => mark_failed(Some(span), e),
                Ok(_) if outcome == CallOutcome::ToolError => span.fail("tool_error"),
                Ok(_) => {}
            }
        }
        tracing::info!(
            call_id = call_id.as_str(),
            trace_id,
            span_id,
            tool,
            upstream = &*upstream,
            outcome = outcome.as_str(),
            duration_ms = seconds * 1000.0,
            "tool call"
        );
    }
    // The ring of recent calls (`recent_calls.rs`): names, status and
    // timing, never the call's input, output, secrets or tokens.
    gateway.recent_calls.record(CallRecord {
        at: started + took,
        caller: caller.authenticated_user().map(str::to_owned),
        tool: route.tool.clone(),
        upstream,
        status: finished.as_ref().map_or_else(RequestError::status, |_| 200),
        outcome: outcome.map_or("rate_limited", CallOutcome::as_str),
        duration_ms: took.as_secs_f64() * 1000.0,
        call_id,
    });
}
