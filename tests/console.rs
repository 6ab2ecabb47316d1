//! The operator console in a real browser: Debian's Chromium, headless
//! (`scripts/lib.sh`, `need_chromium`), renders each page of a running
//! gateway's admin listener with `--dump-dom`, after its script has fetched
//! the data; the test reads the rendered DOM and what the page logged.

mod common;

use std::path::PathBuf;
use std::process::Command;

use bytes::Bytes;
use common::{echo, send, send_with_headers, temp_file, tool, GatewayConfig, ToolServer};
use serde_json::json;

const ADMIN_TOKEN: &str = "console-admin-token-2f9a";

/// Chromium, or `None` when it is not installed (scripts/test.sh installs it).
fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|name| {
        let found = Command::new("sh").args(["-c", &format!("command -v {name}")]).output().ok()?;
        found.status.success().then(|| PathBuf::from(String::from_utf8_lossy(&found.stdout).trim()))
    })
}

/// The DOM of `url` once its scripts ran, and what the page logged.
fn render(browser: &PathBuf, url: &str) -> (String, String) {
    let profile = temp_file("chromium-profile", "d", "");
    std::fs::remove_file(&profile).expect("a fresh name");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-extensions",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
            &format!("--user-data-dir={}", profile.display()),
            "--dump-dom",
            url,
        ])
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    (String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// With `OTC_CONSOLE_SCREENSHOTS=DIR`, a screenshot of `url` as `DIR/NAME.png`
/// (how docs/console/'s pictures are taken).
fn screenshot(browser: &PathBuf, url: &str, name: &str) {
    let Ok(dir) = std::env::var("OTC_CONSOLE_SCREENSHOTS") else { return };
    let profile = temp_file("chromium-profile", "d", "");
    std::fs::remove_file(&profile).expect("a fresh name");
    let out = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1280,800",
            "--virtual-time-budget=10000",
            &format!("--user-data-dir={}", profile.display()),
            &format!("--screenshot={dir}/{name}.png"),
            url,
        ])
        .output()
        .expect("run chromium");
    let _ = std::fs::remove_dir_all(&profile);
    assert!(out.status.success(), "screenshot of {url}: {}", String::from_utf8_lossy(&out.stderr));
}

/// The page's console messages among Chromium's log lines.
fn console_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains("CONSOLE")).collect()
}

// Chromium runs blocking: the tool server keeps answering on other threads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_real_data_and_the_csp_holds() {
    let Some(browser) = chromium() else {
        panic!("Chromium is not installed: run scripts/test.sh (need_chromium) or apt-get install chromium");
    };
    let server = ToolServer::start(common::catalog(vec![
        tool("Calc.Add", "1.0.0", common::add_schema()),
        common::tool_described("Mail.Read", "1.0.0", json!({"type": "object"}), "Read the user's mailbox"),
        tool("Mail.Send", "1.0.0", json!({"type": "object"})),
    ]))
    .await;
    server.on_call(echo);
    let gw = GatewayConfig::new()
        .upstream("org", &server.url())
        .server_line("admin_token = \"env:CONSOLE_ADMIN\"")
        .raw(
            "[auth]\napi_keys = [{ key = \"env:CONSOLE_ANN\", user_id = \"ann\" }]\n\n\
             [[policy]]\nname = \"mail-team\"\nwhen = { user_id = \"ann\" }\nallow = [\"*\"]\ndeny = [\"Mail.Send\"]\n",
        )
        .start_with_env(&[("CONSOLE_ADMIN", ADMIN_TOKEN), ("CONSOLE_ANN", "ann-key-77")])
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while send(gw.admin, "GET", "/status", Bytes::new(), None).await.json()["tools"] != 3 {
        assert!(std::time::Instant::now() < deadline, "the catalog never arrived");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let body = json!({"request": {"tool_id": "Calc.Add", "call_id": "console-call-1", "input": {"a": 1, "b": 2}}});
    let headers = [("oxp-api-key", "ann-key-77"), ("content-type", "application/json")];
    let called = send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body.to_string()), &headers).await;
    assert_eq!(called.status, 200, "{}", called.text());

    // The page itself: the policy on the wire, nothing from elsewhere.
    let index = send(gw.admin, "GET", "/", Bytes::new(), None).await;
    assert_eq!(index.status, 200);
    let csp = index.header("content-security-policy").expect("a CSP");
    assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe"), "{csp}");
    assert!(index.header("content-type").unwrap_or_default().starts_with("text/html"));
    // Behind the admin listener's Host and Origin policy too.
    let rebound = send_with_headers(gw.admin, "GET", "/", Bytes::new(), &[("host", "evil.example:9464")]).await;
    assert_eq!(rebound.status, 421);

    let base = format!("http://{}/", gw.admin);
    let explain_hash = format!("#explain?user_id=ann&tool={}&run=1", url_escape("Mail.Send"));
    let pages: [(&str, String, &[&str]); 8] = [
        ("overview", "#overview".into(), &["config generation", "tools", "Last reload"]),
        ("upstreams", "#upstreams".into(), &["<td>org</td>", "<span class=\"ok\">up</span>", "secrets: none"]),
        ("catalog", "#catalog".into(), &["Calc.Add@1.0.0", "Mail.Read@1.0.0", "Read the user's mailbox"]),
        ("catalog", "#catalog?q=mailbox".into(), &["Mail.Read@1.0.0"]),
        ("explain", explain_hash, &["Caller: ann", "denied by policy \"mail-team\" (pattern \"Mail.Send\")"]),
        ("calls", "#calls".into(), &["console-call-1", "Calc.Add@1.0.0", "ann", "success"]),
        ("grants", "#grants".into(), &["Revoke"]),
        ("actions", "#actions".into(), &["Read-only: type the admin token above to enable actions."]),
    ];
    for (page, hash, expected) in pages {
        let (dom, log) = render(&browser, &format!("{base}{hash}"));
        if !hash.contains('?') || page == "explain" {
            screenshot(&browser, &format!("{base}{hash}"), page);
        }
        assert!(dom.contains(&format!("data-page=\"{page}\"")), "{hash} did not render:\n{dom}\n{log}");
        for text in expected {
            assert!(dom.contains(text), "{hash}: {text:?} is not on the page:\n{dom}");
        }
        // The CSP blocked the page's inline self-test script...
        assert!(!dom.contains("data-inline-script=\"ran\""), "{hash}: an inline script ran:\n{dom}");
        // ...said so in the page's console, and that is all the page logged.
        let lines = console_lines(&log);
        let blocked = |l: &&str| l.contains("inline script violates") && l.contains("has been blocked");
        assert!(lines.iter().any(blocked), "{hash}: no CSP report of the inline script:\n{log}");
        let others: Vec<&&str> = lines.iter().filter(|l| !blocked(l)).collect();
        assert!(others.is_empty(), "{hash}: the page logged {others:?}");
        if hash == "#catalog?q=mailbox" {
            assert!(!dom.contains("Calc.Add@1.0.0"), "the search narrowed the list:\n{dom}");
        }
        if page == "actions" {
            assert!(dom.contains("id=\"reload\" disabled"), "no token, no action:\n{dom}");
        }
    }
    // An action without the admin token, as the console sends it, is refused.
    let refused = send(gw.admin, "POST", "/reload", Bytes::new(), None).await;
    assert_eq!(refused.status, 401, "{}", refused.text());
    let wrong =
        send_with_headers(gw.admin, "DELETE", "/grants/idp/ann", Bytes::new(), &[("authorization", "Bearer nope")])
            .await;
    assert_eq!(wrong.status, 401, "{}", wrong.text());
}

fn url_escape(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
