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
//! - `verifier`: the flow is bound to the browser that opened the link (a
//!   cookie), the user's application confirms it with the user's own
//!   gateway credentials, and that browser then comes back to the gateway
//!   (`verifier.rs`);
//! - `none`: nobody checks (written out, for trusted single-user setups).
//!
//! Opening a link changes nothing about it: each opening by its user is a
//! new flow (its own `state` and PKCE verifier), and another user's
//! opening, or a preview bot's, uses nothing up.

use std::collections::BTreeSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::challenges::Kind;
use super::links::{LinkStatus, OpenLink, Refusal};
use super::seal::{digest, random_id};
use super::store::Grant;
use super::{callback_url, FlowError, OAuth};
use crate::config::UserVerification;
use crate::metrics::Metrics;

/// A flow sent to a provider: what the callback's `state` stands for.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Flow {
    /// The link it came from, as its store names it.
    pub link: String,
    /// The provider it was sent to.
    pub provider: String,
    /// The user it is for.
    pub user: String,
    /// The scopes asked for.
    pub scopes: BTreeSet<String>,
    /// The PKCE verifier.
    pub verifier: String,
    /// The redirect URI sent (the token request repeats it).
    pub redirect_uri: String,
    /// With a verifier: the digest of the cookie binding the flow to the
    /// browser that opened the link (absent from a flow made before it was
    /// kept: no browser matches it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
}

/// What opening a link leads to.
#[derive(Debug)]
pub enum Opened {
    /// The provider's authorization request; with a verifier, the cookie
    /// that binds the flow to this browser.
    Provider {
        /// Where to send the browser.
        url: String,
        /// The binding cookie to set, with a verifier.
        binding: Option<FlowBinding>,
    },
    /// The browser must sign in to the gateway first (`[login]`).
    SignIn,
}

/// The value of the cookie binding flows to a browser, and how long it
/// must last: as long as a flow may take (the provider, the application's
/// confirmation, the way back).
#[derive(Debug)]
pub struct FlowBinding {
    /// The cookie's value.
    pub value: String,
    /// How long it lasts.
    pub max_age: Duration,
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

/// Whether a browser's binding `cookie` is the one whose digest a flow
/// `kept`.
pub(super) fn same_browser(kept: Option<&str>, cookie: Option<&str>) -> bool {
    matches!((kept, cookie), (Some(kept), Some(cookie)) if digest(cookie) == kept)
}

/// A binding cookie's value as the gateway makes them (32 random bytes,
/// base64url): one a browser already holds is used again, so flows opened
/// side by side in one browser each find it.
fn well_formed_binding(value: &str) -> bool {
    value.len() == 43 && value.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

impl OAuth {
    /// Opens a link in a browser signed in as `browser_user` (if at all)
    /// and holding the flow binding cookie `browser_binding` (if any): a
    /// new flow, or a sign-in first.
    pub async fn open_link(
        &self,
        provider: &str,
        link_id: &str,
        browser_user: Option<&str>,
        browser_binding: Option<&str>,
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
        let binding = match managed.verification {
            UserVerification::Verifier => {
                let value = match browser_binding.filter(|v| well_formed_binding(v)) {
                    Some(held) => held.to_owned(),
                    None => random_id(32)?,
                };
                Some(FlowBinding { value, max_age: ttl.saturating_mul(3) })
            }
            UserVerification::Login | UserVerification::None => None,
        };
        let flow = Flow {
            link,
            provider: provider.to_owned(),
            user,
            scopes,
            verifier,
            redirect_uri,
            binding: binding.as_ref().map(|b| digest(&b.value)),
        };
        challenges.put(Kind::Flow, &state, &flow, ttl).await?;
        Ok(Opened::Provider { url, binding })
    }

    /// The provider's callback, in a browser signed in as `browser_user`
    /// (if at all) and holding the flow binding cookie `browser_binding`
    /// (if any): the grant stored, or the flow handed to the user's
    /// application for confirmation.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish_flow(
        &self,
        provider: &str,
        state: Option<&str>,
        code: Option<&str>,
        error: Option<&str>,
        browser_user: Option<&str>,
        browser_binding: Option<&str>,
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
            // The browser that opened the link, not yet proven the user's.
            UserVerification::Verifier => {
                if !same_browser(flow.binding.as_deref(), browser_binding) {
                    tracing::info!(
                        provider,
                        "a flow's callback reached another browser than the one that opened the link; refused"
                    );
                    return Err(FlowError::NotThisBrowser);
                }
                false
            }
            UserVerification::None => false,
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
            let verifier_url = managed.provider.config.verifier_url.as_ref().map_or("", |u| u.0.as_str());
            let flow_id = self.await_confirmation(flow, code, managed.provider.config.link_ttl).await?;
            let separator = if verifier_url.contains('?') { '&' } else { '?' };
            return Ok(Finished::Confirm(format!("{verifier_url}{separator}flow_id={flow_id}")));
        }
        let (grant, _) = self.exchange(&flow, code, metrics).await?;
        self.keep_grant(&flow.provider, &flow.link, &flow.user, grant, metrics).await?;
        Ok(Finished::Connected)
    }

    /// Exchanges the flow's code; a provider that fails it ends the link
    /// as failed.
    pub(super) async fn exchange(
        &self,
        flow: &Flow,
        code: &str,
        metrics: &Metrics,
    ) -> Result<(Grant, Option<super::Account>), FlowError> {
        let managed = self.provider(&flow.provider)?;
        let exchanged = managed
            .provider
            .exchange(&self.secrets, &flow.redirect_uri, code, flow.verifier.clone(), &flow.scopes)
            .await;
        if exchanged.is_err() {
            self.challenges().finish(&flow.link, LinkStatus::Failed).await;
            metrics.record_oauth_challenge(&flow.provider, "failed");
        }
        Ok(exchanged?)
    }

    /// Stores `grant` for `user`; `link` ends completed, or failed when the
    /// store fails.
    pub(super) async fn keep_grant(
        &self,
        provider: &str,
        link: &str,
        user: &str,
        mut grant: Grant,
        metrics: &Metrics,
    ) -> Result<(), FlowError> {
        let managed = self.provider(provider)?;
        // Asking again for more scopes keeps when the user first connected.
        let earlier = managed.store.get_versioned(provider, user).await.ok().flatten();
        grant.connected_at = earlier.and_then(|v| v.grant.connected_at).or(Some(super::store::now()));
        let outcome = managed.store.put(provider, user, &grant, None).await.map(drop).map_err(FlowError::from);
        let (status, label) = match outcome {
            Ok(()) => (LinkStatus::Completed, "completed"),
            Err(_) => (LinkStatus::Failed, "failed"),
        };
        self.challenges().finish(link, status).await;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flow_knows_its_browser_by_the_digest_of_its_cookie() {
        let value = random_id(32).expect("random");
        assert!(well_formed_binding(&value), "one the gateway made is used again");
        for planted in ["", "short", "a=b; c", &"x".repeat(44)] {
            assert!(!well_formed_binding(planted), "{planted:?}");
        }
        let kept = digest(&value);
        assert!(same_browser(Some(&kept), Some(&value)));
        assert!(!same_browser(Some(&kept), Some(&kept)), "the digest itself is not the cookie");
        assert!(!same_browser(Some(&kept), None));
        assert!(!same_browser(None, Some(&value)), "a flow made without a binding has no browser");
    }
}
