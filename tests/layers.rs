//! The house plan, enforced: every module of `src/` sits in a layer
//! (ARCHITECTURE.md), and imports only from layers below it or from modules
//! listed before it in its own layer. The list order is one the imports
//! follow, so the import graph has no circle. A new module must be placed
//! here, and an import that goes upward fails this test.

use std::collections::BTreeMap;
use std::path::Path;

use proc_macro2::{Delimiter, TokenStream, TokenTree};
use quote::ToTokens;
use syn::visit_mut::{self, VisitMut};

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
            "url_path",
            "trace",
            "metrics",
            "circuit",
            "http1",
            "http_client",
            "otel",
            "reload",
            "browser",
            "dialect",
            "redis_client",
            "journal",
            "integrity",
            "openapi",
            "vault",
            "auth",
            "mcp",
            "upstream",
            "catalog",
            "idempotency",
            "ratelimit",
            "policy",
            "approvals",
            "oauth",
            "recent_calls",
        ],
    ),
    (
        "call pipeline",
        &["gateway", "tool_search", "reply", "error", "requirements", "approval_gate", "call", "explain"],
    ),
    (
        "fronts",
        &[
            "mcp_endpoint",
            "oauth_endpoint",
            "approval_endpoint",
            "proxy",
            "console",
            "admin",
            "admin_client",
            "server",
            "demo",
        ],
    ),
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

/// The crate modules a source file names (`crate::x`, `crate::{x, y::z}`,
/// inside macros too), outside its test code: items under `#[cfg(test)]`
/// are dropped wherever they stand, and everything else is read.
fn imports(source: &str) -> Vec<String> {
    let mut file = syn::parse_file(source).expect("the source parses");
    DropTests.visit_file_mut(&mut file);
    let mut found = Vec::new();
    crate_paths(file.to_token_stream(), &mut found);
    found.retain(|m| !m.is_empty());
    found
}

/// Removes every item, impl item and statement marked `#[cfg(test)]`.
struct DropTests;

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs
        .iter()
        .any(|a| a.path().is_ident("cfg") && a.meta.to_token_stream().to_string().replace(' ', "") == "cfg(test)")
}

fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    match item {
        syn::Item::Const(i) => &i.attrs,
        syn::Item::Enum(i) => &i.attrs,
        syn::Item::Fn(i) => &i.attrs,
        syn::Item::Impl(i) => &i.attrs,
        syn::Item::Macro(i) => &i.attrs,
        syn::Item::Mod(i) => &i.attrs,
        syn::Item::Static(i) => &i.attrs,
        syn::Item::Struct(i) => &i.attrs,
        syn::Item::Trait(i) => &i.attrs,
        syn::Item::Type(i) => &i.attrs,
        syn::Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

impl VisitMut for DropTests {
    fn visit_file_mut(&mut self, file: &mut syn::File) {
        file.items.retain(|item| !is_test(item_attrs(item)));
        visit_mut::visit_file_mut(self, file);
    }

    fn visit_item_mod_mut(&mut self, module: &mut syn::ItemMod) {
        if let Some((_, items)) = &mut module.content {
            items.retain(|item| !is_test(item_attrs(item)));
        }
        visit_mut::visit_item_mod_mut(self, module);
    }

    fn visit_item_impl_mut(&mut self, block: &mut syn::ItemImpl) {
        block.items.retain(|item| match item {
            syn::ImplItem::Fn(f) => !is_test(&f.attrs),
            syn::ImplItem::Const(c) => !is_test(&c.attrs),
            _ => true,
        });
        visit_mut::visit_item_impl_mut(self, block);
    }

    fn visit_block_mut(&mut self, block: &mut syn::Block) {
        block.stmts.retain(|stmt| match stmt {
            syn::Stmt::Item(item) => !is_test(item_attrs(item)),
            syn::Stmt::Local(local) => !is_test(&local.attrs),
            _ => true,
        });
        visit_mut::visit_block_mut(self, block);
    }
}

/// The first segment after each `crate::` in `tokens`, each member's of a
/// `crate::{…}` group.
fn crate_paths(tokens: TokenStream, found: &mut Vec<String>) {
    let tokens: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, token) in tokens.iter().enumerate() {
        match token {
            TokenTree::Group(group) => crate_paths(group.stream(), found),
            TokenTree::Ident(ident) if ident == "crate" => {
                let colons = tokens
                    .get(i + 1..i + 3)
                    .is_some_and(|pair| pair.iter().all(|t| matches!(t, TokenTree::Punct(p) if p.as_char() == ':')));
                match tokens.get(i + 3) {
                    Some(TokenTree::Ident(first)) if colons => found.push(first.to_string()),
                    Some(TokenTree::Group(group)) if colons && group.delimiter() == Delimiter::Brace => {
                        let mut at_start = true;
                        for member in group.stream() {
                            match member {
                                TokenTree::Ident(first) if at_start => found.push(first.to_string()),
                                TokenTree::Punct(p) if p.as_char() == ',' => {
                                    at_start = true;
                                    continue;
                                }
                                _ => {}
                            }
                            at_start = false;
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }
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

/// The sibling files a source file names through `super::` (`super::x`,
/// `super::{x, y}`), outside its test code.
fn sibling_imports(source: &str) -> Vec<String> {
    let mut file = syn::parse_file(source).expect("the source parses");
    DropTests.visit_file_mut(&mut file);
    let text = file.to_token_stream().to_string().replace(' ', "");
    let mut found = Vec::new();
    for (at, _) in text.match_indices("super::") {
        let rest = &text[at + "super::".len()..];
        let names = match rest.strip_prefix('{') {
            Some(group) => group.split('}').next().unwrap_or_default().split(',').map(str::to_owned).collect(),
            None => vec![rest.to_owned()],
        };
        for name in names {
            let first: String = name.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            found.push(first);
        }
    }
    found
}

/// Two files of one module never import each other (one of them would be
/// a layer below the other, or they are one concern); a module's `mod.rs`
/// and its children are not siblings.
#[test]
fn no_two_files_of_a_module_import_each_other() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), None, &mut files);
    let mut edges = std::collections::BTreeSet::new();
    for (path, _, text) in &files {
        let path = Path::new(path);
        let (Some(dir), Some(name)) = (path.parent(), path.file_stem().and_then(|s| s.to_str())) else { continue };
        if name == "mod" {
            continue;
        }
        for sibling in sibling_imports(text) {
            if dir.join(format!("{sibling}.rs")).exists() && sibling != name {
                edges.insert((dir.join(name), dir.join(sibling)));
            }
        }
    }
    let circles: Vec<String> = edges
        .iter()
        .filter(|(a, b)| a < b && edges.contains(&(b.clone(), a.clone())))
        .map(|(a, b)| format!("{} <-> {}", a.display(), b.display()))
        .collect();
    assert!(circles.is_empty(), "files importing each other:\n{}", circles.join("\n"));
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
fn the_scanner_reads_every_item_but_test_code() {
    let source = r#"
use crate::a::B;
use crate::{c, d::E};
fn f() { crate::g::h(); format!("{}", crate::m::N); }
#[cfg(test)]
mod tests { use crate::z; }
#[cfg(test)]
use crate::y;
fn after_the_tests() { crate::k::l(); }
impl S {
    #[cfg(test)]
    fn only_in_tests() { crate::x::w(); }
    pub(crate) fn kept() { crate::n::o(); }
}
fn body() {
    #[cfg(test)]
    use crate::v;
}
"#;
    assert_eq!(imports(source), ["a", "c", "d", "g", "m", "k", "n"]);
}

/// A file does one job: none of `src/` is over 700 lines before its tests.
#[test]
fn no_source_file_is_over_700_lines_before_its_tests() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), None, &mut files);
    let long: Vec<String> = files
        .iter()
        .filter_map(|(path, _, text)| {
            let lines = text.lines().take_while(|line| line.trim() != "#[cfg(test)]").count();
            (lines > 700).then(|| format!("{path}: {lines} lines"))
        })
        .collect();
    assert!(long.is_empty(), "split these:\n{}", long.join("\n"));
}
