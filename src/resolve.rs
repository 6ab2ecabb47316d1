//! Tool ids and versions: `Toolkit.Name@x.y.z`, `@x` (exactly x.0.0), or no
//! version (the highest across all upstreams).

use semver::Version;

/// The version part of a requested tool id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRequest {
    /// No `@`: the highest version any upstream serves.
    Latest,
    /// `@x.y.z`, or `@x` meaning `x.0.0`, never "latest x" (docs/api.md, "The API").
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
    let (key, version) = match split_at_byte(id, b'@') {
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
    match split_at_byte(key, b'.') {
        Some((toolkit, name)) => is_id_part(toolkit) && is_id_part(name),
        None => false,
    }
}

/// `text` around the first `byte` (ASCII), as `split_once` does. A plain
/// scan: `split_once(char)`'s memchr costs several times more on an id's
/// few bytes, and ids are split on every call (benches/README.md).
fn split_at_byte(text: &str, byte: u8) -> Option<(&str, &str)> {
    debug_assert!(byte.is_ascii());
    let at = text.bytes().position(|b| b == byte)?;
    // An ASCII byte is a char boundary on both sides.
    Some((&text[..at], &text[at + 1..]))
}

/// `[A-Za-z0-9_]+`.
pub fn is_id_part(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `x.y.z` or the shorthand `x`; nothing else (`1.2`, `latest`, `1.0.0-rc1`).
pub fn parse_requested_version(text: &str) -> Option<Version> {
    match number(text.as_bytes()) {
        Some(major) => Some(Version::new(major, 0, 0)),
        None => parse_tool_version(text),
    }
}

/// A tool definition's version: exactly `x.y.z` with decimal integers.
/// Read byte by byte: `split` and `str::parse` cost several times more, on
/// every call (benches/HISTORY.md, "Figures behind the code").
pub fn parse_tool_version(text: &str) -> Option<Version> {
    let mut fields = [0u64; 3];
    let mut rest = text.as_bytes();
    for (i, field) in fields.iter_mut().enumerate() {
        let end = rest.iter().position(|&b| b == b'.').unwrap_or(rest.len());
        let (digits, tail) = rest.split_at(end);
        *field = number(digits)?;
        rest = match (i, tail) {
            (2, []) => tail,
            (0 | 1, [b'.', tail @ ..]) => tail,
            _ => return None,
        };
    }
    Some(Version::new(fields[0], fields[1], fields[2]))
}

/// Decimal digits, at most 18 (so never more than a `u64` holds).
fn number(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(digits.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
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
            "",
            "Calculator",
            "Calculator.",
            ".Add",
            "Calculator.Add@",
            "Calculator.Add@1.2",
            "Calculator.Add@latest",
            "Calculator.Add@1.0.0-rc1",
            "Calc-ulator.Add",
            "A.B.C",
            "Calculator.Add@1@2",
            "Calculator.Add@ 1",
            "Calculator.Add@99999999999999999999",
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
        assert_eq!(parse_tool_version("10.20.300"), Some(Version::new(10, 20, 300)));
        assert_eq!(parse_tool_version("999999999999999999.0.1"), Some(Version::new(999_999_999_999_999_999, 0, 1)));
        for bad in [
            "",
            ".",
            "..",
            "1..0",
            ".1.0",
            "1.0.",
            "1.0.0.",
            "1.0.x",
            "1.+0.0",
            "1. 0.0",
            "1.0.0-rc1",
            "1.0.0+b",
            "1.0.1234567890123456789",
        ] {
            assert_eq!(parse_tool_version(bad), None, "{bad:?}");
        }
    }
}
