//! Virtual servers (`[[servers]]`): each server's view of a catalog, built
//! with the catalog it is a view of (on every publish, a config reload
//! included) and swapped with it, so a call through a server resolves in
//! its own map at the cost of a call at the root, and a request sees a
//! catalog and its views from one moment.
//!
//! A view is a [`Catalog`] of its own: its keys are the names the server
//! gives (`rename`), its definitions carry the server's descriptions
//! (`describe`) and input schemas without the arguments the operator sets
//! (`fixed`), and it has its own `GET /tools` body, search index and MCP
//! names. A route of a view whose tool the server changes remembers the
//! root route it serves ([`Served`]): the original tool is what policies,
//! rate limits, grants, pins and approvals judge, and what is forwarded. A
//! tool served as it is keeps the root's own route.
//!
//! A view narrows, never widens: it holds only tools of the root catalog as
//! published (held to their pins), and callers' policies judge each by its
//! root key on top of it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::{Map, Value};

use super::mcp_names::{McpNameConflict, McpNaming};
use super::{Catalog, CatalogTool, Route, ToolMap};
use crate::config::VirtualServerConfig;
use crate::validate::InputValidator;
use crate::wire::{Input, RawJson};

/// What a view knows of its server.
#[derive(Debug)]
pub struct Server {
    /// The server as configured.
    pub config: VirtualServerConfig,
    /// What building the view found.
    pub report: ServerReport,
}

/// What `/status` and `otc-gateway check` say of a server.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ServerReport {
    /// The server's name.
    pub name: String,
    /// How many tool versions it serves.
    pub tools: usize,
    /// Each tool version it serves: its id there, and the root's.
    pub served: Vec<ServedTool>,
    /// `tools` and `exclude` patterns that match no tool in the catalog.
    pub unmatched_patterns: Vec<String>,
    /// Tools `rename`, `describe` or `fixed` name that are not in the
    /// catalog now.
    pub absent_tools: Vec<String>,
    /// Names a rename gives that another tool of the server has as its own.
    pub rename_collisions: Vec<RenameCollision>,
    /// Fixed arguments a tool does not have, or whose value its schema
    /// refuses: that tool version is left out of the server.
    pub fixed_problems: Vec<FixedProblem>,
    /// Tools of the server whose MCP names clash.
    pub mcp_name_conflicts: Vec<McpNameConflict>,
}

/// A tool version a server serves.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServedTool {
    /// Its id in the server.
    pub id: String,
    /// Its id at the root.
    pub of: String,
}

/// A renamed tool and a tool whose own `Toolkit.Name` is the new name.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RenameCollision {
    /// The name in the server.
    pub name: String,
    /// The tool renamed to it: served under it (the operator chose it).
    pub served: String,
    /// The tool whose own key it is: not served in this server.
    pub hidden: String,
}

/// A fixed argument a tool version cannot take.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FixedProblem {
    /// The tool id, as the root catalog has it.
    pub tool: String,
    /// The argument.
    pub argument: String,
    /// What is wrong.
    pub problem: String,
}

/// What a view's route of a tool the server changes keeps of the root.
#[derive(Debug)]
pub struct Served {
    /// The root catalog's route: what every step after validation works on.
    pub origin: Arc<Route>,
    /// The operator's arguments, added to an input once it is valid.
    pub fixed: Arc<Map<String, Value>>,
}

/// What a caller is told of a fixed argument it sent.
pub const SET_BY_SERVER: &str = "is set by this server: leave it out";

impl Served {
    /// Checks `input` against `tool` (the schema the server's clients see),
    /// then adds the fixed arguments. A fixed argument the caller sent is
    /// refused, never overridden silently.
    pub(super) fn check_input(&self, tool: &CatalogTool, input: &mut Input) -> Result<(), BTreeMap<String, String>> {
        if self.fixed.is_empty() {
            return tool.check_input(input);
        }
        // Read as a `Value` once: the fixed arguments are added to it below.
        if let Value::Object(arguments) = input.value_mut() {
            let sent: BTreeMap<String, String> = self
                .fixed
                .keys()
                .filter(|name| arguments.contains_key(*name))
                .map(|name| (name.clone(), SET_BY_SERVER.to_owned()))
                .collect();
            if !sent.is_empty() {
                return Err(sent);
            }
        }
        tool.check_input(input)?;
        if let Value::Object(arguments) = input.value_mut() {
            arguments.extend(self.fixed.iter().map(|(name, value)| (name.clone(), value.clone())));
        }
        Ok(())
    }
}

/// The views of `catalog` for `servers`. `before` is the catalog it
/// replaces: in each server, an MCP name stays with the tool that held it.
pub(super) fn build(
    catalog: &Catalog,
    servers: &[VirtualServerConfig],
    before: &Catalog,
) -> BTreeMap<String, Arc<Catalog>> {
    servers
        .iter()
        .map(|config| {
            let before = before.servers.get(config.name()).map(|view| &view.mcp);
            (config.name().to_owned(), Arc::new(view(catalog, config, before)))
        })
        .collect()
}

