//! `user_verification = "verifier"`: a grant is kept only once two legs are
//! done, each proving what the other cannot.
//!
//! 1. **The browser.** Opening the link sets a cookie in the browser and
//!    the flow keeps its digest (`flow.rs`); the provider's callback in a
//!    browser without it is refused. The callback sends the browser on to
//!    the application's `verifier_url?flow_id=…`.
//! 2. **The application** confirms the flow as its signed-in user (`POST
//!    /oauth/confirm`, the user's own gateway credentials). Another user's
//!    confirmation ends the flow. The right user's exchanges the code; the
//!    answer names the provider account the grant is for and a `return_to`:
//!    a gateway URL with a one-time value made now, which the application
//!    sends its user's browser to.
//! 3. **Back at the gateway**, `return_to` keeps the grant only in the
//!    browser holding the flow's cookie. So the browser that consented at
//!    the provider is the browser of the user the application vouched for:
//!    a flow consented to in one person's browser and confirmed by another
//!    person's application finishes in neither.
//!
//! `return_to` reaches nobody but the application: were it in the URL the
//! consenting browser is sent to, that browser (an attacker's, who opened a
//! victim's leaked link with their own account) could open it itself once
//! the victim's application confirmed. Until then the grant waits in the
//! challenge store sealed (AES-256-GCM) with a key derived from that
//! one-time value, of which the store keeps only a digest: Redis never
//! holds a usable token, and any replica can finish the flow.

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::challenges::Kind;
use super::flow::{same_browser, Flow};
use super::provider::Account;
use super::seal::{random_id, Sealer};
use super::store::Grant;
use super::{FlowError, OAuth, OAuthError};
use crate::metrics::Metrics;

/// What a sealed waiting grant's key is derived from, beside its value.
const RETURN_KEY_CONTEXT: &[u8] = b"otc-gateway verifier return v1\n";

/// A flow back from the provider, awaiting its application's confirmation.
#[derive(Serialize, Deserialize)]
struct Confirmation {
    flow: Flow,
    /// The authorization code, exchanged once the right user confirms.
    code: String,
}

/// A confirmed flow awaiting its browser at `return_to`.
#[derive(Serialize, Deserialize)]
struct Returning {
    link: String,
    provider: String,
    user: String,
    /// The digest of the flow's binding cookie.
    binding: Option<String>,
    /// The grant, sealed with the key of `return_to`'s value (base64url).
    grant: String,
    /// The provider account, as the application was told.
    account: Option<Account>,
}

/// A confirmation's answer for the application.
#[derive(Debug)]
pub struct Confirmed {
    /// The flow's provider.
    pub provider: String,
    /// The provider account the grant is for, when the provider named it.
    pub account: Option<Account>,
    /// Where the application sends its user's browser to finish.
    pub return_to: String,
}

/// The sealer of a waiting grant: its key is derived from the value in
/// `return_to`, which only the browser coming back carries.
fn return_sealer(value: &str) -> Result<Sealer, OAuthError> {
    let key = Sha256::new().chain_update(RETURN_KEY_CONTEXT).chain_update(value.as_bytes()).finalize();
    Sealer::from_bytes(&key)
}

/// What a waiting grant is bound to.
fn sealed_for(provider: &str, user: &str) -> Vec<u8> {
    format!("{provider}\0{user}").into_bytes()
}

impl OAuth {
    /// Keeps a flow back from the provider for its application's
    /// confirmation, for `ttl`: its `flow_id`.
    pub(super) async fn await_confirmation(&self, flow: Flow, code: &str, ttl: Duration) -> Result<String, FlowError> {
        let flow_id = random_id(32)?;
        self.challenges().put(Kind::Confirmation, &flow_id, &Confirmation { flow, code: code.to_owned() }, ttl).await?;
        Ok(flow_id)
    }

    /// `POST /oauth/confirm`: the user's application confirms a flow as
    /// `user`. Another user's confirmation is refused and ends the flow.
    /// The right user's exchanges the code and hands back the account and
    /// `return_to` (under `public_url`); the grant is kept when the flow's
    /// browser opens it ([`OAuth::return_to_flow`]).
    pub async fn confirm(
        &self,
        flow_id: &str,
        user: &str,
        public_url: &str,
        metrics: &Metrics,
    ) -> Result<Confirmed, FlowError> {
        let challenges = self.challenges();
        // Taken whoever confirms: each flow is confirmed once, rightly or not.
        let Confirmation { flow, code } =
            challenges.take(Kind::Confirmation, flow_id).await?.ok_or(FlowError::UnknownLink)?;
        if flow.user != user {
            tracing::info!(
                provider = flow.provider,
                "a flow was confirmed by another user; refused, and the flow ended"
            );
            return Err(FlowError::WrongUser);
        }
        let ttl = self.provider(&flow.provider)?.provider.config.link_ttl;
        let (grant, account) = self.exchange(&flow, &code, metrics).await?;
        let value = random_id(32)?;
        let sealed = return_sealer(&value)?.seal(&sealed_for(&flow.provider, &flow.user), &grant.to_json()?)?;
        let returning = Returning {
            link: flow.link,
            provider: flow.provider.clone(),
            user: flow.user,
            binding: flow.binding,
            grant: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sealed),
            account: account.clone(),
        };
        challenges.put(Kind::Return, &value, &returning, ttl).await?;
        let return_to = format!("{public_url}/oauth/{}/return/{value}", flow.provider);
        Ok(Confirmed { provider: flow.provider, account, return_to })
    }

    /// `return_to` opened in a browser holding the flow binding cookie
    /// `browser_binding` (if any): the grant kept when it is the flow's
    /// browser. Any other browser changes nothing. Returns the account.
    pub async fn return_to_flow(
        &self,
        provider: &str,
        value: &str,
        browser_binding: Option<&str>,
        metrics: &Metrics,
    ) -> Result<Option<Account>, FlowError> {
        self.provider(provider)?;
        let challenges = self.challenges();
        let waiting: Option<Returning> = challenges.get(Kind::Return, value).await?;
        let waiting = waiting.filter(|w| w.provider == provider).ok_or(FlowError::UnknownLink)?;
        // Checked before it is taken: another browser neither finishes nor spoils it.
        if !same_browser(waiting.binding.as_deref(), browser_binding) {
            tracing::info!(provider, "a confirmed flow's return_to was opened in another browser; refused");
            return Err(FlowError::NotThisBrowser);
        }
        let Returning { link, user, grant, account, .. } =
            challenges.take(Kind::Return, value).await?.ok_or(FlowError::UnknownLink)?;
        let sealed = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(grant)
            .map_err(|e| OAuthError::Store(format!("a waiting grant: {e}")))?;
        let plain = return_sealer(value)?
            .open(&sealed_for(provider, &user), &sealed)
            .ok_or_else(|| OAuthError::Store("a waiting grant does not open".into()))?;
        self.keep_grant(provider, &link, &user, Grant::from_json(&plain)?, metrics).await?;
        Ok(account)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_grant_opens_only_with_its_own_value_and_user() {
        let sealed = return_sealer("value-1").expect("key").seal(&sealed_for("p", "alice"), b"grant").expect("seal");
        assert_eq!(
            return_sealer("value-1").expect("key").open(&sealed_for("p", "alice"), &sealed).as_deref(),
            Some(&b"grant"[..])
        );
        assert!(return_sealer("value-2").expect("key").open(&sealed_for("p", "alice"), &sealed).is_none());
        assert!(return_sealer("value-1").expect("key").open(&sealed_for("p", "bob"), &sealed).is_none());
    }
}
