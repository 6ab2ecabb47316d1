//! `[[approval]]`: calls a person approves before the gateway runs them
//! (docs/approvals.md).

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::duration::Dur;
use super::policy::{ToolPattern, When};

/// One `[[approval]]` rule. It matches a call when every criterion it
/// names matches: a tool pattern, each annotation, and `when`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalConfig {
    /// The rule's name: in the approval page, the audit log and the metric.
    pub name: String,
    /// Tool patterns (`Toolkit.Name`, `*` wildcards); any one matches.
    #[serde(default)]
    pub tools: Vec<ToolPattern>,
    /// MCP tool annotations (`destructiveHint = true`, ...), each equal to
    /// the tool's own (as pinned: `[catalog] pin`).
    #[serde(default)]
    pub annotations: BTreeMap<String, Value>,
    /// Which callers' calls it holds; everyone's when absent.
    #[serde(default)]
    pub when: Option<When>,
    /// Who decides.
    #[serde(default)]
    pub approver: Approver,
    /// How long a request waits for its decision; then it has expired.
    #[serde(default = "default_timeout")]
    pub timeout: Dur,
}

/// Who decides a rule's requests.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Approver {
    /// The calling user, in their own browser signed in with `[login]`.
    #[default]
    Caller,
    /// An operator: the console's Approvals page or `POST /approvals/<id>/approve`.
    Admin,
}

impl Approver {
    /// As written in gateway.toml.
    pub fn as_str(self) -> &'static str {
        match self {
            Approver::Caller => "caller",
            Approver::Admin => "admin",
        }
    }
}

fn default_timeout() -> Dur {
    Dur(Duration::from_secs(600))
}

/// The shortest and the longest `timeout`.
const TIMEOUT_BOUNDS: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(7 * 24 * 3600));

/// The rules that span an `[[approval]]` list and the rest of the config.
pub(super) fn check(rules: &[ApprovalConfig], has_login: bool) -> Result<(), String> {
    let mut names = std::collections::BTreeSet::new();
    for (i, rule) in rules.iter().enumerate() {
        let ok_name = !rule.name.is_empty()
            && rule.name.len() <= 64
            && rule.name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !ok_name {
            return Err(format!(
                "approval[{i}].name: {:?} must be 1-64 letters, digits, '-', '_' or '.' (it labels a metric)",
                rule.name
            ));
        }
        if !names.insert(rule.name.as_str()) {
            return Err(format!("approval[{i}].name: duplicate approval rule {:?}", rule.name));
        }
        if rule.tools.is_empty() && rule.annotations.is_empty() {
            return Err(format!(
                "approval[{i}] ({}): name the calls it holds with `tools = [\"Toolkit.*\"]` and/or `annotations = {{ destructiveHint = true }}` (`tools = [\"*\"]` for every call)",
                rule.name
            ));
        }
        let (shortest, longest) = TIMEOUT_BOUNDS;
        if rule.timeout.0 < shortest || rule.timeout.0 > longest {
            return Err(format!("approval[{i}].timeout: between 1s and 7d"));
        }
        if rule.approver == Approver::Caller && !has_login {
            return Err(format!(
                "approval[{i}] ({}): approver = \"caller\" needs browsers to sign in: add a [login] section (issuer, client_id, ...), or set approver = \"admin\"",
                rule.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rules(text: &str) -> Vec<ApprovalConfig> {
        #[derive(Deserialize)]
        struct File {
            approval: Vec<ApprovalConfig>,
        }
        toml::from_str::<File>(text).unwrap().approval
    }

    #[test]
    fn a_rule_reads_as_written_with_its_defaults() {
        let read = rules(
            "[[approval]]\nname = \"repo-deletes\"\ntools = [\"Repo.Delete*\"]\nannotations = { destructiveHint = true }\nwhen = { claim = \"groups\", contains = \"contractors\" }\n",
        );
        assert_eq!(read[0].approver, Approver::Caller);
        assert_eq!(read[0].timeout.0, Duration::from_secs(600));
        assert_eq!(read[0].annotations["destructiveHint"], Value::Bool(true));
        assert!(check(&read, true).is_ok());
    }

    #[test]
    fn a_caller_approver_needs_login_and_a_rule_names_its_calls() {
        let caller = rules("[[approval]]\nname = \"a\"\ntools = [\"X.*\"]\n");
        assert!(check(&caller, false).unwrap_err().contains("add a [login] section"));
        let admin = rules("[[approval]]\nname = \"a\"\ntools = [\"X.*\"]\napprover = \"admin\"\n");
        assert!(check(&admin, false).is_ok());
        let empty = rules("[[approval]]\nname = \"a\"\napprover = \"admin\"\n");
        assert!(check(&empty, false).unwrap_err().contains("tools = [\"*\"]"));
        let twice =
            rules("[[approval]]\nname = \"a\"\ntools = [\"X.*\"]\n[[approval]]\nname = \"a\"\ntools = [\"Y.*\"]\n");
        assert!(check(&twice, true).unwrap_err().contains("duplicate"));
        let short = rules("[[approval]]\nname = \"a\"\ntools = [\"X.*\"]\ntimeout = \"500ms\"\n");
        assert!(check(&short, true).is_err());
    }
}
