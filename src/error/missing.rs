//! What a call lacks that a person or an operator can give
//! (`missing_requirements`): secrets, authorizations, a user id, grants,
//! an approval; each said to the model, to the developer, and as JSON.

use serde_json::Value;

/// What a tool needs that the call lacks (`missing_requirements`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MissingRequirements {
    /// Secret ids neither configured nor sent.
    pub secrets: Vec<String>,
    /// Providers the caller has no token for.
    pub authorization: Vec<AuthorizationChallenge>,
    /// Whether a user id is needed and unknown.
    pub user_id: bool,
    /// What the gateway has but the tool's upstream was not granted.
    pub ungranted: Vec<Ungranted>,
    /// A person's approval the call waits for (`[[approval]]`).
    pub approval: Vec<ApprovalChallenge>,
}

/// A call held for approval (`missing_requirements.approval[]`).
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalChallenge {
    /// The request's id.
    pub id: String,
    /// Its page: where the calling user approves or denies it, or (for an
    /// operator's rule) sees that it waits.
    pub url: String,
    /// Where the caller polls its state.
    pub check_url: String,
    /// The rule that holds the call.
    pub rule: String,
    /// Whether the calling user decides (else an operator).
    pub by_caller: bool,
    /// When it expires undecided.
    pub expires_at: u64,
}

/// A secret or provider the gateway supplies that a tool's upstream was
/// not granted.
#[derive(Debug, Clone, PartialEq)]
pub struct Ungranted {
    /// The upstream.
    pub upstream: String,
    /// The `[[upstreams]]` key that would grant it: `secrets` or `authorization`.
    pub key: &'static str,
    /// The secret id or provider.
    pub id: String,
}

/// One provider the caller must authorize with (`ToolAuthorizationChallenge`).
#[derive(Debug, Clone, PartialEq)]
pub struct AuthorizationChallenge {
    /// The provider id.
    pub id: String,
    /// Where to authorize: the gateway's single-use link for a managed
    /// provider, else `authorize_url` when configured.
    pub url: Option<String>,
    /// Managed providers: where the client polls the flow's status.
    pub check_url: Option<String>,
}

impl AuthorizationChallenge {
    /// The entry of a provider the gateway does not run the flow for: its
    /// `authorize_url`, when configured, for `user`.
    pub fn unmanaged(provider: &str, authorize_url: Option<&str>, user: Option<&str>) -> AuthorizationChallenge {
        AuthorizationChallenge {
            id: provider.to_owned(),
            url: authorize_url.map(|url| url.replace("{user_id}", user.unwrap_or_default())),
            check_url: None,
        }
    }
}

impl ApprovalChallenge {
    /// What the caller (a model, often) is told while the call waits.
    fn describe(&self) -> String {
        let until = utc(self.expires_at);
        if self.by_caller {
            format!(
                "This call needs your approval before it runs. Ask the user to open {} to approve or deny it (until {until}), then call the tool again with the same arguments",
                self.url
            )
        } else {
            format!(
                "This call waits for an operator's approval (until {until}); it has not run. Call the tool again with the same arguments once it is approved; {} shows its state",
                self.url
            )
        }
    }
}

/// A time as people read it: `2026-11-28 10:00:00 UTC`.
pub(crate) fn utc(at: u64) -> String {
    let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(at);
    format!("{} UTC", humantime::format_rfc3339_seconds(time)).replacen('T', " ", 1).replacen("Z UTC", " UTC", 1)
}

impl MissingRequirements {
    /// Whether nothing is missing.
    pub fn is_empty(&self) -> bool {
        self.secrets.is_empty()
            && self.authorization.is_empty()
            && !self.user_id
            && self.ungranted.is_empty()
            && self.approval.is_empty()
    }

    /// The secret ids missing, ungranted ones included.
    fn secret_ids(&self) -> Vec<&str> {
        let ungranted = self.ungranted.iter().filter(|u| u.key == "secrets").map(|u| u.id.as_str());
        self.secrets.iter().map(String::as_str).chain(ungranted).collect()
    }

    /// The providers missing without a challenge: ungranted ones.
    fn ungranted_providers(&self) -> impl Iterator<Item = &str> {
        self.ungranted.iter().filter(|u| u.key == "authorization").map(|u| u.id.as_str())
    }

