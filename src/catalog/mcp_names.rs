//! The name each tool gets on MCP: `Toolkit.Name` becomes `Toolkit_Name`.
//!
//! Two keys can give one name (`A_B.C` and `A.B_C` are both `A_B_C`). A
//! name is what an MCP client calls, with its user's arguments, so who
//! holds it is a trust decision, made once here for `tools/list`, calls,
//! search mode and explain alike:
//!
//! 1. a tool in a reserved toolkit (`[[upstreams]] toolkits`) holds it: a
//!    reserved toolkit's names are never given to another upstream's tool;
//! 2. else the tool that held it in the catalog before keeps it: a name,
//!    once given, does not move when a new upstream appears;
//! 3. else the first key in sort order.
//!
//! Every other key is not served on MCP (it stays callable by its OTC id)
//! and the clash is a [`McpNameConflict`], which `check`, `/status` and the
//! console report. Nothing is renamed behind the operator's back.

use std::collections::BTreeMap;

use serde::Serialize;

/// Two or more tools whose MCP names clash, and which one holds the name.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct McpNameConflict {
    /// The MCP name.
    pub name: String,
    /// The `Toolkit.Name` that holds it.
    pub served: String,
    /// A `Toolkit.Name` that would have the same name, not served on MCP.
    pub hidden: String,
    /// Why `served` holds it.
    pub reason: &'static str,
}

/// The MCP names of one catalog.
#[derive(Debug, Default)]
pub(crate) struct McpNaming {
    /// MCP name to `Toolkit.Name`.
    pub(crate) names: BTreeMap<String, String>,
    /// The clashes, sorted by name.
    pub(crate) conflicts: Vec<McpNameConflict>,
}

/// The MCP name a `Toolkit.Name` asks for.
pub(crate) fn underscored(key: &str) -> String {
    key.replace('.', "_")
}

impl McpNaming {
    /// Names `keys` (each once). `reserved` tells whether a key's toolkit
    /// is reserved for an upstream; `before` is the previous catalog's
    /// naming.
    pub(crate) fn assign<'k>(
        keys: impl IntoIterator<Item = &'k str>,
        reserved: impl Fn(&str) -> bool,
        before: &McpNaming,
    ) -> McpNaming {
        let mut wanted: BTreeMap<String, Vec<&str>> = BTreeMap::new();
        for key in keys {
            wanted.entry(underscored(key)).or_default().push(key);
        }
        let mut naming = McpNaming::default();
        for (name, mut keys) in wanted {
            keys.sort_unstable();
            let held_before = before.names.get(&name).map(String::as_str);
            let in_reserved: Vec<&str> = keys.iter().copied().filter(|key| reserved(toolkit(key))).collect();
            let (holder, reason) = match (in_reserved.as_slice(), held_before) {
                ([only], _) => (*only, "its toolkit is reserved"),
                (_, Some(held)) if keys.contains(&held) && (in_reserved.is_empty() || in_reserved.contains(&held)) => {
                    (held, "it held the name first")
                }
                ([first, ..], _) => (*first, "its toolkit is reserved; first in sort order"),
                ([], _) => (keys[0], "first in sort order"),
            };
            for &hidden in keys.iter().filter(|key| **key != holder) {
                naming.conflicts.push(McpNameConflict {
                    name: name.clone(),
                    served: holder.to_owned(),
                    hidden: hidden.to_owned(),
                    reason,
                });
            }
            naming.names.insert(name, holder.to_owned());
        }
        if !naming.conflicts.is_empty() {
            tracing::warn!(
                clashes = naming.conflicts.len(),
                "tools whose MCP names clash: one holds each name, the others are not served on MCP (see /status)"
            );
        }
        naming
    }
}

fn toolkit(key: &str) -> &str {
    key.split_once('.').map_or(key, |(toolkit, _)| toolkit)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(naming: &McpNaming) -> Vec<(&str, &str)> {
        naming.names.iter().map(|(n, k)| (n.as_str(), k.as_str())).collect()
    }

    #[test]
    fn a_name_is_the_key_with_underscores() {
        let naming = McpNaming::assign(["Calc.Add", "Mail.Send"], |_| false, &McpNaming::default());
        assert_eq!(names(&naming), [("Calc_Add", "Calc.Add"), ("Mail_Send", "Mail.Send")]);
        assert!(naming.conflicts.is_empty());
    }

    #[test]
    fn a_reserved_toolkit_keeps_its_names_whatever_sorts_first() {
        // A.B_C sorts before A_B.C; A_B is reserved.
        let naming = McpNaming::assign(["A_B.C", "A.B_C"], |toolkit| toolkit == "A_B", &McpNaming::default());
        assert_eq!(names(&naming), [("A_B_C", "A_B.C")]);
        assert_eq!(naming.conflicts.len(), 1);
        assert_eq!(naming.conflicts[0].hidden, "A.B_C");
        // Even when the other tool held the name before the reservation.
        let before = McpNaming::assign(["A.B_C"], |_| false, &McpNaming::default());
        let after = McpNaming::assign(["A.B_C", "A_B.C"], |toolkit| toolkit == "A_B", &before);
        assert_eq!(names(&after), [("A_B_C", "A_B.C")]);
    }

    #[test]
    fn a_given_name_does_not_move_when_a_new_tool_appears() {
        let before = McpNaming::assign(["Z_Y.X"], |_| false, &McpNaming::default());
        // The newcomer sorts first, but the name stays with its holder.
        let after = McpNaming::assign(["Z.Y_X", "Z_Y.X"], |_| false, &before);
        assert_eq!(names(&after), [("Z_Y_X", "Z_Y.X")]);
        assert_eq!(after.conflicts[0].hidden, "Z.Y_X");
        assert_eq!(after.conflicts[0].reason, "it held the name first");
        // Once the holder is gone, the name is free.
        let gone = McpNaming::assign(["Z.Y_X"], |_| false, &after);
        assert_eq!(names(&gone), [("Z_Y_X", "Z.Y_X")]);
        assert!(gone.conflicts.is_empty());
    }
}
