//! The benchmark scripts' own arithmetic, where a slip would go unseen: a
//! figure in benches/README.md is only as good as the parse behind it.
//!
//! `instructions.py --cache` counts the code lines a call runs through from
//! callgrind's per-instruction counts. The dump here is written by hand in
//! callgrind's format (valgrind is a benchmark tool, not installed for the
//! tests): absolute, relative and repeated positions, and a call's inclusive
//! cost, which is not the call site's own.

mod common;

use std::process::Command;

/// Ten calls' worth of counts, in 64-byte lines:
/// - 0x1000 and 0x1004 (line 0x40) ran 10 times: once a call;
/// - 0x1040 (line 0x41) ran 10 times;
/// - the call at 0x10c0 (line 0x43) has only an inclusive cost of 100, then
///   0x10c4 ran 3 times: 0.3 a call, not 1;
/// - 0x2000 (line 0x80), in another function, ran 5 times: 0.5 a call.
const DUMP: &str = "\
version: 1
creator: callgrind-3.19.0
positions: instr line
events: Ir I1mr
summary: 38 3

fn=(1) hot
0x1000 10 10 1
+4 * 10
+60 11 10 1
cfn=(2) cold
calls=10 0x2000 20
+128 12 100 7
+4 13 3

fn=(2)
0x2000 20 5 1
";

#[test]
fn lines_run_counts_each_line_by_its_most_run_instruction_at_most_once_a_call() {
    let dir = std::env::temp_dir().join(format!("otc-bench-scripts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let dump = dir.join("callgrind.test.1");
    std::fs::write(&dump, DUMP).expect("the dump");
    let script = "import sys; sys.path.insert(0, 'benches/load'); import instructions as i; \
                  print(round(i.lines_run(sys.argv[1], 10), 6)); print(i.instructions(sys.argv[1]))";
    // The tests' Python; only its standard library is used here.
    let out = Command::new(common::sdk_python())
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["-c", script])
        .arg(&dump)
        .output()
        .expect("python runs");
    std::fs::remove_dir_all(&dir).ok();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().collect();
    // 1 + 1 + 0.3 + 0.5: the call's inclusive 100 counted would make line
    // 0x43 a whole line; the call site not taken as a position would put
    // 0x10c4 on line 0x41, making 2.5.
    assert_eq!(lines, ["2.8", "38"], "lines run per call, then the instructions");
}
