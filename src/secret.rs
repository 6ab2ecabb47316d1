//! A string that must never be shown: API keys, OAuth tokens, the Vault token.
//!
//! The gateway holds credentials on behalf of its clients, so a value leaking
//! into a log line, a metric or an error body would defeat the point of
//! centralising them. Wrapping every secret in [`SecretString`] makes the
//! accidental paths (`{:?}` in a `tracing` field, `{}` in an error message,
//! `#[derive(Debug)]` on a config struct) print a mask instead; the one way to
//! read the value is the explicit, greppable [`SecretString::expose`].

use std::fmt;

use zeroize::Zeroize;

/// The mask printed in place of a secret value.
pub const MASK: &str = "***";

/// A secret value whose `Debug` and `Display` print [`MASK`].
///
/// Deliberately not `Serialize`: a secret reaches the wire only through an
/// explicit [`expose`](SecretString::expose). The buffer is wiped when the
/// value is dropped, so freed memory does not keep copies around.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SecretString(String);

impl SecretString {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself. Call it only where the value must leave the process
    /// (an HTTP header, a tool call's context), never to log it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The value itself, moved out: for where it leaves the process as an
    /// owned string (a tool call's context), without a second copy.
    pub fn into_exposed(mut self) -> String {
        std::mem::take(&mut self.0)
    }

    /// Whether the value is the empty string.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl From<String> for SecretString {
    fn from(value: String) -> Self {
        Self(value)
    }
}

impl From<&str> for SecretString {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

impl fmt::Debug for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Quoted like a `String`'s Debug so structs that derive Debug still read
        // naturally, but with the mask inside.
        write!(f, "\"{MASK}\"")
    }
}

impl fmt::Display for SecretString {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(MASK)
    }
}

impl Drop for SecretString {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_mask_the_value() {
        let s = SecretString::new("hunter2-very-secret");
        assert_eq!(format!("{s}"), "***");
        assert_eq!(format!("{s:?}"), "\"***\"");
        assert_eq!(format!("{s:#?}"), "\"***\"");
        assert!(!format!("{s:?}").contains("hunter2"));
    }

    #[test]
    fn expose_returns_the_value() {
        let s = SecretString::from("abc");
        assert_eq!(s.expose(), "abc");
        assert!(!s.is_empty());
        assert!(SecretString::default().is_empty());
        let c = s.clone();
        assert_eq!(c, s);
        drop(s);
        assert_eq!(c.expose(), "abc");
    }

    #[test]
    fn a_struct_holding_one_does_not_leak_it() {
        #[derive(Debug)]
        #[allow(dead_code)]
        struct Holder {
            name: &'static str,
            value: SecretString,
            many: Vec<SecretString>,
        }
        let h = Holder {
            name: "twilio",
            value: SecretString::from("sk_live_123"),
            many: vec![SecretString::from("tok_456")],
        };
        let shown = format!("{h:?} {h:#?}");
        assert!(!shown.contains("sk_live_123"));
        assert!(!shown.contains("tok_456"));
        assert!(shown.contains("twilio"));
    }
}
