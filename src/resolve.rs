//! Tool ids and versions: `Toolkit.Name@x.y.z`, `@x` (exactly x.0.0), or no
//! version (the highest across all upstreams).

use semver::Version;

/// The version part of a requested tool id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRequest {
    /// No `@`: the highest version any upstream serves.
    Latest,
    /// `@x.y.z`, or `@x` meaning `x.0.0` (seed 003, never "latest x").
    Exact(Version),
}

/// A parsed tool id: the `Toolkit.Name` key and what version was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolRef<'a> {
    /// `Toolkit.Name`, the key the catalog is indexed by.
    pub key: &'a str,
    /// The version asked for.
    pub version: VersionRequest,
}

/// Why a tool id could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolIdError {
    /// Not `Toolkit.Name[@version]` with `[A-Za-z0-9_]` parts.
    #[error("`{0}` is not a tool id of the form Toolkit.Name, Toolkit.Name@1 or Toolkit.Name@1.0.0")]
    Malformed(String),
}

/// Parses a requested tool id (the openapi `ToolId` pattern).
pub fn parse_tool_id(id: &str) -> Result<ToolRef<'_>, ToolIdError> {
    let malformed = || ToolIdError::Malformed(printable(id));
    let (key, version) = match id.split_once('@') {
        Some((key, version)) => (key, Some(version)),
        None => (id, None),
    };
    if !is_tool_key(key) {
        return Err(malformed());
    }
    let version = match version {
        None => VersionRequest::Latest,
        Some(v) => VersionRequest::Exact(parse_requested_version(v).ok_or_else(malformed)?),
    };
    Ok(ToolRef { key, version })
}

/// Whether `key` is `Toolkit.Name` with both parts `[A-Za-z0-9_]+`.
pub fn is_tool_key(key: &str) -> bool {
    match key.split_once('.') {
        Some((toolkit, name)) => is_id_part(toolkit) && is_id_part(name),
        None => false,
    }
}

/// `[A-Za-z0-9_]+`.
pub fn is_id_part(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `x.y.z` or the shorthand `x`; nothing else (`1.2`, `latest`, `1.0.0-rc1`).
fn parse_requested_version(text: &str) -> Option<Version> {
    if is_number(text) {
        return Some(Version::new(text.parse().ok()?, 0, 0));
    }
    parse_tool_version(text)
}

/// A tool definition's version: exactly `x.y.z` with decimal integers.
pub fn parse_tool_version(text: &str) -> Option<Version> {
    let mut parts = text.split('.');
    let (major, minor, patch) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || ![major, minor, patch].iter().all(|p| is_number(p)) {
        return None;
    }
    Some(Version::new(major.parse().ok()?, minor.parse().ok()?, patch.parse().ok()?))
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.len() <= 18 && text.bytes().all(|b| b.is_ascii_digit())
}

/// An id as it may be echoed in an error: bounded, printable.
fn printable(id: &str) -> String {
    let mut out: String = id.chars().take(128).map(|c| if c.is_control() { '?' } else { c }).collect();
    if id.chars().count() > 128 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms() {
        let r = parse_tool_id("Calculator.Add@1.0.0").expect("exact");
        assert_eq!(r.key, "Calculator.Add");
        assert_eq!(r.version, VersionRequest::Exact(Version::new(1, 0, 0)));
        let r = parse_tool_id("Calculator.Add@2").expect("shorthand");
        assert_eq!(r.version, VersionRequest::Exact(Version::new(2, 0, 0)));
        let r = parse_tool_id("Calculator.Add").expect("latest");
        assert_eq!(r.version, VersionRequest::Latest);
    }

    #[test]
    fn everything_else_is_invalid() {
        for bad in [
            "", "Calculator", "Calculator.", ".Add", "Calculator.Add@", "Calculator.Add@1.2",
            "Calculator.Add@latest", "Calculator.Add@1.0.0-rc1", "Calc-ulator.Add", "A.B.C",
            "Calculator.Add@1@2", "Calculator.Add@ 1", "Calculator.Add@99999999999999999999",
        ] {
            assert!(parse_tool_id(bad).is_err(), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn definition_versions_are_strict() {
        assert_eq!(parse_tool_version("0.1.2"), Some(Version::new(0, 1, 2)));
        assert_eq!(parse_tool_version("1.0"), None);
        assert_eq!(parse_tool_version("1.0.0.0"), None);
        assert_eq!(parse_tool_version("v1.0.0"), None);
    }
}
