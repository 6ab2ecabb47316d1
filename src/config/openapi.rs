//! The keys of an `[[upstreams]]` entry with `protocol = "openapi"`: where
//! its OpenAPI document is (`spec`), which operations become tools
//! (`operations`, `exclude`), and what each security scheme of the document
//! is given (`security`).

use std::collections::BTreeMap;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};
use toml::Spanned;

use super::{line_of, Config, Protocol, UpstreamConfig};

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
struct OpenApiKeys<'a> {
    spec: Option<&'a Spanned<SpecLocation>>,
    operations: Option<&'a Spanned<Vec<OperationPattern>>>,
    exclude: Option<&'a Spanned<Vec<OperationPattern>>>,
    security: Option<&'a Spanned<SecurityMap>>,
}

impl OpenApiKeys<'_> {
    /// The first key written, with its start: what an upstream of another
    /// protocol must not have.
    fn first_written(&self) -> Option<(&'static str, usize)> {
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

impl Config {
    /// https only for OpenAPI upstreams; their keys only on them, with
    /// `spec` required and `security` naming what exists.
    pub(super) fn check_openapi_keys(&self, i: usize, upstream: &UpstreamConfig, text: &str) -> Result<(), String> {
        let line = |at: usize| line_of(text, at);
        let keys = OpenApiKeys {
            spec: upstream.spec.as_ref(),
            operations: upstream.operations.as_ref(),
            exclude: upstream.exclude.as_ref(),
            security: upstream.security.as_ref(),
        };
        if *upstream.protocol.get_ref() != Protocol::OpenApi {
            if upstream.url.get_ref().is_https() {
                return Err(format!(
                    "line {}: upstreams[{i}].url: {:?}: https upstreams are not supported yet for \"otc\" and \"mcp\" (only \"openapi\"); terminate TLS in front of the tool server or use http on a private network",
                    line(upstream.url.span().start),
                    upstream.url.get_ref().0
                ));
            }
            if let Some((key, at)) = keys.first_written() {
                return Err(format!("line {}: upstreams[{i}].{key}: only for \"openapi\" upstreams", line(at)));
            }
            return Ok(());
        }
        if upstream.spec.is_none() {
            return Err(format!(
                "line {}: upstreams[{i}]: an \"openapi\" upstream needs `spec`, where its OpenAPI document is (\"https://…/openapi.json\" or \"file:/path/openapi.yaml\")",
                line(upstream.protocol.span().start)
            ));
        }
        if let Some(security) = &upstream.security {
            for (scheme, source) in security.get_ref() {
                let missing = match source {
                    SecuritySource::Secret(id) if !self.secrets.contains_key(id) => {
                        Some(format!("{{ secret = {id:?} }} is not in [secrets]"))
                    }
                    SecuritySource::Authorization(p) if !self.authorization.contains_key(p) => {
                        Some(format!("{{ authorization = {p:?} }} is not an [authorization.<provider>] section"))
                    }
                    _ => None,
                };
                if let Some(missing) = missing {
                    return Err(format!(
                        "line {}: upstreams[{i}].security.{scheme}: {missing}",
                        line(security.span().start)
                    ));
                }
            }
        }
        Ok(())
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

    fn err(text: &str) -> String {
        match Config::parse(text, "gateway.toml") {
            Ok(_) => panic!("expected an error for:\n{text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn openapi_upstreams_take_their_keys_and_https() {
        let base = "[secrets]\nK = \"env:K\"\n[authorization.gh]\ntoken = \"env:T_{user_id}\"\n\
                    [[upstreams]]\nname = \"lib\"\nprotocol = \"openapi\"\nurl = \"https://lib.example\"\n";
        let c = Config::parse(
            &format!(
                "{base}spec = \"file:/etc/lib.yaml\"\noperations = [\"*\"]\nexclude = [\"DELETE *\"]\n\
                 security = {{ Key = {{ secret = \"K\" }}, OAuth = {{ authorization = \"gh\" }} }}\n"
            ),
            "t",
        )
        .expect("valid");
        let upstream = &c.upstreams[0];
        assert_eq!(*upstream.protocol.get_ref(), Protocol::OpenApi);
        assert_eq!(
            upstream.spec.as_ref().map(|s| s.get_ref().clone()),
            Some(SpecLocation::File("/etc/lib.yaml".into()))
        );
        assert_eq!(upstream.security.as_ref().map(|s| s.get_ref().len()), Some(2));
        let e = err(base);
        assert!(e.contains("line 7") && e.contains("`spec`"), "{e}");
        let e = err(&format!("{base}spec = \"file:/x\"\nsecurity = {{ Key = {{ secret = \"NOPE\" }} }}\n"));
        assert!(e.contains("line 10") && e.contains("security.Key") && e.contains("NOPE"), "{e}");
        let e = err(&format!("{base}spec = \"file:/x\"\nsecurity = {{ O = {{ authorization = \"nope\" }} }}\n"));
        assert!(e.contains("security.O") && e.contains("[authorization.<provider>]"), "{e}");
        let e = err(&format!("{base}spec = \"ftp://x/y\"\n"));
        assert!(e.contains("line 9") && e.contains("spec"), "{e}");
        // Other protocols: no https, no openapi keys.
        let e = err("[[upstreams]]\nname = \"a\"\nurl = \"https://x\"\n");
        assert!(e.contains("line 3") && e.contains("https") && e.contains("openapi"), "{e}");
        let e = err("[[upstreams]]\nname = \"a\"\nurl = \"http://x\"\nexclude = [\"x\"]\n");
        assert!(e.contains("line 4") && e.contains("upstreams[0].exclude") && e.contains("only for"), "{e}");
        let e = err("[[upstreams]]\nname = \"a\"\nurl = \"http://x\"\nprotocol = \"mcp\"\ntoolkit = \"K\"\nversion = \"1.0.0\"\nspec = \"file:/x\"\n");
        assert!(e.contains("line 7") && e.contains("spec"), "{e}");
    }
}