    /// A message naming every missing requirement.
    pub(super) fn describe(&self) -> String {
        if let Some(approval) = self.approval.first() {
            return approval.describe();
        }
        let mut parts = Vec::new();
        let secrets = self.secret_ids();
        if !secrets.is_empty() {
            parts.push(format!("the secret(s) {}", secrets.join(", ")));
        }
        let providers: Vec<&str> =
            self.authorization.iter().map(|a| a.id.as_str()).chain(self.ungranted_providers()).collect();
        if !providers.is_empty() {
            parts.push(format!("authorization with {}", providers.join(", ")));
        }
        if self.user_id {
            parts.push("an authenticated user id".into());
        }
        // The links, for a model to hand to its user (the MCP endpoint's
        // tool result is this text).
        let links: Vec<String> = self
            .authorization
            .iter()
            .filter_map(|a| a.url.as_ref().map(|url| format!("to connect {}, open {url}", a.id)))
            .collect();
        if !links.is_empty() {
            return format!(
                "The tool requires {}: {}, then call the tool again",
                parts.join(" and "),
                links.join("; ")
            );
        }
        format!("The tool requires {}", parts.join(" and "))
    }

    /// What a developer does about it: the config line to add for what an
    /// upstream was not granted, else how the user authorizes or what to
    /// configure.
    pub(super) fn developer_message(&self) -> String {
        let mut advice = Vec::new();
        for u in &self.ungranted {
            advice.push(format!(
                "upstream {:?} is not granted {} {:?}: if it should receive it, add `{} = [\"{}\"]` to its [[upstreams]] entry in gateway.toml",
                u.upstream,
                if u.key == "secrets" { "secret" } else { "provider" },
                u.id,
                u.key,
                u.id
            ));
        }
        if let Some(approval) = self.approval.first() {
            advice.push(format!(
                "[[approval]] rule {:?} holds this call: it runs when the request is approved (check_url reports it); send the same call again, with the same call_id",
                approval.rule
            ));
        }
        if !self.authorization.is_empty() {
            advice.push(
                "the user has not authorized the provider yet (or the grant lacks scopes, or was revoked): open the challenge's url in the user's own browser, then call again; check_url reports progress"
                    .into(),
            );
        }
        if !self.secrets.is_empty() {
            advice.push("configure the secret in [secrets] and grant it to the upstream, or send it in context".into());
        }
        if self.user_id {
            advice.push("authenticate the caller (a JWT or an API key): per-user requirements need a user id".into());
        }
        advice.join("; ")
    }

    /// The 1.0 openapi's `missing_requirements` object (plus `secrets`).
    pub(super) fn to_json(&self) -> Value {
        let mut out = serde_json::Map::new();
        let ungranted = self.ungranted_providers().map(|id| serde_json::json!({ "id": id }));
        if !self.authorization.is_empty() || self.ungranted.iter().any(|u| u.key == "authorization") {
            let challenges = self
                .authorization
                .iter()
                .map(|a| {
                    let mut c = serde_json::Map::new();
                    c.insert("id".into(), Value::String(a.id.clone()));
                    if let Some(url) = &a.url {
                        c.insert("url".into(), Value::String(url.clone()));
                    }
                    if let Some(check_url) = &a.check_url {
                        c.insert("check_url".into(), Value::String(check_url.clone()));
                    }
                    Value::Object(c)
                })
                .chain(ungranted)
                .collect();
            out.insert("authorization".into(), Value::Array(challenges));
        }
        let secrets = self.secret_ids();
        if !secrets.is_empty() {
            let secrets = secrets.iter().map(|id| serde_json::json!({ "id": id })).collect();
            out.insert("secrets".into(), Value::Array(secrets));
        }
        if self.user_id {
            out.insert("user_id".into(), Value::Bool(true));
        }
        if !self.approval.is_empty() {
            let held = self.approval.iter().map(|a| {
                serde_json::json!({"id": a.id, "url": a.url, "check_url": a.check_url, "rule": a.rule, "expires_at": a.expires_at})
            });
            out.insert("approval".into(), Value::Array(held.collect()));
        }
        Value::Object(out)
    }
}
