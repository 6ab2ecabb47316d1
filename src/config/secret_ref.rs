//! Secret references: where a credential lives, as written in gateway.toml.
//!
//! `env:NAME`, `file:/path` or `vault:MOUNT/PATH#FIELD` (HashiCorp Vault or
//! OpenBao, KV v2), any of which may contain `{user_id}`. References are
//! configuration, not secrets: they may be logged and shown in errors. The
//! vault module resolves them (and fills in `{user_id}`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The one template a reference may contain.
pub const USER_ID_TEMPLATE: &str = "{user_id}";

/// Where a secret lives. Parse with [`SecretRef::parse`] or `str::parse`;
/// config structs can hold one directly (it deserializes from a string).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SecretRef {
    /// `env:NAME`: the environment variable `NAME`, as it was at start (see [`EnvSource`]).
    Env {
        /// The variable's name.
        name: String,
    },
    /// `file:/path`: the whole file, one trailing newline trimmed, read at
    /// resolve time (so rotated files are picked up).
    File {
        /// The file's path, as written (relative paths are relative to the
        /// gateway's working directory).
        path: String,
    },
    /// `vault:MOUNT/PATH#FIELD`: field `FIELD` of the KV v2 secret `PATH` in
    /// the secrets engine mounted at `MOUNT`.
    Vault {
        /// The KV v2 mount: the first path segment (e.g. `secret`).
        mount: String,
        /// The secret's path under the mount (e.g. `tools/twilio`).
        path: String,
        /// The key inside the secret's data (e.g. `api_key`).
        field: String,
    },
}

/// Why a string is not a valid secret reference. Messages never repeat text
/// that might be a pasted secret value (a string with no known scheme).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretRefError {
    /// The empty string.
    #[error("empty secret reference; expected env:NAME, file:/path or vault:MOUNT/PATH#FIELD")]
    Empty,
    /// No `scheme:` prefix. The string is not echoed: it may be a secret
    /// value pasted where a reference belongs.
    #[error("a secret reference must start with env:, file: or vault: (e.g. \"env:NAME\", \"file:/path\", \"vault:MOUNT/PATH#FIELD\"); literal secret values are not accepted")]
    NoScheme,
    /// A scheme other than `env`, `file` and `vault`.
    #[error("unknown secret reference scheme {0:?}; expected env:, file: or vault:")]
    UnknownScheme(String),
    /// Leading or trailing whitespace, almost always a copy-paste slip.
    #[error("secret reference {0:?} has leading or trailing whitespace")]
    Whitespace(String),
    /// `env:` with no name.
    #[error("secret reference \"env:\" has an empty variable name")]
    EmptyEnvName,
    /// An environment variable name that cannot exist.
    #[error("secret reference {0:?}: an environment variable name cannot contain '=' or NUL")]
    InvalidEnvName(String),
    /// `file:` with no path.
    #[error("secret reference \"file:\" has an empty path")]
    EmptyPath,
    /// A file path containing NUL.
    #[error("secret reference {0:?}: a file path cannot contain NUL")]
    InvalidPath(String),
    /// `vault:` without `#FIELD`.
    #[error("secret reference {0:?} has no #FIELD; expected vault:MOUNT/PATH#FIELD")]
    MissingField(String),
    /// `vault:...#` with nothing after the `#`, or a second `#`.
    #[error("secret reference {0:?} has an empty or invalid #FIELD; expected vault:MOUNT/PATH#FIELD")]
    InvalidField(String),
    /// `vault:` without both a mount and a path.
    #[error("secret reference {0:?} needs a mount and a path; expected vault:MOUNT/PATH#FIELD")]
    MissingPath(String),
    /// An empty, `.` or `..` segment, or a control character, in a vault path.
    #[error("secret reference {0:?} has an empty, '.' or '..' path segment or a control character")]
    InvalidSegment(String),
    /// A `{...}` template other than `{user_id}`.
    #[error("secret reference {reference:?} uses the template {template:?}; only {{user_id}} is supported")]
    UnknownTemplate {
        /// The whole reference.
        reference: String,
        /// The offending template.
        template: String,
    },
    /// A `{` with no `}` or a `}` with no `{`.
    #[error("secret reference {0:?} has an unbalanced '{{' or '}}'; the only template is {{user_id}}")]
    UnbalancedBrace(String),
}

