//! `[[servers]]`: virtual servers, each its own endpoint
//! (`/servers/<name>/...`) with a curated part of the catalog: the tools its
//! patterns take, renamed, described and with arguments the operator sets.

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use toml::Spanned;

use super::{line_of, ToolPattern, When};

/// The longest server name (it is a path segment).
pub const MAX_SERVER_NAME: usize = 64;

/// One `[[servers]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VirtualServerConfig {
    /// Served at `/servers/<name>/...`: `[A-Za-z0-9_-]`, at most 64.
    pub name: Spanned<ServerName>,
    /// The tools it serves (`Toolkit.Name` patterns, `*` wildcards).
    pub tools: Vec<ToolPattern>,
    /// Tools the patterns take that it does not serve.
    #[serde(default)]
    pub exclude: Vec<ToolPattern>,
    /// What MCP's `initialize` and `server/discover` tell its clients.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Who may use it (any `when` of `[[policy]]`); everyone when absent.
    #[serde(default)]
    pub when: Option<When>,
    /// `Toolkit.Name` to the `Toolkit.Name` this server gives the tool.
    #[serde(default)]
    pub rename: BTreeMap<ToolKey, Spanned<ToolKey>>,
    /// `Toolkit.Name` to the description this server's clients read.
    #[serde(default)]
    pub describe: BTreeMap<ToolKey, String>,
    /// `Toolkit.Name` to the arguments the gateway sets on every call:
    /// gone from the schema clients see, refused when a caller sends them.
    #[serde(default)]
    pub fixed: BTreeMap<ToolKey, Map<String, Value>>,
}

impl VirtualServerConfig {
    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name.get_ref().0
    }

    /// Whether the server's patterns take `key`: a `tools` pattern matches
    /// and no `exclude` does. Returns the deciding pattern: `Ok(tools
    /// pattern)`, `Err(Some(exclude pattern))` or `Err(None)` (no `tools`
    /// pattern matches).
    pub fn takes(&self, key: &str) -> Result<&ToolPattern, Option<&ToolPattern>> {
        let included = self.tools.iter().find(|p| p.matches(key)).ok_or(None)?;
        match self.exclude.iter().find(|p| p.matches(key)) {
            Some(excluded) => Err(Some(excluded)),
            None => Ok(included),
        }
    }
}

/// A server name: `[A-Za-z0-9_-]{1,64}`, a path segment as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerName(pub String);

impl<'de> Deserialize<'de> for ServerName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if !is_server_name(text.as_bytes()) {
            return Err(D::Error::custom(format!(
                "invalid server name {text:?}: 1 to {MAX_SERVER_NAME} of A-Z a-z 0-9 _ - (it is served at /servers/<name>/)"
            )));
        }
        Ok(ServerName(text))
    }
}

/// Whether `name` is a server name: `[A-Za-z0-9_-]{1,64}`.
pub fn is_server_name(name: &[u8]) -> bool {
    (1..=MAX_SERVER_NAME).contains(&name.len())
        && name.iter().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// A `Toolkit.Name`, both parts `[A-Za-z0-9_]+`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ToolKey(pub String);

impl<'de> Deserialize<'de> for ToolKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let part = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        match text.split_once('.') {
            Some((toolkit, name)) if part(toolkit) && part(name) => Ok(ToolKey(text)),
            _ => Err(D::Error::custom(format!(
                "{text:?} is not a tool's Toolkit.Name (letters, digits and _ on each side of one dot, no version)"
            ))),
        }
    }
}

impl std::borrow::Borrow<str> for ToolKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

