//! How the gateway would meet a tool's requirements for one caller: the
//! decision, without reading a secret or a token. `call.rs`
//! (`inject_context`) carries the plan out for a real call; `explain.rs`
//! reports it. One decision, two callers, so an explanation cannot drift
//! from what a call does.

use std::collections::BTreeSet;

use smallvec::SmallVec;

use crate::auth::Caller;
use crate::catalog::{Route, Target};
use crate::config::SecretRef;
use crate::error::{MissingRequirements, RequestError, Ungranted};
use crate::gateway::Generation;
use crate::wire::{CallContext, Requirements};

/// Where one required secret would come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecretPlan<'g> {
    /// `[secrets]` configures it: read it (replacing what the client sent).
    Managed(&'g SecretRef),
    /// Not the gateway's: the client sent it, and it passes through.
    FromClient,
    /// Neither: the call is refused before it is sent.
    Missing,
}

/// Where one required provider's token would come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenPlan<'g, 'c> {
    /// A managed provider: `user`'s stored grant covering `scopes`,
    /// refreshed when about to expire, or a challenge.
    Grant {
        /// The authenticated caller's user id.
        user: &'c str,
        /// The scopes the tool asks for.
        scopes: BTreeSet<String>,
    },
    /// A managed provider, but no authenticated caller to hold a grant.
    GrantNeedsUser,
    /// `[authorization.P]` without a `token`: nothing is injected.
    Nothing,
    /// `[authorization.P] token`: read (for `user`, a per-user reference).
    Configured {
        /// The token reference.
        reference: &'g SecretRef,
        /// The user it is read for (per-user references only).
        user: Option<&'c str>,
        /// Where the user authorizes when there is no token.
        authorize_url: Option<&'g str>,
    },
    /// A per-user `token`, but no authenticated caller.
    ConfiguredNeedsUser {
        /// Where the user authorizes.
        authorize_url: Option<&'g str>,
    },
    /// Not the gateway's: the client sent it, and it passes through.
    FromClient,
    /// Neither: the call is refused before it is sent.
    Missing,
}

/// The plan for every requirement of one tool and one caller. A tool needs
/// few: they are kept inline, not allocated, since every call that injects
/// makes a plan.
#[derive(Debug)]
pub(crate) struct Plan<'r, 'g, 'c> {
    /// The tool needs a user id and the context will have none.
    pub user_id_missing: bool,
    /// Each required secret, in the tool's order.
    pub secrets: SmallVec<[(&'r str, SecretPlan<'g>); 2]>,
    /// Each required provider, in the tool's order.
    pub authorization: SmallVec<[(&'r str, TokenPlan<'g, 'c>); 2]>,
}

/// Decides where each requirement comes from. `context` is the call's
/// context after the gateway's cleaning (managed values the client sent
/// dropped, `user_id` set): what is left in it is the client's own.
pub(crate) fn plan<'r, 'g, 'c>(
    generation: &'g Generation,
    requirements: &'r Requirements,
    caller: &'c Caller,
    context: &CallContext,
) -> Plan<'r, 'g, 'c> {
    let config = &generation.config;
    let user = caller.authenticated_user();
    let secrets = requirements
        .secrets
        .iter()
        .map(|secret| {
            let how = match config.secrets.get(&secret.id) {
                Some(reference) => SecretPlan::Managed(reference.get_ref()),
                None if context.secrets.iter().any(|s| s.id == secret.id) => SecretPlan::FromClient,
                None => SecretPlan::Missing,
            };
            (secret.id.as_str(), how)
        })
        .collect();
    let authorization = requirements
        .authorization
        .iter()
        .map(|provider| {
            let id = &provider.id;
            let how = match config.authorization.get(id) {
                // Nobody can be challenged for a per-user grant but a caller
                // the gateway authenticated.
                Some(_) if generation.oauth.manages(id) => match user {
                    Some(user) => TokenPlan::Grant { user, scopes: provider.scopes().map(str::to_owned).collect() },
                    None => TokenPlan::GrantNeedsUser,
                },
                Some(section) => match &section.token {
                    None => TokenPlan::Nothing,
                    Some(reference) => {
                        let reference = reference.get_ref();
                        let authorize_url = section.authorize_url.as_deref();
                        match (reference.uses_user_id(), user) {
                            (false, _) => TokenPlan::Configured { reference, user: None, authorize_url },
                            (true, Some(user)) => TokenPlan::Configured { reference, user: Some(user), authorize_url },
                            (true, None) => TokenPlan::ConfiguredNeedsUser { authorize_url },
                        }
                    }
                },
                None if context.authorization.iter().any(|a| &a.id == id) => TokenPlan::FromClient,
                None => TokenPlan::Missing,
            };
            (id.as_str(), how)
        })
        .collect();
    Plan { user_id_missing: requirements.user_id && context.user_id.is_none(), secrets, authorization }
}

/// What the first target of `route` lacks of what the tool declares, when
/// none of its upstreams was granted everything the gateway supplies to it;
/// empty when one was.
pub(crate) fn missing_grants(generation: &Generation, route: &Route, requirements: &Requirements) -> Vec<Ungranted> {
    if route.targets.iter().any(|t| t.upstream.granted(requirements, &generation.config)) {
        return Vec::new();
    }
    let Some(first) = route.targets.first() else { return Vec::new() };
    first
        .upstream
        .ungranted(requirements, &generation.config)
        .map(|requirement| Ungranted {
            upstream: first.upstream.name.to_string(),
            key: requirement.grant_key(),
            id: requirement.id().to_owned(),
        })
        .collect()
}

/// Which targets of a route may be sent a call's context: decided once a
/// call, by inject ([`check_grants`]), and obeyed by forward.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granted {
    /// Every target (the common case: one upstream, granted what it needs).
    Every,
    /// Only the targets whose upstream was granted everything the tool
    /// declares of what the gateway supplies; at least one was.
    Some,
}

impl Granted {
    /// Whether `target` of `route` may be sent the call.
    pub fn reaches(self, generation: &Generation, route: &Route, target: &Target) -> bool {
        match (self, &route.tool.definition.requirements) {
            (Granted::Some, Some(requirements)) => target.upstream.granted(requirements, &generation.config),
            _ => true,
        }
    }
}

/// Refuses a call none of whose upstreams was granted everything the tool
/// declares of what the gateway supplies; names what the first lacks.
/// Otherwise says which targets were.
pub(crate) fn check_grants(
    generation: &Generation,
    route: &Route,
    requirements: &Requirements,
) -> Result<Granted, RequestError> {
    if route.targets.iter().all(|t| t.upstream.granted(requirements, &generation.config)) {
        return Ok(Granted::Every);
    }
    let ungranted = missing_grants(generation, route, requirements);
    if ungranted.is_empty() {
        return Ok(Granted::Some);
    }
    tracing::warn!(
        tool = route.tool.definition.id,
        upstream = ungranted[0].upstream,
        "call refused: the tool declares requirements its upstream was not granted"
    );
    Err(RequestError::MissingRequirements(MissingRequirements { ungranted, ..MissingRequirements::default() }))
}
