//! The house plan, enforced: every module of `src/` sits in a layer
//! (ARCHITECTURE.md), and imports only from layers below it or from modules
//! listed before it in its own layer. The list order is one the imports
//! follow, so the import graph has no circle. A new module must be placed
//! here, and an import that goes upward fails this test.

use std::collections::BTreeMap;
use std::path::Path;

/// The layers, bottom first; within a layer, a module may import only the
/// ones listed before it.
const LAYERS: &[(&str, &[&str])] = &[
    ("config", &["config"]),
    (
        "building blocks",
        &[
            "allocator",
            "secret",
            "wire",
            "scrub",
            "resolve",
            "validate",
            "trace",
            "metrics",
            "circuit",
            "http1",
            "http_client",
            "reload",
            "browser",
            "dialect",
            "openapi",
            "vault",
            "auth",
            "mcp",
            "upstream",
            "catalog",
            "redis_client",
            "idempotency",
            "ratelimit",
            "policy",
            "oauth",
        ],
    ),
    ("call pipeline", &["gateway", "tool_search", "reply", "error", "call"]),
    ("fronts", &["mcp_search", "mcp_endpoint", "oauth_endpoint", "proxy", "admin", "server", "demo"]),
];

/// Every module's position: (layer, place in the layer).
fn positions() -> BTreeMap<&'static str, (usize, usize)> {
    let mut positions = BTreeMap::new();
    for (layer, (_, modules)) in LAYERS.iter().enumerate() {
        for (place, module) in modules.iter().enumerate() {
            assert!(positions.insert(*module, (layer, place)).is_none(), "{module} is listed twice");
        }
    }
    positions
}

/// The crate modules a source file names (`crate::x`, `crate::{x, y::z}`),
/// outside its unit tests.
fn imports(source: &str) -> Vec<String> {
    let code = source.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = Vec::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = &group[..group.find('}').unwrap_or(group.len())];
            for item in group.split(',') {
                found.push(first_segment(item.trim()));
            }
        } else {
            found.push(first_segment(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

fn first_segment(path: &str) -> String {
    path.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect()
}

/// Every `.rs` file under `dir`, with the top-level module it belongs to.
fn sources(dir: &Path, module: Option<&str>, out: &mut Vec<(String, String, String)>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("entry").path();
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_owned();
        let owner = module.map_or_else(|| name.clone(), str::to_owned);
        if path.is_dir() {
            sources(&path, Some(&owner), out);
        } else if path.extension().is_some_and(|e| e == "rs")
            && !(module.is_none() && (name == "lib" || name == "main"))
        {
            let text = std::fs::read_to_string(&path).expect("source is readable");
            out.push((path.display().to_string(), owner, text));
        }
    }
}

#[test]
fn every_import_goes_down_the_layers() {
    let positions = positions();
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), None, &mut files);
    assert!(files.len() > 30, "the sources were found");
    let mut wrong = Vec::new();
    for (path, module, text) in &files {
        let Some(&(layer, place)) = positions.get(module.as_str()) else {
            wrong.push(format!("{path}: module {module} is in no layer (tests/layers.rs, ARCHITECTURE.md)"));
            continue;
        };
        for imported in imports(text) {
            if imported == *module {
                continue;
            }
            let Some(&(to_layer, to_place)) = positions.get(imported.as_str()) else {
                wrong.push(format!("{path}: imports crate::{imported}, which is in no layer"));
                continue;
            };
            if to_layer > layer || (to_layer == layer && to_place > place) {
                let (from_name, to_name) = (LAYERS[layer].0, LAYERS[to_layer].0);
                wrong.push(format!("{path}: {module} ({from_name}) imports {imported} ({to_name}), which is above it"));
            }
        }
    }
    assert!(wrong.is_empty(), "imports against the layers:\n{}", wrong.join("\n"));
}

#[test]
fn every_module_of_lib_rs_is_placed() {
    let positions = positions();
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).expect("lib.rs");
    let declared: Vec<&str> = lib
        .lines()
        .filter_map(|line| line.strip_prefix("pub mod ").or_else(|| line.strip_prefix("pub(crate) mod ")))
        .map(|rest| rest.trim_end_matches(';'))
        .collect();
    for module in &declared {
        assert!(positions.contains_key(module), "{module} (lib.rs) is in no layer");
    }
    for module in positions.keys() {
        assert!(declared.contains(module), "{module} is placed but not declared in lib.rs");
    }
}

#[test]
fn the_scanner_sees_grouped_and_plain_imports() {
    let source = "use crate::a::B;\nuse crate::{c, d::E};\nfn f() { crate::g::h(); }\n#[cfg(test)]\nuse crate::z;";
    assert_eq!(imports(source), ["a", "c", "d", "g"]);
}
