//! tests/README.md names every file of `tests/`, `tests/common/` and
//! `tests/peers/`, so that its table of which file tests what stays whole: a
//! new test file without a line there fails here.

use std::path::PathBuf;

#[test]
fn the_tests_readme_names_every_test_file_harness_part_and_peer() {
    let tests = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests");
    let readme = std::fs::read_to_string(tests.join("README.md")).expect("tests/README.md");
    let mut missing = Vec::new();
    for dir in ["", "common", "peers"] {
        for entry in std::fs::read_dir(tests.join(dir)).expect("a directory of tests/") {
            let path = entry.expect("an entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
            if !path.is_file() || name == "README.md" || name.starts_with('.') {
                continue;
            }
            let cited = if dir.is_empty() { name } else { format!("{dir}/{name}") };
            if !readme.contains(&format!("`{cited}`")) {
                missing.push(cited);
            }
        }
    }
    missing.sort();
    assert!(missing.is_empty(), "tests/README.md has no line for {missing:?}: add one to its table");
}
