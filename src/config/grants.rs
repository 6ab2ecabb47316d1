//! `[[upstreams]] secrets` and `authorization`: what the operator grants a
//! tool server. A tool declares what it needs; the gateway injects only
//! what its upstream was granted.

use std::collections::BTreeSet;

use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// A list of granted ids, or every one (`["*"]`). Absent means none.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Grants {
    /// Nothing (the key is absent, or `[]`).
    #[default]
    Nothing,
    /// Exactly these ids.
    Only(BTreeSet<String>),
    /// Every id (`"*"`, written out).
    All,
}

impl Grants {
    /// Whether `id` is granted.
    pub fn allows(&self, id: &str) -> bool {
        match self {
            Grants::Nothing => false,
            Grants::Only(ids) => ids.contains(id),
            Grants::All => true,
        }
    }

    /// The ids named (none for `All` and `Nothing`).
    pub fn named(&self) -> impl Iterator<Item = &str> {
        let ids = match self {
            Grants::Only(ids) => Some(ids),
            _ => None,
        };
        ids.into_iter().flatten().map(String::as_str)
    }

    /// As gateway.toml would write it, for `/status`.
    pub fn to_list(&self) -> Vec<String> {
        match self {
            Grants::Nothing => Vec::new(),
            Grants::Only(ids) => ids.iter().cloned().collect(),
            Grants::All => vec!["*".to_owned()],
        }
    }
}

impl<'de> Deserialize<'de> for Grants {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ids = Vec::<String>::deserialize(d)?;
        if ids.iter().any(|id| id == "*") {
            if ids.len() > 1 {
                return Err(D::Error::custom("\"*\" grants everything: write it alone"));
            }
            return Ok(Grants::All);
        }
        if let Some(empty) = ids.iter().find(|id| id.is_empty()) {
            return Err(D::Error::custom(format!("{empty:?} is not an id")));
        }
        Ok(if ids.is_empty() { Grants::Nothing } else { Grants::Only(ids.into_iter().collect()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grants(text: &str) -> Result<Grants, String> {
        #[derive(Deserialize)]
        struct Holder {
            g: Grants,
        }
        toml::from_str::<Holder>(&format!("g = {text}")).map(|h| h.g).map_err(|e| e.to_string())
    }

    #[test]
    fn lists_stars_and_nothing() {
        assert_eq!(grants("[]"), Ok(Grants::Nothing));
        assert_eq!(grants("[\"*\"]"), Ok(Grants::All));
        let only = grants("[\"A\", \"B\"]").expect("a list");
        assert!(only.allows("A") && only.allows("B") && !only.allows("C"));
        assert_eq!(only.named().collect::<Vec<_>>(), ["A", "B"]);
        assert!(Grants::All.allows("anything") && !Grants::Nothing.allows("anything"));
        assert!(grants("[\"*\", \"A\"]").is_err());
        assert!(grants("[\"\"]").is_err());
        assert!(grants("\"*\"").is_err(), "a list, not a string");
    }
}
