//! Debian's Chromium and chromedriver (`scripts/lib.sh`, `need_chromium`),
//! and the Selenium scripts of `tests/peers/` that click through pages
//! with them.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{peer_script, sdk_python, Gateway};

/// The first of `names` on the PATH, or a failure telling how to install it.
fn installed(names: &[&str], apt: &str) -> PathBuf {
    let found = names.iter().find_map(|name| {
        let out = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().ok()?;
        out.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    });
    found.unwrap_or_else(|| {
        panic!("{} is not installed: run scripts/test.sh (need_chromium) or apt-get install {apt}", names[0])
    })
}

/// Chromium.
pub fn chromium() -> PathBuf {
    installed(&["chromium", "chromium-browser"], "chromium")
}

/// chromedriver, for Selenium.
pub fn chromedriver() -> PathBuf {
    installed(&["chromedriver"], "chromium-driver")
}

/// Runs the Selenium script `script` of `tests/peers/` with `args` (the
/// browser and its driver added) against `gw`, and returns the JSON it
/// printed of what the browsers showed; a failing script fails the test
/// with its output and the gateway's log.
pub async fn selenium(script: &str, args: &[&str], gw: &Gateway) -> Value {
    let mut command = Command::new(sdk_python());
    command.arg(peer_script(script)).args(args);
    command.arg("--chromium").arg(chromium()).arg("--chromedriver").arg(chromedriver());
    // Selenium must not look for a driver of its own on the network.
    command.env("SE_OFFLINE", "true");
    let out = tokio::task::spawn_blocking(move || command.output()).await.expect("join").expect("run the script");
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{said}\n{}\n{}", String::from_utf8_lossy(&out.stderr), gw.logs());
    serde_json::from_str(&said).expect("the script's JSON")
}
