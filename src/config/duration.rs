//! Durations as gateway.toml writes them: `"500ms"`, `"10s"`, `"5m"`. One
//! parser for every duration key.

use std::time::Duration;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// Parses a humantime duration, with an error that shows how to write one.
fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("invalid duration {text:?} ({e}); write e.g. \"500ms\", \"10s\", \"5m\""))
}

/// A duration written as a string: "500ms", "10s", "5m".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dur(pub Duration);

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        let parsed = parse(&text).map_err(D::Error::custom)?;
        if parsed.is_zero() {
            return Err(D::Error::custom(format!("duration {text:?} must be greater than zero")));
        }
        Ok(Dur(parsed))
    }
}

/// Deserializes a duration that may be zero (a clock-skew leeway, a TTL).
pub fn deserialize_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    parse(&String::deserialize(d)?).map_err(D::Error::custom)
}
