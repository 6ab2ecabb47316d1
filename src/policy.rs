//! Access policy: which callers may see and call which tools.
//!
//! With no `[[policy]]` every caller may use every tool. With one or more, a
//! caller may use a tool when some policy that matches the caller allows it
//! and none that matches denies it. A tool a caller may not use does not
//! exist for that caller: it is left out of its listings, and calling it is
//! answered exactly like calling an unknown tool.

use std::collections::HashMap;
use std::sync::Mutex;

use bytes::Bytes;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::auth::{Caller, CallerKind};
use crate::catalog::Catalog;

/// The most `[[policy]]` sections (the matching set is a 128-bit mask).
pub const MAX_POLICIES: usize = 128;

/// One `[[policy]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// A name, for logs.
    pub name: String,
    /// Which callers it applies to.
    pub when: When,
    /// Tool patterns (`Toolkit.Name`, `*` wildcards) it allows.
    #[serde(default)]
    pub allow: Vec<ToolPattern>,
    /// Tool patterns it denies; a deny wins over any allow.
    #[serde(default)]
    pub deny: Vec<ToolPattern>,
}

/// Which callers a policy applies to: exactly one condition.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// Everyone, anonymous callers included.
    Any,
    /// The caller with this user id.
    UserId(String),
    /// A JWT claim equal to a value (a string, or an array holding it).
    ClaimEquals {
        /// The claim's name.
        claim: String,
        /// The value.
        value: String,
    },
    /// A JWT claim containing a value: an array element, or a word of a
    /// space-separated string (as `scope` is).
    ClaimContains {
        /// The claim's name.
        claim: String,
        /// The value.
        value: String,
    },
}

impl<'de> Deserialize<'de> for When {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Raw {
            any: Option<bool>,
            user_id: Option<String>,
            claim: Option<String>,
            contains: Option<String>,
            equals: Option<String>,
        }
        let raw = Raw::deserialize(d)?;
        match raw {
            Raw { any: Some(true), user_id: None, claim: None, contains: None, equals: None } => Ok(When::Any),
            Raw { any: None, user_id: Some(user), claim: None, contains: None, equals: None } => Ok(When::UserId(user)),
            Raw { any: None, user_id: None, claim: Some(claim), contains: Some(value), equals: None } => {
                Ok(When::ClaimContains { claim, value })
            }
            Raw { any: None, user_id: None, claim: Some(claim), contains: None, equals: Some(value) } => {
                Ok(When::ClaimEquals { claim, value })
            }
            _ => Err(D::Error::custom(
                "`when` takes exactly one of { any = true }, { user_id = \"...\" }, { claim = \"...\", contains = \"...\" } or { claim = \"...\", equals = \"...\" }",
            )),
        }
    }
}

/// A pattern on `Toolkit.Name`: letters, digits, `_`, `.` and `*` wildcards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolPattern(String);

impl<'de> Deserialize<'de> for ToolPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let ok = !text.is_empty() && text.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'*'));
        if !ok {
            return Err(D::Error::custom(format!(
                "invalid tool pattern {text:?}: use Toolkit.Name with * wildcards, e.g. \"Gmail.*\""
            )));
        }
        Ok(ToolPattern(text))
    }
}

impl ToolPattern {
    /// Whether `key` (`Toolkit.Name`) matches.
    pub fn matches(&self, key: &str) -> bool {
        glob(self.0.as_bytes(), key.as_bytes())
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `*` matches any run of characters; everything else itself.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while t < text.len() {
        if p < pattern.len() && pattern[p] == b'*' {
            star = Some(p);
            mark = t;
            p += 1;
        } else if p < pattern.len() && pattern[p] == text[t] {
            p += 1;
            t += 1;
        } else if let Some(s) = star {
            p = s + 1;
            mark += 1;
            t = mark;
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|&b| b == b'*')
}

/// The policies of one config, compiled, with the filtered listings cached.
#[derive(Debug, Default)]
pub struct AccessPolicy {
    policies: Vec<PolicyConfig>,
    /// Serialised GET /tools bodies by (catalog generation, matching set):
    /// built once per catalog change for each distinct set of policies.
    listings: Mutex<HashMap<(u64, u128), Bytes>>,
}

/// Which policies match a caller (bit i = policy i).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Matching(u128);

impl AccessPolicy {
    /// Compiles the `[[policy]]` sections.
    pub fn new(policies: Vec<PolicyConfig>) -> AccessPolicy {
        AccessPolicy { policies, listings: Mutex::new(HashMap::new()) }
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
        if !self.is_active() {
            return true;
        }
        let applying = || self.policies.iter().enumerate().filter(|(i, _)| matching.0 & (1 << i) != 0).map(|(_, p)| p);
        if applying().any(|p| p.deny.iter().any(|d| d.matches(key))) {
            return false;
        }
        applying().any(|p| p.allow.iter().any(|a| a.matches(key)))
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
        // Listings of older catalogs will not be asked for again.
        cache.retain(|(generation, _), _| *generation == key.0);
        let body = catalog.listing_where(|tool_key| self.allows(matching, tool_key));
        cache.insert(key, body.clone());
        body
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

/// Whether a policy's condition holds for a caller.
fn applies(when: &When, caller: &Caller) -> bool {
    match when {
        When::Any => true,
        When::UserId(user) => caller.kind != CallerKind::Anonymous && caller.user_id.as_deref() == Some(user.as_str()),
        When::ClaimEquals { claim, value } => match caller.claims.get(claim) {
            Some(Value::String(s)) => s == value,
            Some(Value::Array(items)) => items.iter().any(|v| v.as_str() == Some(value.as_str())),
            _ => false,
        },
        When::ClaimContains { claim, value } => match caller.claims.get(claim) {
            Some(Value::String(s)) => s.split_whitespace().any(|word| word == value),
            Some(Value::Array(items)) => items.iter().any(|v| v.as_str() == Some(value.as_str())),
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
        Caller { user_id: claims["sub"].as_str().map(str::to_owned), claims, kind: CallerKind::Jwt }
    }

    #[test]
    fn globs() {
        let p = |s: &str| ToolPattern(s.to_owned());
        assert!(p("Gmail.*").matches("Gmail.Send"));
        assert!(!p("Gmail.*").matches("Gmailx.Send"));
        assert!(p("*").matches("Anything.Goes"));
        assert!(p("*.List").matches("Calendar.List"));
        assert!(!p("Calendar.List").matches("Calendar.ListAll"));
        assert!(p("Cal*.L*t").matches("Calendar.List"));
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
        assert!(access.allows(access.matching(&Caller::anonymous()), "Calculator.Add"), "any includes anonymous");
    }

    #[test]
    fn no_policy_allows_everything() {
        let access = AccessPolicy::new(Vec::new());
        assert!(access.allows(access.matching(&Caller::anonymous()), "Any.Tool"));
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
