//! The approval pages under `/oauth/approval/` (docs/approvals.md): where
//! a person sees a held call and approves or denies it, and where its
//! caller checks on it.
//!
//! | request | who | answer |
//! | --- | --- | --- |
//! | `GET /oauth/approval/LINK` | the calling user's browser, signed in (`[login]`) | the call (tool, upstream, arguments, caller, rule, expiry) with Approve and Deny; 302 to sign in first; 403 for another user |
//! | `POST /oauth/approval/LINK` `decision&csrf` | that page's form, in the same browser | a page: approved or denied |
//! | `GET /oauth/approval/check/ID` | the caller that got the challenge (authenticated) | `{"status": "pending" \| "approved" \| "denied" \| "expired"}` |
//!
//! Under `approver = "admin"` the page only says that an operator decides
//! (the console's Approvals page, `POST /approvals/<id>/approve`): the link
//! travels through a model's context, so it shows neither arguments nor
//! buttons there.
//!
//! The pages use the `/oauth/` pages' cookies (the `[login]` session, which
//! only the signed-in browser holds) and their anti-forgery token.

use bytes::Bytes;

use crate::approvals::{ApprovalError, Decider, Request, State};
use crate::auth::Caller;
use crate::config::Approver;
use crate::error::{utc, RequestError};
use crate::gateway::{Gateway, Generation};
use crate::idempotency::CallerScope;
use crate::oauth_endpoint::{csrf_token, sign_in_first, with_form, BrowserRequest, Cookies, OAuthRequest, SESSION};
use crate::reply::{html_escape, Reply};
use crate::wire::CallContext;

/// Answers a browser's step: the page, or its form.
pub(crate) async fn browser_step(
    gateway: &Gateway,
    generation: &Generation,
    request: &OAuthRequest<'_>,
    browser: &BrowserRequest<'_>,
) -> Result<Reply, RequestError> {
    let (OAuthRequest::ApprovalPage { link } | OAuthRequest::ApprovalForm { link }) = *request else {
        return Err(RequestError::NotFound(String::new()));
    };
    // A preview bot's or a mail scanner's HEAD learns nothing.
    if *browser.method == http::Method::HEAD {
        return Ok(page(200, "Approval", "Open this link in a web browser to continue."));
    }
    let Some(held) = gateway.approvals.by_link(link).await? else {
        return Ok(page(404, "Unknown approval", "This approval link is unknown or too old. Nothing will run."));
    };
    if held.approver == Approver::Admin {
        let text = format!(
            "A call of {} waits for an operator's approval (rule {}): it is {} and expires {}.",
            held.tool,
            held.rule,
            held.state().as_str(),
            utc(held.expires_at)
        );
        return Ok(page(200, "Waiting for an operator", &text));
    }
    let oauth = &generation.oauth;
    let public_url = gateway.public_url(generation);
    let cookies = Cookies::of(&public_url);
    let session = cookies.read(browser, SESSION);
    let Some(user) = session.and_then(|value| oauth.session_user(value)) else {
        if matches!(request, OAuthRequest::ApprovalForm { .. }) {
            return Ok(page(403, "Not signed in", "Open the approval link again: it signs you in first."));
        }
        return sign_in_first(oauth, &cookies, browser.path, &public_url).await;
    };
    let decider = Decider::User(&user);
    if !held.approver.lets(&held, &decider) {
        // Nothing of another user's call is shown.
        return Ok(page(
            403,
            "Not your call",
            "This call was made by another user: only they can approve it, signed in as themselves. Nothing was decided.",
        ));
    }
    let csrf = session.map(csrf_token).unwrap_or_default();
    let OAuthRequest::ApprovalForm { .. } = request else {
        return Ok(call_page(&held, &csrf, &public_url));
    };
    let (mut decision, mut sent) = (None, None);
    for (key, value) in form_urlencoded::parse(browser.form) {
        match &*key {
            "decision" => decision = Some(value.into_owned()),
            "csrf" => sent = Some(value.into_owned()),
            _ => {}
        }
    }
    let genuine = sent.is_some_and(|c| bool::from(subtle::ConstantTimeEq::ct_eq(c.as_bytes(), csrf.as_bytes())));
    let approve = match decision.as_deref() {
        Some("approve") => true,
        Some("deny") => false,
        _ => return Ok(page(400, "No decision", "Choose Approve or Deny on the approval page.")),
    };
    if !genuine {
        return Ok(page(
            403,
            "Refused",
            "This form did not come from the approval page. Open the approval link again; nothing was decided.",
        ));
    }
    match gateway.approvals.decide(&held.id, approve, &decider.label(), &gateway.metrics).await {
        Ok(decided) if decided.state() == State::Approved => Ok(page(
            200,
            "Approved",
            &format!("The call of {} is approved: it runs once, when your agent calls it again.", decided.tool),
        )),
        Ok(decided) => Ok(page(200, "Denied", &format!("The call of {} is denied: it will not run.", decided.tool))),
        Err(ApprovalError::AlreadyDecided { state, .. }) => {
            Ok(page(409, "Already decided", &format!("This call was already {state}; nothing changed.")))
        }
        Err(e) => Err(e.into()),
    }
}

