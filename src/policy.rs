//! Access policy: which callers may see and call which tools.
//!
//! With no `[[policy]]` every caller may use every tool. With one or more, a
//! caller may use a tool when some policy that matches the caller allows it
//! and none that matches denies it. A tool a caller may not use does not
//! exist for that caller: it is left out of its listings, and calling it is
//! answered exactly like calling an unknown tool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use semver::Version;
use serde_json::Value;

use crate::auth::Caller;
use crate::catalog::search::{Scope, SearchIndex};
use crate::catalog::Catalog;
use crate::config::{PolicyConfig, ToolPattern, When, MAX_POLICIES};

/// The policies of one config, compiled, with the filtered listings cached.
#[derive(Debug, Default)]
pub struct AccessPolicy {
    policies: Vec<PolicyConfig>,
    /// Serialised GET /tools bodies by (catalog generation, matching set):
    /// built once per catalog change for each distinct set of policies.
    listings: Mutex<HashMap<(u64, u128), Bytes>>,
    /// The tools each set of policies may see, as search scopes, by
    /// (catalog generation, matching set): built once per catalog change.
    search_scopes: Mutex<HashMap<(u64, u128), Arc<Visible>>>,
}

/// The tool versions a set of policies lets a caller see, as search scopes.
#[derive(Debug)]
struct Visible {
    /// Every visible version.
    all: Scope,
    /// Every visible tool at its latest version.
    latest: Arc<Scope>,
}

/// Why a caller may or may not use a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AccessDecision {
    /// No `[[policy]]` at all: everything is allowed.
    Open,
    /// This allow pattern of a matching policy allows it, and no deny denies it.
    Allowed(Rule),
    /// This deny pattern of a matching policy denies it.
    Denied(Rule),
    /// No matching policy allows it.
    NotAllowed,
}

/// One pattern of one policy: `[[policy]]` number `policy`, pattern number
/// `at` of its allow or deny list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// The policy's index in the config.
    pub policy: usize,
    /// The pattern's index in its list.
    pub at: usize,
}

/// Which policies match a caller (bit i = policy i).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matching(u128);

impl AccessPolicy {
    /// Compiles the `[[policy]]` sections.
    pub fn new(policies: Vec<PolicyConfig>) -> AccessPolicy {
        AccessPolicy { policies, listings: Mutex::default(), search_scopes: Mutex::default() }
    }

    /// Whether any policy is configured (without one, everything is allowed).
    pub fn is_active(&self) -> bool {
        !self.policies.is_empty()
    }

    /// The policies that apply to `caller`.
    pub fn matching(&self, caller: &Caller) -> Matching {
        let mut mask = 0u128;
        for (i, policy) in self.policies.iter().enumerate().take(MAX_POLICIES) {
            if applies(&policy.when, caller) {
                mask |= 1 << i;
            }
        }
        Matching(mask)
    }

    /// Whether a caller with these matching policies may use `key`.
    pub fn allows(&self, matching: Matching, key: &str) -> bool {
        matches!(self.decide(matching, key), AccessDecision::Open | AccessDecision::Allowed(_))
    }

    /// Whether a caller with these matching policies may use `key`, and the
    /// rule that decided it: the one decision behind listings, searches,
    /// calls and `GET /explain`.
    pub fn decide(&self, matching: Matching, key: &str) -> AccessDecision {
        if !self.is_active() {
            return AccessDecision::Open;
        }
        let applying = || self.policies.iter().enumerate().filter(|(i, _)| matching.0 & (1 << i) != 0);
        let first = |pick: fn(&PolicyConfig) -> &[ToolPattern]| {
            applying().find_map(|(i, p)| pick(p).iter().position(|d| d.matches(key)).map(|at| Rule { policy: i, at }))
        };
        if let Some(rule) = first(|p| &p.deny) {
            return AccessDecision::Denied(rule);
        }
        first(|p| &p.allow).map_or(AccessDecision::NotAllowed, AccessDecision::Allowed)
    }

    /// The names of the policies in `matching`, in config order.
    pub fn names_matching(&self, matching: Matching) -> Vec<&str> {
        let applying = self.policies.iter().enumerate().filter(|(i, _)| matching.0 & (1 << i) != 0);
        applying.map(|(_, p)| p.name.as_str()).collect()
    }

    /// A rule's policy name and pattern, as written (`deny` says which list).
    pub fn rule(&self, rule: Rule, deny: bool) -> (&str, &str) {
        let Some(policy) = self.policies.get(rule.policy) else { return ("", "") };
        let list = if deny { &policy.deny } else { &policy.allow };
        (policy.name.as_str(), list.get(rule.at).map_or("", ToolPattern::as_str))
    }

    /// The GET /tools body this caller may see, serialised once per catalog
    /// change and set of matching policies.
    pub fn listing(&self, catalog: &Catalog, matching: Matching) -> Bytes {
        if !self.is_active() {
            return catalog.listing();
        }
        let key = (catalog.generation(), matching.0);
        let mut cache = self.listings.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(body) = cache.get(&key) {
            return body.clone();
        }
        // Listings of older catalogs (and their servers' views) will not
        // be asked for again.
        cache.retain(|(generation, _), _| *generation >= catalog.epoch());
        let body = catalog.listing_where(|tool_key| self.allows(matching, tool_key));
        cache.insert(key, body.clone());
        body
    }

