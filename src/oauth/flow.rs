//! A connect flow, from the link to the stored grant, and who may finish
//! it.
//!
//! A grant is stored only for the link's user, and only when the browser
//! finishing the flow is proven to be theirs (`user_verification`):
//!
//! - `login`: the browser is signed in to the gateway (`[login]`) as the
//!   link's user, when it opens the link and again at the provider's
//!   callback (a flow's authorization URL forwarded to someone else
//!   finishes in their browser, which is not signed in as the user);
//! - `verifier`: after the callback, the browser goes to the user's
//!   application, which confirms the flow (`POST /oauth/confirm`) with the
//!   user's own gateway credentials; the code is exchanged only then;
//! - `none`: nobody checks (written out, for trusted single-user setups).
//!
//! Opening a link changes nothing about it: each opening by its user is a
//! new flow (its own `state` and PKCE verifier), and another user's
//! opening, or a preview bot's, uses nothing up.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::challenges::Kind;
use super::links::{LinkStatus, OpenLink, Refusal};
use super::seal::random_id;
use super::{callback_url, FlowError, OAuth};
use crate::config::UserVerification;
use crate::metrics::Metrics;

/// A flow sent to a provider: what the callback's `state` stands for.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Flow {
    /// The link it came from, as its store names it.
    link: String,
    /// The provider it was sent to.
    provider: String,
    /// The user it is for.
    user: String,
    /// The scopes asked for.
    scopes: BTreeSet<String>,
    /// The PKCE verifier.
    verifier: String,
    /// The redirect URI sent (the token request repeats it).
    redirect_uri: String,
}

/// A flow back from the provider, awaiting its application's confirmation.
#[derive(Serialize, Deserialize)]
struct Confirmation {
    flow: Flow,
    /// The authorization code, exchanged once the right user confirms.
    code: String,
}

/// What opening a link leads to.
#[derive(Debug)]
pub enum Opened {
    /// The provider's authorization request.
    Provider(String),
    /// The browser must sign in to the gateway first (`[login]`).
    SignIn,
}

/// How a provider's callback ended.
#[derive(Debug)]
pub enum Finished {
    /// The grant is stored.
    Connected,
    /// The user's application must confirm the flow: where to send the
    /// browser (`verifier_url?flow_id=…`).
    Confirm(String),
}

impl OAuth {
    /// Opens a link in a browser signed in as `browser_user` (if at all):
    /// a new flow, or a sign-in first.
    pub async fn open_link(
        &self,
        provider: &str,
        link_id: &str,
        browser_user: Option<&str>,
        public_url: &str,
    ) -> Result<Opened, FlowError> {
        let managed = self.provider(provider)?;
        let challenges = self.challenges();
        let link = challenges.open(provider, link_id).await.map_err(refusal)?;
        if managed.verification == UserVerification::Login {
            match browser_user {
                None => return Ok(Opened::SignIn),
                Some(user) if user != link.user => {
                    tracing::info!(provider, "a connect link was opened by another signed-in user; refused");
                    return Err(FlowError::WrongUser);
                }
                Some(_) => {}
            }
        }
        let OpenLink { link, user, scopes, ttl } = link;
        let redirect_uri = callback_url(public_url, provider);
        // 32 random bytes: a 43-character verifier (RFC 7636 4.1).
        let (state, verifier) = (random_id(32)?, random_id(32)?);
        let url = managed
            .provider
            .authorization_request(&self.secrets, &redirect_uri, &scopes, &state, &verifier, None)
            .await?;
        let flow = Flow { link, provider: provider.to_owned(), user, scopes, verifier, redirect_uri };
        challenges.put(Kind::Flow, &state, &flow, ttl).await?;
        Ok(Opened::Provider(url))
    }

