//! GitHub's REST API description (npm `@octokit/openapi`, about 1,200
//! operations, OpenAPI 3.0, 13 MB of JSON) as an OpenAPI upstream: it
//! imports, every listed input schema compiles as JSON Schema and points
//! nowhere into `#/components`, and tool search finds its operations.
//! Timings and memory are measured by benches/load/openapi.py, not here.
//!
//! The description comes from `scripts/lib.sh`'s `need_octokit_openapi`
//! (into `.octokit-openapi/`, gitignored), which scripts/test.sh runs.

mod common;

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use common::{send_with_headers, wait_within, Gateway};
use serde_json::Value;

fn github_description() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(".octokit-openapi/node_modules/@octokit/openapi/generated/api.github.com.json");
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh (or `bash -c 'source scripts/lib.sh; need_octokit_openapi'`)",
        path.display()
    );
    path
}

/// The ids `GET /tools/search?q=…` returns.
async fn search(gw: &Gateway, query: &str) -> Vec<String> {
    let resp = send_with_headers(gw.addr, "GET", &format!("/tools/search?q={query}"), Bytes::new(), &[]).await;
    resp.expect_status(200);
    common::ids(resp.json()["items"].as_array().expect("items"))
}

#[tokio::test]
async fn githubs_description_imports_with_valid_schemas_and_is_searchable() {
    let spec = github_description();
    let operations = {
        let document: Value = serde_json::from_slice(&std::fs::read(&spec).expect("read")).expect("json");
        let methods = ["get", "put", "post", "delete", "options", "head", "patch", "trace"];
        document["paths"]
            .as_object()
            .expect("paths")
            .values()
            .map(|item| methods.iter().filter(|m| item.get(**m).is_some()).count())
            .sum::<usize>()
    };
    assert!(operations > 1000, "GitHub describes {operations} operations");
    let toml = format!(
        r#"[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[catalog]
poll_interval = "60s"
request_timeout = "30s"

[[upstreams]]
name = "github"
protocol = "openapi"
url = "https://api.github.com"
spec = "file:{}"
toolkit = "GitHub"
"#,
        spec.display()
    );
    let gw = Gateway::start(&toml).await;
    // Generous: a debug build on a shared machine; the benchmark times it.
    let tools = wait_within(Duration::from_secs(120), "the document's tools are listed", async || {
        let tools = gw.tools().await;
        if tools.is_empty() {
            Err(format!("no tools; log:\n{}", gw.logs()))
        } else {
            Ok(tools)
        }
    })
    .await;
    let status = send_with_headers(gw.admin, "GET", "/status", Bytes::new(), &[]).await.json();
    let upstreams = status["upstreams"].as_array().cloned().unwrap_or_default();
    let github = upstreams.iter().find(|u| u["name"] == "github").expect("github in /status");
    let skipped = github["skipped"].as_array().cloned().unwrap_or_default();
    // Nearly every operation is a tool; each one that is not says why.
    assert_eq!(tools.len() + skipped.len(), operations, "every operation is a tool or a reason: {skipped:?}");
    assert!(tools.len() * 100 >= operations * 98, "{} tools of {operations}; skipped: {skipped:?}", tools.len());
    for tool in &tools {
        let id = tool["id"].as_str().expect("id");
        assert!(id.starts_with("GitHub.") && id.ends_with("@23.0.2"), "{id}");
        let schema = &tool["input_schema"];
        assert!(!schema.to_string().contains("#/components"), "{id} points into #/components");
        assert!(!tool["output_schema"].to_string().contains("#/components"), "{id}'s output schema");
        jsonschema::validator_for(schema).unwrap_or_else(|e| panic!("{id}: input_schema does not compile: {e}"));
    }
    let create = common::find_tool(&tools, "GitHub.IssuesCreate@23.0.2").expect("issues/create is a tool");
    let properties = create["input_schema"]["properties"].as_object().expect("properties");
    for name in ["owner", "repo", "title", "body", "labels", "assignees"] {
        assert!(properties.contains_key(name), "issues/create takes {name}: {:?}", properties.keys());
    }
    assert_eq!(create["input_schema"]["required"], serde_json::json!(["owner", "repo", "title"]));

    // Tool search finds operations by what people ask (among the first
    // five; benches/README.md has the ranks over every summary).
    for (query, wanted) in [
        ("create+an+issue", "GitHub.IssuesCreate@23.0.2"),
        ("merge+a+pull+request", "GitHub.PullsMerge@23.0.2"),
        ("star+a+repository", "GitHub.ActivityStarRepoForAuthenticatedUser@23.0.2"),
    ] {
        let found = search(&gw, query).await;
        assert!(found.iter().take(5).any(|id| id == wanted), "{query}: {found:?}");
    }
}
