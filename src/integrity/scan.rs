//! Placeholder: the scan of a tool definition (replaced by the real scan).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One thing the scan found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    /// What kind of thing.
    pub kind: FindingKind,
    /// Where: a JSON path into the definition as clients see it.
    pub field: String,
    /// What was found, as plain text.
    pub excerpt: String,
}

/// The kinds of findings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Invisible characters.
    InvisibleText,
    /// Markup aimed at the model.
    ModelMarkup,
    /// Phrases addressing the model.
    ModelDirective,
    /// Reads of credentials or files.
    CredentialRead,
    /// Instructions about another toolkit's tools.
    Shadowing,
    /// A description past the size bound.
    OversizedDescription,
}

/// Scans a definition as clients are shown it.
pub fn scan(shown: &Value, foreign: &dyn Fn(&str) -> Option<String>) -> Vec<Finding> {
    let text = shown.to_string();
    let mut found = Vec::new();
    if text.contains("<IMPORTANT>") {
        found.push(Finding {
            kind: FindingKind::ModelMarkup,
            field: "description".into(),
            excerpt: "<IMPORTANT>".into(),
        });
    }
    let _ = foreign;
    found
}
