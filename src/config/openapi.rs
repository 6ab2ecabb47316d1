//! The keys of an `[[upstreams]]` entry with `protocol = "openapi"`: where
//! its OpenAPI document is (`spec`), which operations become tools
//! (`operations`, `exclude`), and what each security scheme of the document
//! is given (`security`).

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

/// Where an OpenAPI document is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecLocation {
    /// `http://` or `https://`: fetched like a catalog (ETag, poll interval).
    Url(String),
    /// `file:/path`: read from disk at every poll (relative paths are
    /// relative to the gateway's working directory).
    File(String),
}

impl<'de> Deserialize<'de> for SpecLocation {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if let Some(path) = text.strip_prefix("file:") {
            if path.is_empty() || path.contains('\0') {
                return Err(D::Error::custom(format!("spec {text:?}: write file:/path/to/openapi.yaml")));
            }
            return Ok(SpecLocation::File(path.to_owned()));
        }
        let uri: http::Uri = text.parse().map_err(|e| D::Error::custom(format!("invalid spec url {text:?}: {e}")))?;
        if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
            return Err(D::Error::custom(format!(
                "spec {text:?}: an http:// or https:// URL, or file:/path to a JSON or YAML document"
            )));
        }
        Ok(SpecLocation::Url(text))
    }
}

impl std::fmt::Display for SpecLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SpecLocation::Url(url) => f.write_str(url),
            SpecLocation::File(path) => write!(f, "file:{path}"),
        }
    }
}

/// An `operations` or `exclude` pattern: `*` wildcards over an operation's
/// `operationId` or its `METHOD /path` (e.g. `listBooks`, `books*`,
/// `DELETE *`, `GET /books/*`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationPattern(pub String);

impl<'de> Deserialize<'de> for OperationPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        if text.trim().is_empty() || text.chars().any(char::is_control) {
            return Err(D::Error::custom(format!(
                "operation pattern {text:?}: an operationId or \"METHOD /path\", with * wildcards"
            )));
        }
        Ok(OperationPattern(text))
    }
}

impl OperationPattern {
    /// Whether the pattern matches the operation's id or its
    /// `METHOD /path` (the method upper-case, as the pattern may write it).
    pub fn matches(&self, operation_id: Option<&str>, method_and_path: &str) -> bool {
        operation_id.is_some_and(|id| wildcard(&self.0, id)) || wildcard(&self.0, method_and_path)
    }
}

/// `*` matches any run of characters; everything else itself. Iterative,
/// with one backtrack point, so a pattern of many stars stays linear.
fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if pi < p.len() && p[pi] == t[ti] {
            pi += 1;
            ti += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// What one security scheme of the document is given: a `[secrets]` value
/// or an `[authorization.<provider>]` user token. The upstream must also be
/// granted it (`secrets`, `authorization` on the same `[[upstreams]]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecuritySource {
    /// `{ secret = "ID" }`.
    Secret(String),
    /// `{ authorization = "provider" }`.
    Authorization(String),
}

impl<'de> Deserialize<'de> for SecuritySource {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Written {
            secret: Option<String>,
            authorization: Option<String>,
        }
        let written = Written::deserialize(d)?;
        match (written.secret, written.authorization) {
            (Some(id), None) if !id.is_empty() => Ok(SecuritySource::Secret(id)),
            (None, Some(provider)) if !provider.is_empty() => Ok(SecuritySource::Authorization(provider)),
            _ => Err(D::Error::custom(
                "a security scheme is given either { secret = \"<[secrets] id>\" } or { authorization = \"<provider>\" }",
            )),
        }
    }
}

/// `security`: each security scheme name of the document to what it is given.
pub type SecurityMap = BTreeMap<String, SecuritySource>;

/// The `openapi` keys of one `[[upstreams]]` entry, as written.
#[derive(Debug, Clone, Copy)]
pub(super) struct OpenApiKeys<'a> {
    pub(super) spec: Option<&'a Spanned<SpecLocation>>,
    pub(super) operations: Option<&'a Spanned<Vec<OperationPattern>>>,
    pub(super) exclude: Option<&'a Spanned<Vec<OperationPattern>>>,
    pub(super) security: Option<&'a Spanned<SecurityMap>>,
}

impl OpenApiKeys<'_> {
    /// The first key written, with its start: what an upstream of another
    /// protocol must not have.
    pub(super) fn first_written(&self) -> Option<(&'static str, usize)> {
        [
            ("spec", self.spec.map(|s| s.span().start)),
            ("operations", self.operations.map(|s| s.span().start)),
            ("exclude", self.exclude.map(|s| s.span().start)),
            ("security", self.security.map(|s| s.span().start)),
        ]
        .into_iter()
        .find_map(|(key, at)| at.map(|at| (key, at)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_ids_and_method_paths() {
        let p = |s: &str| OperationPattern(s.to_owned());
        assert!(p("*").matches(Some("listBooks"), "GET /books"));
        assert!(p("DELETE *").matches(Some("deleteBook"), "DELETE /books/{id}"));
        assert!(!p("DELETE *").matches(Some("getBook"), "GET /books/{id}"));
        assert!(p("list*").matches(Some("listBooks"), "GET /books"));
        assert!(p("GET /books/*").matches(None, "GET /books/{id}"));
        assert!(!p("GET /books/*").matches(None, "GET /books"));
        assert!(p("*Book*").matches(Some("getBookCover"), "GET /x"));
        assert!(!p("a*b*c").matches(Some("axxbxx"), "-"));
        // Many stars against a long text: linear, not exponential.
        let long = "a".repeat(10_000);
        assert!(!p(&format!("{}b", "*a".repeat(50))).matches(Some(&long), "-"));
    }

    #[test]
    fn security_sources_are_one_or_the_other() {
        #[derive(Deserialize)]
        struct Holder {
            s: SecurityMap,
        }
        let parse = |text: &str| toml::from_str::<Holder>(text).map(|h| h.s).map_err(|e| e.to_string());
        let map = parse("s = { A = { secret = \"K\" }, B = { authorization = \"github\" } }").expect("valid");
        assert_eq!(map["A"], SecuritySource::Secret("K".into()));
        assert_eq!(map["B"], SecuritySource::Authorization("github".into()));
        for bad in [
            "s = { A = { secret = \"K\", authorization = \"g\" } }",
            "s = { A = {} }",
            "s = { A = { token = \"K\" } }",
            "s = { A = { secret = \"\" } }",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spec_locations() {
        #[derive(Deserialize)]
        struct Holder {
            s: SpecLocation,
        }
        let parse = |text: &str| toml::from_str::<Holder>(&format!("s = {text:?}")).map(|h| h.s);
        assert_eq!(parse("file:/etc/otc/a.yaml").expect("file"), SpecLocation::File("/etc/otc/a.yaml".into()));
        assert!(matches!(parse("https://x.example/openapi.json"), Ok(SpecLocation::Url(_))));
        for bad in ["ftp://x/y", "file:", "/etc/a.yaml", "openapi.json"] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
