//! The training run of the profile-guided release build
//! (scripts/build-release.sh) drives real traffic through the gateway and
//! checks every answer. Run here against the debug build, so that a change to
//! the API that would leave the release build trained on errors fails CI
//! instead (the release build itself takes ten minutes; CI does not run it).

use std::path::Path;
use std::process::Command;

fn train(gateway: &str, calls: u32) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pgo-train.py");
    let python = std::env::var("OTC_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    Command::new(python).arg(script).arg(gateway).args(["--calls", &calls.to_string()]).output().expect("python3 runs")
}

#[test]
fn the_training_run_gets_the_answer_it_expects_to_every_request() {
    let out = train(env!("CARGO_BIN_EXE_otc-gateway"), 400);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "training failed: {stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("pgo-train: 400 calls answered"), "{stderr}");
}

#[test]
fn a_training_run_against_a_gateway_that_never_answers_fails() {
    let out = train("/bin/true", 4);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("exited (0) before it listed the training tools"));
}
