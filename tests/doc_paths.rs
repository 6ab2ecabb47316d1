//! Every repository path that the docs and the code's comments cite exists,
//! so a reader following one never lands on a file that was renamed or
//! deleted; and nothing cites documents that are not in the repository.

use std::path::{Path, PathBuf};

/// The endings of the files a citation may name.
const EXTENSIONS: &[&str] = &[".rs", ".md", ".toml", ".sh", ".py", ".yaml", ".yml", ".json", ".mjs", ".js", ".tpl"];

/// Directories that hold no sources or docs of the repository.
const SKIPPED: &[&str] = &["target", "node_modules", "state", "proptest-regressions"];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every file of the repository (hidden directories, build output and
/// installed peers left out), relative to its root.
fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable directory") {
        let path = entry.expect("entry").path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with('.') || SKIPPED.contains(&name) {
            continue;
        }
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path.strip_prefix(root()).expect("under the root").to_path_buf());
        }
    }
}

/// The text a file cites paths in: a Rust file's comments, a document's
/// whole text.
fn citing_text(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(root().join(path)).ok()?;
    match path.extension().and_then(|e| e.to_str()) {
        Some("rs") => Some(text.lines().filter_map(comment).collect::<Vec<_>>().join("\n")),
        // A fenced block holds commands and examples (files a user
        // writes), not citations.
        Some("md") => Some(text.split("```").step_by(2).collect::<Vec<_>>().join("\n")),
        // Helm's `# Source:` lines name templates inside the chart it rendered.
        Some("toml") | Some("sh") | Some("yaml") => Some(
            text.lines()
                .filter_map(|line| line.find('#').map(|at| &line[at..]))
                .filter(|comment| !comment.starts_with("# Source:"))
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        _ => None,
    }
}

/// A Rust line's comment: from the first `//` outside a string literal.
fn comment(line: &str) -> Option<&str> {
    let bytes = line.as_bytes();
    let mut in_string = false;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'"' if i == 0 || bytes[i - 1] != b'\\' => in_string = !in_string,
            b'/' if !in_string && bytes.get(i + 1) == Some(&b'/') => return Some(&line[i..]),
            _ => {}
        }
    }
    None
}

/// The path-like words of `text` that name a file by its ending: relative
/// paths and bare file names, not URLs, absolute paths or patterns.
fn citations(text: &str) -> Vec<String> {
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_-./".contains(c);
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(is_path_char) {
        let before = &rest[..start];
        let word_len = rest[start..].find(|c: char| !is_path_char(c)).unwrap_or(rest.len() - start);
        let word = rest[start..start + word_len].trim_end_matches('.');
        let after = rest[start + word_len..].chars().next();
        rest = &rest[start + word_len..];
        let follows_scheme = before.ends_with("://") || before.ends_with(':') || before.ends_with('@');
        let is_pattern = matches!(after, Some('*') | Some('{') | Some('<') | Some('$'))
            || before.ends_with('*')
            || before.ends_with('}')
            || before.ends_with('>')
            || before.ends_with('$');
        if follows_scheme
            || is_pattern
            || word.starts_with('/')
            || word.starts_with('.')
            || word.contains("..")
            || !EXTENSIONS.iter().any(|e| word.ends_with(e) && word.len() > e.len())
        {
            continue;
        }
        found.push(word.to_owned());
    }
    found
}

/// Whether `cited`, written in `from`, names a file: from the root, from
/// `src/` (the code's comments name modules by their path there), from the
/// citing file's directory, or, for a bare name, any file of that name.
fn exists(cited: &str, from: &Path, all: &[PathBuf]) -> bool {
    let root = root();
    if !cited.contains('/') {
        return all.iter().any(|f| f.file_name().is_some_and(|n| n == cited));
    }
    let dir = from.parent().unwrap_or(Path::new(""));
    [root.join(cited), root.join("src").join(cited), root.join(dir).join(cited)].iter().any(|p| p.exists())
}

#[test]
fn every_cited_path_exists() {
    let mut all = Vec::new();
    files(&root(), &mut all);
    assert!(all.len() > 50, "the repository was found");
    let mut missing = Vec::new();
    for file in &all {
        if file.ends_with("tests/doc_paths.rs") {
            continue;
        }
        let Some(text) = citing_text(file) else { continue };
        for cited in citations(&text) {
            if !exists(&cited, file, &all) {
                missing.push(format!("{}: {cited}", file.display()));
            }
        }
    }
    missing.sort();
    missing.dedup();
    assert!(missing.is_empty(), "cited but not in the repository:\n{}", missing.join("\n"));
}

#[test]
fn nothing_cites_documents_outside_the_repository() {
    let mut all = Vec::new();
    files(&root(), &mut all);
    let mut found = Vec::new();
    for file in &all {
        if file.ends_with("tests/doc_paths.rs") {
            continue;
        }
        let Some(text) = citing_text(file) else { continue };
        for (n, line) in text.lines().enumerate() {
            let lower = line.to_ascii_lowercase();
            let seed =
                lower.match_indices("seed ").any(|(at, _)| lower[at + 5..].starts_with(|c: char| c.is_ascii_digit()));
            if seed || lower.contains("../shared") {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "citations of documents not in the repository:\n{}", found.join("\n"));
}

#[test]
fn the_scanner_finds_paths_and_skips_urls_and_patterns() {
    let text = "see src/proxy/lean.rs, `call.rs` and [docs](docs/api.md#errors). \
                Not https://example.com/a.json, /etc/otc/gateway.toml, tests/*.rs, \
                benches/{a,b}.rs, ../x.md or `${DIR}/y.sh`.";
    assert_eq!(citations(text), ["src/proxy/lean.rs", "call.rs", "docs/api.md"]);
    assert_eq!(comment(r#"let x = ["ftp://a/b.rs", "c.rs"]; // see d.rs"#), Some("// see d.rs"));
    assert_eq!(comment(r#"let url = "https://x/y.json";"#), None);
}
