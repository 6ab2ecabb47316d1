//! Micro-benchmarks of the pieces on the per-call hot path: id parsing and
//! resolution, input validation, request parsing, and the response re-wrap.
//! Run with `cargo bench --bench hot_path`.

use criterion::{criterion_group, criterion_main, Criterion};
use otc_gateway::call::{parse_call, render_result};
use otc_gateway::resolve::parse_tool_id;
use otc_gateway::validate::InputValidator;
use otc_gateway::wire::{normalise_tool_response, CallResult};
use serde_json::json;
use std::hint::black_box;

fn hot_path(c: &mut Criterion) {
    c.bench_function("parse_tool_id", |b| b.iter(|| parse_tool_id(black_box("Calculator.Add@1.0.0"))));

    let schema = json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                        "required": ["a", "b"]});
    let validator = InputValidator::compile(&schema).expect("schema compiles");
    let input = json!({"a": 10, "b": 5});
    c.bench_function("validate_input", |b| b.iter(|| validator.check(black_box(&input))));

    let body = br#"{"$schema":"otc://1.0","request":{"tool_id":"Calculator.Add@1.0.0","call_id":"123e4567-e89b-12d3-a456-426614174000","input":{"a":10,"b":5}}}"#;
    c.bench_function("parse_call", |b| b.iter(|| parse_call(black_box(body))));

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
}

criterion_group!(benches, hot_path);
criterion_main!(benches);