/// `GET /oauth/approval/check/ID`: the state of the caller's own request.
/// Another caller's id answers as one never issued.
pub(crate) async fn check(gateway: &Gateway, caller: &Caller, id: &str) -> Result<Reply, RequestError> {
    let owner = CallerScope::of(caller, &CallContext::default()).key("approval owner");
    match gateway.approvals.get(id).await? {
        Some(held) if held.owner == owner.as_str() => {
            let mut body = serde_json::json!({ "status": held.state().as_str(), "expires_at": held.expires_at });
            if let Some(decision) = &held.decision {
                body["decided_at"] = decision.at.into();
            }
            Ok(Reply::json(200, Bytes::from(body.to_string())))
        }
        _ => Err(RequestError::NotFound("/oauth/approval/check/...".into())),
    }
}

/// The held call, with the form that decides it while it is pending.
fn call_page(held: &Request, csrf: &str, public_url: &str) -> Reply {
    let state = held.state();
    let input = serde_json::to_string_pretty(&held.input).unwrap_or_default();
    let form = if state == State::Pending {
        format!(
            "<form method=\"post\" action=\"{action}\"><input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
             <button type=\"submit\" name=\"decision\" value=\"approve\" id=\"approve\">Approve</button> \
             <button type=\"submit\" name=\"decision\" value=\"deny\" id=\"deny\">Deny</button></form>",
            action = html_escape(&format!("{public_url}/oauth/approval/{}", held.link)),
            csrf = html_escape(csrf),
        )
    } else {
        format!("<p id=\"state\">This call is {}.</p>", state.as_str())
    };
    let rows = [
        ("tool", held.tool.clone()),
        ("upstream", held.upstream.clone()),
        ("caller", held.caller.clone().unwrap_or_default()),
        ("rule", held.rule.clone()),
        ("call id", held.call_id.clone().unwrap_or_else(|| "(none)".into())),
        ("expires", utc(held.expires_at)),
        ("state", state.as_str().to_owned()),
    ]
    .iter()
    .map(|(name, value)| {
        format!("<tr><th>{name}</th><td id=\"{}\">{}</td></tr>", name.replace(' ', "-"), html_escape(value))
    })
    .collect::<String>();
    let body = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>Approve a call</title></head><body>\
         <h1>Approve a call</h1><p>Your agent asks to run this call. It runs once if you approve it; \
         secrets the gateway adds are not shown and not part of what you approve.</p>\
         <table>{rows}</table><h2>Arguments</h2><pre id=\"input\">{input}</pre>{form}</body></html>\n",
        input = html_escape(&input),
    );
    let mut reply = page(200, "Approve a call", "");
    reply.body = Bytes::from(body);
    reply
}

/// A page of the approval endpoint: the `/oauth/` pages' headers, forms
/// posted only to the gateway.
fn page(status: u16, title: &str, text: &str) -> Reply {
    let mut reply = Reply::page(status, title, text);
    with_form(&mut reply);
    reply
}
