//! Micro-benchmarks of the pieces on the per-call hot path, in the order a
//! call meets them: request parsing, id parsing and resolution (in a catalog
//! of 10,000 tools), input validation, the request rewrite (secret
//! injection and the upstream body), the response re-wrap, and the scrub of
//! an answer for echoed secrets.
//! Run with `cargo bench --bench hot_path`; results in benches/README.md.

// criterion_group! defines an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};
use otc_gateway::auth::Caller;
use otc_gateway::call::{inject_context, parse_call, render_result, resolve_tool};
use otc_gateway::catalog::merge::{merge, UpstreamTools};
use otc_gateway::catalog::Catalog;
use otc_gateway::config::{Config, Review};
use otc_gateway::dialect::{normalise_catalog, DialectDefaults};
use otc_gateway::gateway::{Gateway, Generation};
use otc_gateway::integrity::{Integrity, Modes};
use otc_gateway::resolve::parse_tool_id;
use otc_gateway::scrub;
use otc_gateway::validate::InputValidator;
use otc_gateway::wire::{normalise_tool_response, upstream_call_body, CallResult, RawJson, UpstreamCallRequest};
use serde_json::json;

const CONFIG: &str = r#"
[server]
listen = "127.0.0.1:0"
admin_listen = "127.0.0.1:0"

[[upstreams]]
name = "kits"
url = "http://127.0.0.1:9"
secrets = ["BENCH_API_KEY"]

[secrets]
BENCH_API_KEY = "env:BENCH_API_KEY"
"#;

/// 10,000 tools (100 toolkits of 100), each requiring one secret.
fn big_catalog(generation: &Generation) -> Catalog {
    merge(&big_lists(generation), &Default::default(), None)
}

/// The 10,000 tools as one upstream's last fetch.
fn big_lists(generation: &Generation) -> Vec<UpstreamTools> {
    let tools: Vec<_> = (0..100)
        .flat_map(|kit| {
            (0..100).map(move |n| {
                json!({
                    "id": format!("Kit{kit:02}.Tool{n:03}@1.0.0"), "name": format!("Tool{n:03}"),
                    "description": "Adds two numbers.", "version": "1.0.0",
                    "input_schema": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                                     "required": ["a", "b"]},
                    "requirements": {"secrets": [{"id": "BENCH_API_KEY"}]}
                })
            })
        })
        .collect();
    let body = serde_json::to_vec(&json!({ "tools": tools })).expect("serialises");
    let (tools, skipped) = normalise_catalog(&body, DialectDefaults::default()).expect("a catalog");
    assert!(skipped.is_empty());
    let tools = Arc::new(tools.into_iter().map(Arc::new).collect::<Vec<_>>());
    vec![(generation.upstreams[0].clone(), tools)]
}