    /// What a caller with these matching policies may search in `catalog`:
    /// each tool it may see at its latest version, or at exactly `version`.
    /// Nothing outside it is ranked or counted (`catalog/search/`).
    pub fn search_scope(&self, catalog: &Catalog, matching: Matching, version: Option<&Version>) -> Arc<Scope> {
        let index = catalog.search_index();
        if !self.is_active() {
            return match version {
                None => index.latest(),
                Some(wanted) => Arc::new(index.scope(|_, doc| doc.version() == wanted)),
            };
        }
        let visible = {
            let key = (catalog.generation(), matching.0);
            let mut cache = self.search_scopes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(visible) = cache.get(&key) {
                visible.clone()
            } else {
                // Scopes of older catalogs (and their servers' views) will
                // not be asked for again.
                cache.retain(|(generation, _), _| *generation >= catalog.epoch());
                // A server's tool is judged by the root key it stands for.
                let all = index.scope(|_, doc| self.allows(matching, doc.root_key()));
                let latest = Arc::new(index.scope(|i, doc| doc.is_latest() && SearchIndex::in_scope(&all, i)));
                let visible = Arc::new(Visible { all, latest });
                cache.insert(key, visible.clone());
                visible
            }
        };
        match version {
            None => visible.latest.clone(),
            Some(wanted) => {
                Arc::new(index.scope(|i, doc| SearchIndex::in_scope(&visible.all, i) && doc.version() == wanted))
            }
        }
    }

    /// Patterns that match no tool in `catalog` (likely typos), as
    /// `policy name: pattern`.
    pub fn unmatched_patterns(&self, catalog: &Catalog) -> Vec<String> {
        let keys = catalog.keys();
        self.policies
            .iter()
            .flat_map(|p| p.allow.iter().chain(&p.deny).map(move |pattern| (p, pattern)))
            .filter(|(_, pattern)| !keys.iter().any(|k| pattern.matches(k)))
            .map(|(p, pattern)| format!("{}: {}", p.name, pattern.as_str()))
            .collect()
    }
}

/// The view of virtual server `name` in `catalog` (`catalog/servers.rs`),
/// when it is configured and `caller` meets its `when` (everyone without
/// one); `None` otherwise: the fronts then answer as for a path that does
/// not exist, so a server is not found by whoever may not use it.
pub fn server_view(catalog: &Catalog, name: &str, caller: &Caller) -> Option<Arc<Catalog>> {
    let view = catalog.server(name)?;
    let when = view.as_server().and_then(|server| server.config.when.as_ref());
    when.is_none_or(|when| applies(when, caller)).then(|| view.clone())
}

/// Whether a `when` (of a policy, or a virtual server) holds for a caller.
pub(crate) fn applies(when: &When, caller: &Caller) -> bool {
    match when {
        When::Any => true,
        When::UserId(user) => caller.authenticated_user() == Some(user.as_str()),
        When::ClaimEquals { claim, value } => match caller.claims().get(claim) {
            Some(Value::String(s)) => s == value,
            Some(Value::Array(items)) => items.iter().any(|v| v.as_str() == Some(value.as_str())),
            _ => false,
        },
        When::ClaimContains { claim, value } => match caller.claims().get(claim) {
            Some(Value::String(s)) => s.split_whitespace().any(|word| word == value),
            Some(Value::Array(items)) => items.iter().any(|v| v.as_str() == Some(value.as_str())),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    fn policies(toml_text: &str) -> AccessPolicy {
        #[derive(Deserialize)]
        struct File {
            policy: Vec<PolicyConfig>,
        }
        let file: File = toml::from_str(toml_text).expect("valid policies");
        AccessPolicy::new(file.policy)
    }

    fn jwt_caller(claims: Value) -> Caller {
        Caller::Jwt { user_id: claims["sub"].as_str().unwrap_or("someone").to_owned(), claims }
    }

    #[test]
    fn claims_as_arrays_strings_and_missing() {
        let access = policies(
            r#"
            [[policy]]
            name = "mail"
            when = { claim = "groups", contains = "mail" }
            allow = ["Gmail.*"]
            [[policy]]
            name = "scoped"
            when = { claim = "scope", contains = "calendar:read" }
            allow = ["Calendar.List"]
            [[policy]]
            name = "everyone"
            when = { any = true }
            allow = ["Calculator.*"]
            deny = ["Calculator.Secret"]
            "#,
        );
        let mail = jwt_caller(json!({"sub": "a", "groups": ["eng", "mail"]}));
        let scoped = jwt_caller(json!({"sub": "b", "scope": "openid calendar:read"}));
        let nobody = jwt_caller(json!({"sub": "c"}));
        let m = access.matching(&mail);
        assert!(access.allows(m, "Gmail.Send") && access.allows(m, "Calculator.Add"));
        assert!(!access.allows(m, "Calendar.List"));
        let s = access.matching(&scoped);
        assert!(access.allows(s, "Calendar.List") && !access.allows(s, "Gmail.Send"));
        let n = access.matching(&nobody);
        assert!(access.allows(n, "Calculator.Add"));
        assert!(!access.allows(n, "Calculator.Secret"), "deny wins");
        assert!(!access.allows(n, "Gmail.Send"));
        assert!(access.allows(access.matching(&Caller::Anonymous), "Calculator.Add"), "any includes anonymous");
    }

    #[test]
    fn no_policy_allows_everything() {
        let access = AccessPolicy::new(Vec::new());
        assert!(access.allows(access.matching(&Caller::Anonymous), "Any.Tool"));
    }

    #[test]
    fn a_when_needs_exactly_one_condition() {
        for bad in [
            "when = {}",
            "when = { any = true, user_id = \"a\" }",
            "when = { claim = \"groups\" }",
            "when = { claim = \"g\", contains = \"a\", equals = \"b\" }",
        ] {
            let text = format!("[[policy]]\nname = \"x\"\n{bad}\nallow = [\"*\"]\n");
            #[derive(Deserialize, Debug)]
            #[allow(dead_code)]
            struct File {
                policy: Vec<PolicyConfig>,
            }
            assert!(toml::from_str::<File>(&text).is_err(), "{bad} should be refused");
        }
    }
}