/// The rules that span a server's keys, and the servers: names unique; each
/// tool `rename`, `describe` or `fixed` names is one the server takes; no
/// two tools renamed to one name; a fixed argument is not empty.
pub(super) fn check(servers: &[VirtualServerConfig], text: &str) -> Result<(), String> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, server) in servers.iter().enumerate() {
        let at = line_of(text, server.name.span().start);
        let name = server.name();
        if let Some(first) = seen.insert(name, at) {
            return Err(format!(
                "line {at}: servers[{i}].name: duplicate server name {name:?} (first defined at line {first})"
            ));
        }
        if server.tools.is_empty() {
            return Err(format!(
                "line {at}: servers[{i}].tools: name at least one tool pattern (e.g. tools = [\"Mail.*\"])"
            ));
        }
        let named = [
            ("rename", server.rename.keys().collect::<Vec<_>>()),
            ("describe", server.describe.keys().collect()),
            ("fixed", server.fixed.keys().collect()),
        ];
        for (table, key) in named.iter().flat_map(|(table, keys)| keys.iter().map(move |key| (table, key))) {
            let why = match server.takes(&key.0) {
                Ok(_) => continue,
                Err(Some(excluded)) => format!("`exclude` has {:?}", excluded.as_str()),
                Err(None) => "no `tools` pattern matches it".to_owned(),
            };
            return Err(format!(
                "line {at}: servers[{i}].{table}: {:?} is not one of server {name:?}'s tools ({why})",
                key.0
            ));
        }
        let mut targets: BTreeMap<&str, &str> = BTreeMap::new();
        for (from, to) in &server.rename {
            if let Some(other) = targets.insert(&to.get_ref().0, &from.0) {
                return Err(format!(
                    "line {}: servers[{i}].rename: {other:?} and {:?} are both renamed {:?}",
                    line_of(text, to.span().start),
                    from.0,
                    to.get_ref().0
                ));
            }
        }
        if let Some((key, _)) = server.fixed.iter().find(|(_, arguments)| arguments.is_empty()) {
            return Err(format!("line {at}: servers[{i}].fixed: {:?} sets no argument", key.0));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize, Debug)]
    struct File {
        servers: Vec<VirtualServerConfig>,
    }

    fn parse(text: &str) -> Result<Vec<VirtualServerConfig>, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        check(&file.servers, text)?;
        Ok(file.servers)
    }

    #[test]
    fn the_table_and_inline_forms_are_one_server() {
        let tables = parse(
            r#"
[[servers]]
name = "support"
tools = ["Mail.*", "Calc.Add"]
exclude = ["Mail.Delete"]
instructions = "Support desk tools."
when = { claim = "groups", contains = "support" }

[servers.rename]
"Mail.Read" = "Support.ReadMail"

[servers.describe]
"Calc.Add" = "Adds two amounts in euros."

[servers.fixed]
"Mail.Read" = { folder = "support-inbox" }
"#,
        )
        .expect("valid");
        let inline = parse(
            r#"
[[servers]]
name = "support"
tools = ["Mail.*", "Calc.Add"]
exclude = ["Mail.Delete"]
instructions = "Support desk tools."
when = { claim = "groups", contains = "support" }
rename = { "Mail.Read" = "Support.ReadMail" }
describe = { "Calc.Add" = "Adds two amounts in euros." }
fixed = { "Mail.Read" = { folder = "support-inbox" } }
"#,
        )
        .expect("valid");
        let strip = |mut s: Vec<VirtualServerConfig>| {
            let s = s.remove(0);
            (s.name().to_owned(), s.tools, s.exclude, s.instructions, s.when, s.describe, s.fixed)
        };
        assert_eq!(strip(tables.clone()), strip(inline.clone()));
        assert_eq!(tables[0].rename[&ToolKey("Mail.Read".into())].get_ref().0, "Support.ReadMail");
        assert_eq!(inline[0].rename[&ToolKey("Mail.Read".into())].get_ref().0, "Support.ReadMail");
        assert!(tables[0].takes("Mail.Read").is_ok());
        assert_eq!(tables[0].takes("Mail.Delete").map_err(|e| e.map(ToolPattern::as_str)), Err(Some("Mail.Delete")));
        assert!(tables[0].takes("Calc.Sub").is_err());
    }

    #[test]
    fn wrong_servers_are_refused_with_the_key() {
        for (text, says) in [
            ("[[servers]]\nname = \"a b\"\ntools = [\"*\"]\n", "invalid server name"),
            ("[[servers]]\nname = \"a\"\ntools = []\n", "servers[0].tools"),
            ("[[servers]]\nname = \"a\"\ntools = [\"*\"]\nport = 1\n", "unknown field"),
            ("[[servers]]\nname = \"a\"\ntools = [\"*\"]\n[[servers]]\nname = \"a\"\ntools = [\"*\"]\n", "duplicate"),
            ("[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nrename = { \"N.X\" = \"A.B\" }\n", "servers[0].rename"),
            (
                "[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nexclude = [\"M.X\"]\nfixed = { \"M.X\" = { a = 1 } }\n",
                "exclude",
            ),
            (
                "[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nrename = { \"M.X\" = \"A.B\", \"M.Y\" = \"A.B\" }\n",
                "both renamed",
            ),
            ("[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nrename = { \"M.X\" = \"AB\" }\n", "Toolkit.Name"),
            ("[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nrename = { \"M.X@1.0.0\" = \"A.B\" }\n", "Toolkit.Name"),
            ("[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nfixed = { \"M.X\" = {} }\n", "sets no argument"),
            ("[[servers]]\nname = \"a\"\ntools = [\"M.*\"]\nwhen = {}\n", "exactly one"),
        ] {
            let error = parse(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
        }
    }
}