    /// The provider's callback, in a browser signed in as `browser_user`
    /// (if at all): the grant stored, or the flow handed to the user's
    /// application for confirmation.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_flow(
        &self,
        provider: &str,
        state: Option<&str>,
        code: Option<&str>,
        error: Option<&str>,
        browser_user: Option<&str>,
        metrics: &Metrics,
    ) -> Result<Finished, FlowError> {
        let managed = self.provider(provider)?;
        let state = state.ok_or(FlowError::BadCallback("state"))?;
        let challenges = self.challenges();
        let flow: Option<Flow> = challenges.get(Kind::Flow, state).await?;
        let flow = flow.filter(|f| f.provider == provider).ok_or(FlowError::UnknownLink)?;
        // The browser is checked before the flow is used: another browser
        // neither finishes nor spoils it.
        let verified = match managed.verification {
            UserVerification::Login => match browser_user {
                None => return Err(FlowError::SignInRequired),
                Some(user) if user != flow.user => {
                    tracing::info!(provider, "a flow's callback reached another signed-in user's browser; refused");
                    return Err(FlowError::WrongUser);
                }
                Some(_) => true,
            },
            UserVerification::Verifier | UserVerification::None => false,
        };
        let flow: Flow = challenges.take(Kind::Flow, state).await?.ok_or(FlowError::UnknownLink)?;
        let code = match (code, error) {
            (_, Some(error)) => {
                // Only the link's own user may end it as failed: an
                // unverified browser's refusal leaves it open.
                if verified {
                    challenges.finish(&flow.link, LinkStatus::Failed).await;
                    metrics.record_oauth_challenge(provider, "failed");
                }
                return Err(FlowError::Refused(error.chars().take(100).collect()));
            }
            (Some(code), None) => code,
            (None, None) => return Err(FlowError::BadCallback("code")),
        };
        if managed.verification == UserVerification::Verifier {
            let flow_id = random_id(32)?;
            let ttl = managed.provider.config.link_ttl;
            challenges.put(Kind::Confirmation, &flow_id, &Confirmation { flow, code: code.to_owned() }, ttl).await?;
            let verifier_url = managed.provider.config.verifier_url.as_ref().map_or("", |u| u.0.as_str());
            let separator = if verifier_url.contains('?') { '&' } else { '?' };
            return Ok(Finished::Confirm(format!("{verifier_url}{separator}flow_id={flow_id}")));
        }
        self.store_grant(provider, &flow, code, metrics).await?;
        Ok(Finished::Connected)
    }

    /// `POST /oauth/confirm`: the user's application confirms a flow as
    /// `user`. Another user's confirmation is refused and changes nothing.
    /// Returns the flow's provider.
    pub async fn confirm(&self, flow_id: &str, user: &str, metrics: &Metrics) -> Result<String, FlowError> {
        let challenges = self.challenges();
        let pending: Confirmation = challenges.get(Kind::Confirmation, flow_id).await?.ok_or(FlowError::UnknownLink)?;
        if pending.flow.user != user {
            tracing::info!(provider = pending.flow.provider, "a flow was confirmed by another user; refused");
            return Err(FlowError::WrongUser);
        }
        let Confirmation { flow, code } =
            challenges.take(Kind::Confirmation, flow_id).await?.ok_or(FlowError::UnknownLink)?;
        self.provider(&flow.provider)?;
        self.store_grant(&flow.provider, &flow, &code, metrics).await?;
        Ok(flow.provider)
    }

    /// Exchanges the code and stores the grant for the flow's user; the
    /// link ends completed, or failed when the provider or the store fails.
    async fn store_grant(&self, provider: &str, flow: &Flow, code: &str, metrics: &Metrics) -> Result<(), FlowError> {
        let managed = self.provider(provider)?;
        let exchanged = managed
            .provider
            .exchange(&self.secrets, &flow.redirect_uri, code, flow.verifier.clone(), &flow.scopes)
            .await;
        let outcome = match exchanged {
            Ok(mut grant) => {
                // Asking again for more scopes keeps when the user first connected.
                let earlier = managed.store.get_versioned(provider, &flow.user).await.ok().flatten();
                grant.connected_at = earlier.and_then(|v| v.grant.connected_at).or(Some(super::store::now()));
                managed.store.put(provider, &flow.user, &grant, None).await.map(drop).map_err(FlowError::from)
            }
            Err(e) => Err(e.into()),
        };
        let (status, label) = match outcome {
            Ok(()) => (LinkStatus::Completed, "completed"),
            Err(_) => (LinkStatus::Failed, "failed"),
        };
        self.challenges().finish(&flow.link, status).await;
        metrics.record_oauth_challenge(provider, label);
        outcome
    }
}

/// A store's refusal as the page the browser gets.
pub(super) fn refusal(refusal: Refusal) -> FlowError {
    match refusal {
        Refusal::Unknown => FlowError::UnknownLink,
        Refusal::Expired => FlowError::Expired,
        Refusal::Used => FlowError::Used,
        Refusal::Unavailable(e) => FlowError::Failed(e),
    }
}
