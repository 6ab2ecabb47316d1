//! `[[policy]]` and `[[rate_limit]]`: who may call which tools, and how often.
//! Both name tools by [`ToolPattern`].

use std::num::NonZeroU32;
use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

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

/// One `[[rate_limit]]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitConfig {
    /// A name, for logs.
    pub name: String,
    /// The tools it applies to (`Toolkit.Name` patterns, `*` wildcards).
    pub tools: Vec<ToolPattern>,
    /// `user`: a bucket per caller (anonymous callers share one); `global`:
    /// one bucket for everyone.
    pub per: Per,
    /// `"5/s"`, `"100/m"` or `"1000/h"`.
    pub rate: Rate,
    /// Calls allowed at once above the steady rate (default: the rate's count).
    #[serde(default)]
    pub burst: Option<u32>,
    /// With `[state] redis`: what a call gets while Redis cannot answer,
    /// `"open"` (served, and counted; the default) or `"closed"` (429).
    #[serde(default)]
    pub fail: FailMode,
}

/// What a shared limit does while its store cannot answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailMode {
    /// Serve the call uncounted.
    #[default]
    Open,
    /// Refuse the call with 429.
    Closed,
}

/// Whose bucket a call counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Per {
    /// One bucket per caller.
    User,
    /// One bucket shared by all.
    Global,
}

/// A count per period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Calls per period.
    pub count: NonZeroU32,
    /// The period: a second, a minute or an hour.
    pub period: Duration,
}

impl<'de> Deserialize<'de> for Rate {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let bad = || D::Error::custom(format!("invalid rate {text:?}: write e.g. \"5/s\", \"100/m\" or \"1000/h\""));
        let (count, unit) = text.split_once('/').ok_or_else(bad)?;
        let count = count.trim().parse::<u32>().ok().and_then(NonZeroU32::new).ok_or_else(bad)?;
        let period = match unit.trim() {
            "s" => Duration::from_secs(1),
            "m" => Duration::from_secs(60),
            "h" => Duration::from_secs(3600),
            _ => return Err(bad()),
        };
        Ok(Rate { count, period })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