impl SecretRef {
    /// Parses `env:NAME`, `file:/path` or `vault:MOUNT/PATH#FIELD`.
    pub fn parse(s: &str) -> Result<SecretRef, SecretRefError> {
        let trimmed = s.trim();
        if trimmed.is_empty() {
            return Err(SecretRefError::Empty);
        }
        if trimmed != s {
            // Echo only what is clearly a reference; anything else may be a
            // pasted secret value.
            return if ["env:", "file:", "vault:"].iter().any(|p| trimmed.starts_with(p)) {
                Err(SecretRefError::Whitespace(trimmed.to_owned()))
            } else {
                Err(SecretRefError::NoScheme)
            };
        }
        let Some((scheme, rest)) = s.split_once(':') else {
            return Err(SecretRefError::NoScheme);
        };
        // Only echo a scheme that looks like one: anything else may be a
        // secret value with a colon in it.
        let scheme_is_wordlike =
            !scheme.is_empty() && scheme.len() <= 10 && scheme.bytes().all(|b| b.is_ascii_lowercase());
        if !scheme_is_wordlike {
            return Err(SecretRefError::NoScheme);
        }
        let parsed = match scheme {
            "env" => {
                if rest.is_empty() {
                    return Err(SecretRefError::EmptyEnvName);
                }
                if rest.contains(['=', '\0']) {
                    return Err(SecretRefError::InvalidEnvName(s.to_owned()));
                }
                SecretRef::Env { name: rest.to_owned() }
            }
            "file" => {
                if rest.is_empty() {
                    return Err(SecretRefError::EmptyPath);
                }
                if rest.contains('\0') {
                    return Err(SecretRefError::InvalidPath(s.to_owned()));
                }
                SecretRef::File { path: rest.to_owned() }
            }
            "vault" => {
                let Some((full_path, field)) = rest.split_once('#') else {
                    return Err(SecretRefError::MissingField(s.to_owned()));
                };
                if field.is_empty() || field.contains('#') || field.chars().any(char::is_control) {
                    return Err(SecretRefError::InvalidField(s.to_owned()));
                }
                let Some((mount, path)) = full_path.split_once('/') else {
                    return Err(SecretRefError::MissingPath(s.to_owned()));
                };
                if mount.is_empty() || path.is_empty() {
                    return Err(SecretRefError::MissingPath(s.to_owned()));
                }
                // Reject what a URL would normalise away or what would let a
                // reference read outside the place it names.
                let bad_segment = full_path.split('/').any(|seg| seg.is_empty() || seg == "." || seg == "..")
                    || full_path.chars().any(char::is_control);
                if bad_segment {
                    return Err(SecretRefError::InvalidSegment(s.to_owned()));
                }
                SecretRef::Vault { mount: mount.to_owned(), path: path.to_owned(), field: field.to_owned() }
            }
            other => return Err(SecretRefError::UnknownScheme(other.to_owned())),
        };
        check_templates(s)?;
        Ok(parsed)
    }

    /// Whether the reference contains `{user_id}`, i.e. resolves differently
    /// per calling user.
    pub fn uses_user_id(&self) -> bool {
        // Asked on every call that injects a secret: a scan for `{` first,
        // which most references do not have (`str::contains` costs about
        // ten times more on a short name: benches/README.md).
        let templated = |s: &str| has_open_brace(s.as_bytes()) && s.contains(USER_ID_TEMPLATE);
        match self {
            SecretRef::Env { name } => templated(name),
            SecretRef::File { path } => templated(path),
            SecretRef::Vault { mount, path, field } => [mount, path, field].iter().any(|p| templated(p)),
        }
    }

    /// The scheme: `"env"`, `"file"` or `"vault"`.
    pub fn scheme(&self) -> &'static str {
        match self {
            SecretRef::Env { .. } => "env",
            SecretRef::File { .. } => "file",
            SecretRef::Vault { .. } => "vault",
        }
    }
}

