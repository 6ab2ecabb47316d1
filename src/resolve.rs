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
///
/// Every call's id is parsed, so each part is read in one pass over its
/// bytes: splitting and `str::parse` cost several times more
/// (benches/README.md, benches/HISTORY.md "Figures behind the code").
pub fn parse_tool_id(id: &str) -> Result<ToolRef<'_>, ToolIdError> {
    let malformed = || ToolIdError::Malformed(printable(id));
    let key_len = key_length(id.as_bytes()).ok_or_else(malformed)?;
    let key = &id[..key_len];
    let version = match id.get(key_len + 1..) {
        None => VersionRequest::Latest,
        Some(v) => VersionRequest::Exact(parse_requested_version(v).ok_or_else(malformed)?),
    };
    Ok(ToolRef { key, version })
}

/// Whether `key` is `Toolkit.Name` with both parts `[A-Za-z0-9_]+`.
pub fn is_tool_key(key: &str) -> bool {
    key_length(key.as_bytes()) == Some(key.len())
}

/// The length of the `Toolkit.Name` that `id` starts with, when it is one and
/// ends there or at an `@`.
fn key_length(id: &[u8]) -> Option<usize> {
    let mut dot = None;
    for (i, &b) in id.iter().enumerate() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => {}
            b'.' if dot.is_none() && i > 0 => dot = Some(i),
            b'@' => return dot.filter(|&d| d + 1 < i).map(|_| i),
            _ => return None,
        }
    }
    dot.filter(|&d| d + 1 < id.len()).map(|_| id.len())
}

/// `[A-Za-z0-9_]+`.
pub fn is_id_part(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// `x.y.z` or the shorthand `x`; nothing else (`1.2`, `latest`, `1.0.0-rc1`).
pub fn parse_requested_version(text: &str) -> Option<Version> {
    match version_fields(text.as_bytes())? {
        ([major, _, _], 1) => Some(Version::new(major, 0, 0)),
        ([major, minor, patch], 3) => Some(Version::new(major, minor, patch)),
        _ => None,
    }
}

/// A tool definition's version: exactly `x.y.z` with decimal integers.
pub fn parse_tool_version(text: &str) -> Option<Version> {
    match version_fields(text.as_bytes())? {
        ([major, minor, patch], 3) => Some(Version::new(major, minor, patch)),
        _ => None,
    }
}

/// Up to three dot-separated decimal fields of at most 18 digits each (so
/// never more than a `u64` holds), and how many there are; `None` for
/// anything else (an empty field, a fourth, another byte).
fn version_fields(text: &[u8]) -> Option<([u64; 3], usize)> {
    let mut fields = [0u64; 3];
    let (mut field, mut digits) = (0, 0);
    for &b in text {
        match b {
            b'0'..=b'9' if digits < 18 => {
                fields[field] = fields[field] * 10 + u64::from(b - b'0');
                digits += 1;
            }
            b'.' if digits > 0 && field < 2 => (field, digits) = (field + 1, 0),
            _ => return None,
        }
    }
    (digits > 0).then_some((fields, field + 1))
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

    /// The parsing before it was made one pass: split at `@` and `.`, then
    /// each part checked.
    mod reference {
        use semver::Version;

        pub fn tool_id(id: &str) -> Option<(&str, Option<Version>)> {
            let (key, version) = match id.split_once('@') {
                Some((key, version)) => (key, Some(version)),
                None => (id, None),
            };
            let (toolkit, name) = key.split_once('.')?;
            if !super::is_id_part(toolkit) || !super::is_id_part(name) {
                return None;
            }
            match version {
                None => Some((key, None)),
                Some(v) => Some((key, Some(requested(v)?))),
            }
        }

        pub fn requested(text: &str) -> Option<Version> {
            match number(text.as_bytes()) {
                Some(major) => Some(Version::new(major, 0, 0)),
                None => definition(text),
            }
        }

        pub fn definition(text: &str) -> Option<Version> {
            let parts: Vec<&str> = text.split('.').collect();
            let [a, b, c] = parts[..] else { return None };
            Some(Version::new(number(a.as_bytes())?, number(b.as_bytes())?, number(c.as_bytes())?))
        }

        fn number(digits: &[u8]) -> Option<u64> {
            if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            Some(digits.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
        }
    }

    proptest::proptest! {
        #[test]
        fn one_pass_parsing_agrees_with_splitting(id in "[A-Za-z0-9_.@x\\-]{0,12}(@[0-9.]{0,22})?") {
            let parsed = parse_tool_id(&id).ok().map(|r| {
                let version = match r.version {
                    VersionRequest::Latest => None,
                    VersionRequest::Exact(v) => Some(v),
                };
                (r.key, version)
            });
            proptest::prop_assert_eq!(parsed, reference::tool_id(&id));
            let key = id.split('@').next().unwrap_or_default();
            proptest::prop_assert_eq!(is_tool_key(key), reference::tool_id(key).is_some());
        }

        #[test]
        fn versions_agree_with_splitting(text in "[0-9.a]{0,40}") {
            proptest::prop_assert_eq!(parse_requested_version(&text), reference::requested(&text));
            proptest::prop_assert_eq!(parse_tool_version(&text), reference::definition(&text));
        }
    }
}