fn hot_path(c: &mut Criterion) {
    std::env::set_var("BENCH_API_KEY", "bench-secret-value");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let config = Config::parse(CONFIG, "bench config").expect("config parses");
    let gateway = rt.block_on(Gateway::new(config)).expect("gateway builds");
    let generation = gateway.generation_owned();
    let catalog = big_catalog(&generation);

    let body = br#"{"$schema":"otc://1.0","request":{"tool_id":"Kit42.Tool042@1.0.0","call_id":"123e4567-e89b-12d3-a456-426614174000","input":{"a":10,"b":5}}}"#;
    c.bench_function("parse_call", |b| b.iter(|| parse_call(black_box(body))));

    c.bench_function("parse_tool_id", |b| b.iter(|| parse_tool_id(black_box("Kit42.Tool042@1.0.0"))));
    for id in ["Kit42.Tool042@1.0.0", "Kit42.Tool042@1", "Kit42.Tool042"] {
        c.bench_function(&format!("resolve {id} (10,000 tools)"), |b| {
            b.iter(|| resolve_tool(&catalog, black_box(id)).is_ok())
        });
    }

    let schema = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]});
    let validator = InputValidator::compile(&schema).expect("schema compiles");
    let input = json!({"a": 10, "b": 5});
    c.bench_function("validate_input", |b| b.iter(|| validator.check(black_box(&input))));

    // The request rewrite: the secret injected into the context, then the
    // canonical body the upstream receives.
    let route = resolve_tool(&catalog, "Kit42.Tool042@1.0.0").expect("resolves");
    let caller = Caller::Anonymous;
    c.bench_function("rewrite_request (inject secret + upstream body)", |b| {
        b.iter(|| {
            let call = parse_call(body).expect("parses");
            let context = rt
                .block_on(inject_context(&gateway, &generation, route, &caller, call.context, None))
                .expect("injects")
                .context;
            Bytes::from(upstream_call_body(&UpstreamCallRequest {
                tool_id: &route.tool.definition.id,
                call_id: &call.call_id,
                trace_id: None,
                input: &call.input,
                context: &context,
            }))
        })
    });

    let reply = br#"{"$schema":"otc://1.0","result":{"call_id":"123","duration":2,"success":true,"value":15}}"#;
    c.bench_function("rewrap_response", |b| {
        b.iter(|| {
            let r = normalise_tool_response(black_box(reply)).expect("a result");
            render_result(&CallResult {
                call_id: "123".into(),
                duration: r.duration.unwrap_or(0.0),
                success: r.success,
                value: r.value,
                error: r.error,
            })
        })
    });

    // The scrub of a successful answer's value (call.rs, redact_echoes):
    // an answer as tools give them, without escapes; one with a URL (a `%`);
    // one with escaped line breaks. None holds the secret.
    let secrets = ["bench-secret-value", "tok-user-2f9c41d0a7"];
    let plain = r#"{"city":"Lisbon","forecast":[{"day":"Mon","high":24,"low":16,"sky":"sunny"},{"day":"Tue","high":22,"low":15,"sky":"cloudy"},{"day":"Wed","high":21,"low":14,"sky":"rain"}],"source":"met office","units":"metric","updated":"2026-05-01T10:00:00Z"}"#;
    let with_url = plain.replace("met office", "https://example.org/search?q=Lisbon%20weather&lang=en");
    let with_escapes = plain.replace("met office", r"met office\nfirst line\nsecond line");
    for (name, text) in [("plain", plain.to_owned()), ("with a URL", with_url), ("with escapes", with_escapes)] {
        let mut answer: RawJson = serde_json::from_str(&text).expect("an answer");
        c.bench_function(&format!("scrub raw_json ({name}, no copy)"), |b| {
            b.iter(|| scrub::raw_json(black_box(&mut answer), black_box(&secrets)))
        });
    }
}

/// Publishing 10,000 tools after one upstream's catalog changed: merged
/// alone, and held to their pins (compared by digest, each digest computed
/// once per fetched definition). A poll that finds a catalog unchanged
/// publishes nothing, pins or not (`catalog/poll.rs`).
fn catalog_publish(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let config = Config::parse(CONFIG, "bench config").expect("config parses");
    let gateway = rt.block_on(Gateway::new(config)).expect("gateway builds");
    let generation = gateway.generation_owned();
    let lists = big_lists(&generation);
    let before = Catalog::default();
    let modes = Modes { pin: Review::Hold, suspicious: Review::Hold };
    let mut group = c.benchmark_group("publish 10,000 tools");
    group.sample_size(20);
    group.bench_function("merge, no pins", |b| b.iter(|| merge(black_box(&lists), &before, None)));
    let pinned = Integrity::in_memory();
    merge(&lists, &before, Some((&pinned, modes)));
    group.bench_function("merge, held to pins (unchanged)", |b| {
        b.iter(|| merge(black_box(&lists), &before, Some((&pinned, modes))))
    });
    group.bench_function("merge, first sight (pinned and scanned)", |b| {
        b.iter_batched(
            || (Integrity::in_memory(), big_lists(&generation)),
            |(first, lists)| merge(&lists, &before, Some((&first, modes))),
            criterion::BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group!(benches, hot_path, catalog_publish);
criterion_main!(benches);