/// Checks that every `{...}` in `s` is `{user_id}`.
fn check_templates(s: &str) -> Result<(), SecretRefError> {
    let mut rest = s;
    while let Some(open) = rest.find(['{', '}']) {
        if rest[open..].starts_with('}') {
            return Err(SecretRefError::UnbalancedBrace(s.to_owned()));
        }
        let after = &rest[open..];
        let Some(close) = after.find('}') else {
            return Err(SecretRefError::UnbalancedBrace(s.to_owned()));
        };
        let template = &after[..=close];
        if template[1..].contains('{') {
            return Err(SecretRefError::UnbalancedBrace(s.to_owned()));
        }
        if template != USER_ID_TEMPLATE {
            return Err(SecretRefError::UnknownTemplate { reference: s.to_owned(), template: template.to_owned() });
        }
        rest = &after[close + 1..];
    }
    Ok(())
}

impl FromStr for SecretRef {
    type Err = SecretRefError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SecretRef::parse(s)
    }
}

impl fmt::Display for SecretRef {
    /// The reference as written in the config (never the value).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretRef::Env { name } => write!(f, "env:{name}"),
            SecretRef::File { path } => write!(f, "file:{path}"),
            SecretRef::Vault { mount, path, field } => write!(f, "vault:{mount}/{path}#{field}"),
        }
    }
}