/// One server's view of `root`.
fn view(root: &Catalog, config: &VirtualServerConfig, before: Option<&McpNaming>) -> Catalog {
    let started = Instant::now();
    let mut report = ServerReport { name: config.name().to_owned(), ..ServerReport::default() };
    // Each key the server serves, and the root key it stands for.
    let mut keys: BTreeMap<&str, &str> = BTreeMap::new();
    let mut taken: Vec<&str> = root.tools.keys().map(String::as_str).filter(|key| config.takes(key).is_ok()).collect();
    taken.sort_unstable();
    for key in taken {
        let renamed = config.rename.get(key).map(|to| to.get_ref().0.as_str());
        let name = renamed.unwrap_or(key);
        if let Some(other) = keys.insert(name, key) {
            // Only a rename meets a tool under its own name (`check` refuses
            // two renames to one name). The rename wins: the operator chose
            // the name, and a tool an upstream adds later under that key
            // must not take it over.
            let (served, hidden) = if renamed.is_some() {
                (key, other)
            } else {
                keys.insert(name, other);
                (other, key)
            };
            let (name, served, hidden) = (name.to_owned(), served.to_owned(), hidden.to_owned());
            report.rename_collisions.push(RenameCollision { name, served, hidden });
        }
    }
    let mut tools = ToolMap::default();
    for (&name, &key) in &keys {
        let describe = config.describe.get(key);
        let fixed = config.fixed.get(key).map(|arguments| Arc::new(arguments.clone()));
        let unchanged = name == key && describe.is_none() && fixed.is_none();
        let mut versions = BTreeMap::new();
        for (version, route) in &root.tools[key] {
            if unchanged {
                versions.insert(version.clone(), route.clone());
                continue;
            }
            match derive(route, name, describe, fixed.as_ref()) {
                Ok(derived) => _ = versions.insert(version.clone(), Arc::new(derived)),
                Err(problems) => report.fixed_problems.extend(problems),
            }
        }
        if !versions.is_empty() {
            tools.insert(name.to_owned(), versions);
        }
    }
    report.tools = tools.values().map(BTreeMap::len).sum();
    let routes = tools.values().flat_map(BTreeMap::values);
    report.served = routes
        .map(|r| ServedTool { id: r.tool.definition.id.clone(), of: r.root().tool.definition.id.clone() })
        .collect();
    report.unmatched_patterns = config
        .tools
        .iter()
        .chain(&config.exclude)
        .filter(|pattern| !root.tools.keys().any(|key| pattern.matches(key)))
        .map(|pattern| pattern.as_str().to_owned())
        .collect();
    let named = config.rename.keys().chain(config.describe.keys()).chain(config.fixed.keys());
    let absent: BTreeSet<&str> = named.map(|key| key.0.as_str()).filter(|key| !root.tools.contains_key(*key)).collect();
    report.absent_tools = absent.into_iter().map(str::to_owned).collect();
    // A name the operator gave holds its MCP name against a tool's own.
    let chosen: BTreeSet<&str> = config.rename.values().map(|to| toolkit(&to.get_ref().0)).collect();
    let mcp = McpNaming::assign(
        tools.keys().map(String::as_str),
        |toolkit| chosen.contains(toolkit),
        before.unwrap_or(&McpNaming::default()),
    );
    report.mcp_name_conflicts = mcp.conflicts.clone();
    let mut view = Catalog::new(tools, Vec::new());
    view.mcp = mcp;
    view.epoch = root.epoch;
    view.server = Some(Box::new(Server { config: config.clone(), report }));
    view.build_time = started.elapsed();
    view
}

/// A root route as the server shows it: under `name`, with its description
/// and without its fixed arguments. A version that cannot take the fixed
/// arguments is not served.
fn derive(
    route: &Arc<Route>,
    name: &str,
    describe: Option<&String>,
    fixed: Option<&Arc<Map<String, Value>>>,
) -> Result<Route, Vec<FixedProblem>> {
    let tool = &route.tool;
    let mut definition = tool.definition.clone();
    definition.id = format!("{name}@{}", tool.version);
    definition.name = name.split_once('.').map_or(name, |(_, short)| short).to_owned();
    if let Some(description) = describe {
        description.clone_into(&mut definition.description);
    }
    if let Some(fixed) = fixed {
        definition.input_schema = RawJson::from_value(&without_fixed(tool, fixed)?);
    }
    let shown = Arc::new(tool.shown_as(name.to_owned(), definition));
    let served = Served { origin: route.clone(), fixed: fixed.cloned().unwrap_or_default() };
    Ok(Route::served(shown, served))
}

/// The tool's input schema without the fixed arguments (gone from its
/// top-level `properties` and `required`), when it has each of them as a
/// property and accepts each value.
fn without_fixed(tool: &CatalogTool, fixed: &Map<String, Value>) -> Result<Value, Vec<FixedProblem>> {
    let problem = |argument: &str, problem: String| FixedProblem {
        tool: tool.definition.id.clone(),
        argument: argument.to_owned(),
        problem,
    };
    let schema = tool.definition.input_schema.to_value();
    let properties = schema.get("properties").and_then(Value::as_object);
    let mut problems: Vec<FixedProblem> = fixed
        .keys()
        .filter(|name| !properties.is_some_and(|p| p.contains_key(*name)))
        .map(|name| problem(name, "the tool has no such argument (not in its input_schema's properties)".to_owned()))
        .collect();
    if problems.is_empty() {
        // The values alone, against the whole schema: what the schema says
        // of another argument (one still missing) is not theirs.
        if let Ok(Err(errors)) = InputValidator::compile(&schema).map(|v| v.check(&Value::Object(fixed.clone()))) {
            problems.extend(
                errors
                    .into_iter()
                    .filter(|(name, _)| fixed.contains_key(name))
                    .map(|(name, why)| problem(&name, format!("the tool's input_schema refuses the value: {why}"))),
            );
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut schema = schema;
    if let Some(Value::Object(properties)) = schema.get_mut("properties") {
        properties.retain(|name, _| !fixed.contains_key(name));
    }
    if let Some(Value::Array(required)) = schema.get_mut("required") {
        required.retain(|name| !name.as_str().is_some_and(|name| fixed.contains_key(name)));
    }
    Ok(schema)
}

fn toolkit(key: &str) -> &str {
    key.split_once('.').map_or(key, |(toolkit, _)| toolkit)
}