impl<'de> Deserialize<'de> for SecretRef {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        SecretRef::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl Serialize for SecretRef {
    /// Serializes as the reference string; references are not secret.
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Whether `bytes` holds a `{`, eight bytes at a time (the last word
/// overlapping the one before): with a byte loop, `uses_user_id` cost 83
/// instructions for a 13-byte name, 52 with this (benches/README.md,
/// "Per-call work after the front door: the bound met").
fn has_open_brace(bytes: &[u8]) -> bool {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    // A byte of `word ^ "{{{{{{{{"` is zero where `word` has a `{`; the
    // "has a zero byte" test (Bit Twiddling Hacks) is exact.
    let has = |word: &[u8]| {
        let x = u64::from_ne_bytes(word.try_into().expect("eight bytes")) ^ (ONES * u64::from(b'{'));
        x.wrapping_sub(ONES) & !x & HIGHS != 0
    };
    match bytes.len() {
        0..8 => bytes.contains(&b'{'),
        n => bytes.chunks_exact(8).any(has) || has(&bytes[n - 8..]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The word-at-a-time scan finds a `{` exactly where a byte scan does.
        #[test]
        fn an_open_brace_is_found_as_a_byte_scan_finds_it(
            bytes in proptest::collection::vec(proptest::prop_oneof![
                8 => 0x20u8..0x7f,
                1 => proptest::prelude::any::<u8>(),
                1 => proptest::strategy::Just(b'{'),
            ], 0..40),
        ) {
            proptest::prop_assert_eq!(has_open_brace(&bytes), bytes.contains(&b'{'));
        }
    }

    fn p(s: &str) -> SecretRef {
        match SecretRef::parse(s) {
            Ok(r) => r,
            Err(e) => panic!("{s}: {e}"),
        }
    }

    #[test]
    fn parses_each_form() {
        assert_eq!(p("env:OPENAI_API_KEY"), SecretRef::Env { name: "OPENAI_API_KEY".into() });
        assert_eq!(p("file:/etc/otc/key"), SecretRef::File { path: "/etc/otc/key".into() });
        assert_eq!(p("file:rel/key.txt"), SecretRef::File { path: "rel/key.txt".into() });
        assert_eq!(
            p("vault:secret/tools/twilio#api_key"),
            SecretRef::Vault { mount: "secret".into(), path: "tools/twilio".into(), field: "api_key".into() }
        );
        assert_eq!(p("vault:kv/x#f"), SecretRef::Vault { mount: "kv".into(), path: "x".into(), field: "f".into() });
        let r: SecretRef = "env:A".parse().expect("parses");
        assert_eq!(r.scheme(), "env");
    }

    #[test]
    fn display_round_trips() {
        for s in [
            "env:A_B",
            "file:/run/secrets/x",
            "vault:secret/oauth/google/{user_id}#access_token",
            "env:TOKEN_{user_id}",
        ] {
            assert_eq!(p(s).to_string(), s);
            assert_eq!(p(&p(s).to_string()), p(s));
        }
    }

    #[test]
    fn templates() {
        assert!(p("vault:secret/oauth/google/{user_id}#access_token").uses_user_id());
        assert!(p("env:TOKEN_{user_id}").uses_user_id());
        assert!(p("file:/tokens/{user_id}.txt").uses_user_id());
        assert!(p("vault:secret/x#{user_id}").uses_user_id());
        assert!(!p("vault:secret/x#f").uses_user_id());
        assert!(!p("env:X").uses_user_id());
    }

    #[test]
    fn parse_errors_are_clear() {
        let e = |s: &str| match SecretRef::parse(s) {
            Ok(r) => panic!("{s} parsed as {r:?}"),
            Err(e) => e,
        };
        assert_eq!(e(""), SecretRefError::Empty);
        assert_eq!(e("env:"), SecretRefError::EmptyEnvName);
        assert_eq!(e("file:"), SecretRefError::EmptyPath);
        assert!(matches!(e("env:A=B"), SecretRefError::InvalidEnvName(_)));
        assert!(matches!(e("vault:secret/x"), SecretRefError::MissingField(_)));
        assert!(e("vault:secret/x").to_string().contains("#FIELD"));
        assert!(matches!(e("vault:secret/x#"), SecretRefError::InvalidField(_)));
        assert!(matches!(e("vault:secret/x#a#b"), SecretRefError::InvalidField(_)));
        assert!(matches!(e("vault:secret#f"), SecretRefError::MissingPath(_)));
        assert!(matches!(e("vault:/x#f"), SecretRefError::MissingPath(_)));
        assert!(matches!(e("vault:secret/#f"), SecretRefError::MissingPath(_)));
        assert!(matches!(e("vault:secret/a//b#f"), SecretRefError::InvalidSegment(_)));
        assert!(matches!(e("vault:secret/../b#f"), SecretRefError::InvalidSegment(_)));
        assert!(matches!(e("vault:secret/a/.#f"), SecretRefError::InvalidSegment(_)));
        assert_eq!(e("aws:foo"), SecretRefError::UnknownScheme("aws".into()));
        assert!(e("aws:foo").to_string().contains("unknown secret reference scheme"));
        assert!(matches!(e(" env:A"), SecretRefError::Whitespace(_)));
        assert!(matches!(e(" sk_live_1 "), SecretRefError::NoScheme));
        assert_eq!(e("  "), SecretRefError::Empty);
        assert!(matches!(e("env:A "), SecretRefError::Whitespace(_)));
        match e("env:TOKEN_{tenant}") {
            SecretRefError::UnknownTemplate { template, .. } => assert_eq!(template, "{tenant}"),
            other => panic!("{other:?}"),
        }
        assert!(e("env:TOKEN_{tenant}").to_string().contains("only {user_id} is supported"));
        assert!(matches!(e("env:A{user_id"), SecretRefError::UnbalancedBrace(_)));
        assert!(matches!(e("env:A}"), SecretRefError::UnbalancedBrace(_)));
        assert!(matches!(e("env:A{{user_id}}"), SecretRefError::UnbalancedBrace(_)));
    }

    #[test]
    fn a_literal_secret_is_not_echoed() {
        for s in ["sk_live_abcdef123456", "Bearer abc:def", "ghp_xyz:1234567890abcdefghij"] {
            let msg = match SecretRef::parse(s) {
                Ok(r) => panic!("{s} parsed as {r:?}"),
                Err(e) => e.to_string(),
            };
            assert!(!msg.contains("abc"), "{msg}");
            assert!(!msg.contains("sk_live"), "{msg}");
            assert!(!msg.contains("xyz"), "{msg}");
        }
    }

    #[test]
    fn deserializes_from_toml_with_line_numbers() {
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct C {
            a: SecretRef,
            b: Option<SecretRef>,
        }
        let c: C = toml::from_str("a = \"env:X\"\nb = \"vault:secret/y#z\"\n").expect("valid");
        assert_eq!(c.a, SecretRef::Env { name: "X".into() });
        let err = toml::from_str::<C>("a = \"env:X\"\nb = \"vault:secret/y\"\n").expect_err("invalid").to_string();
        assert!(err.contains("line 2"), "{err}");
        assert!(err.contains("#FIELD"), "{err}");
    }

    #[test]
    fn serializes_as_the_reference() {
        let r = p("vault:secret/a#b");
        assert_eq!(serde_json::to_string(&r).expect("ser"), "\"vault:secret/a#b\"");
    }
}
