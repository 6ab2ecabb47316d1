//! A call_id is an idempotency key: a repeated call gets the first answer
//! and the tool runs once, in one gateway or across replicas sharing Redis.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::fleet::Redis;
use common::{
    add, add_schema, calculator, catalog, html_500, jwt, tool, tool_error, wait_until, wait_within, Gateway, Resp,
    ToolServer,
};
use otc_gateway::auth::Caller;
use otc_gateway::config::{Dur, IdempotencyConfig};
use otc_gateway::idempotency::{CallKey, CallerScope, Decision, Fingerprint, IdempotencyStore, StoredCall};
use otc_gateway::wire::{CallContext, CallResult};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// The store key of an anonymous caller's `call_id`, for the stores' own tests.
fn key(call_id: &str) -> CallKey {
    CallerScope::of(&Caller::Anonymous, &CallContext::default()).key(call_id)
}

async fn slow_calculator(delay: Duration) -> ToolServer {
    let server = calculator().await;
    server.set_call_delay(delay);
    server
}

fn config(upstream: &str, idempotency: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"calc\"\nurl = \"{upstream}\"\n\n[idempotency]\nttl = \"1m\"\n{idempotency}\n"
    )
}

async fn call_with_id(addr: SocketAddr, call_id: Option<&str>, a: i64) -> Resp {
    let mut request = json!({"tool_id": "Calculator.Add@1.0.0", "input": {"a": a, "b": 1}});
    if let Some(id) = call_id {
        request["call_id"] = json!(id);
    }
    let body = Bytes::from(json!({"request": request}).to_string());
    common::send(addr, "POST", "/tools/call", body, Some("application/json")).await
}

#[tokio::test]
async fn a_repeated_call_id_gets_the_first_answer_and_the_tool_runs_once() {
    let server = slow_calculator(Duration::ZERO).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let first = call_with_id(gw.addr, Some("pay-once-1"), 41).await.result();
    let again = call_with_id(gw.addr, Some("pay-once-1"), 41).await.result();
    assert_eq!(first["value"], json!(42));
    assert_eq!(again, first, "the same answer, duration and all");
    assert_eq!(server.call_count(), 1);

    // The same call_id for another input is refused; nothing runs.
    let body = call_with_id(gw.addr, Some("pay-once-1"), 7).await.server_error(400);
    assert!(body["message"].as_str().unwrap().contains("call_id"), "{body}");
    assert_eq!(server.call_count(), 1);

    // Calls without a call_id are never deduplicated.
    call_with_id(gw.addr, None, 1).await.expect_status(200);
    call_with_id(gw.addr, None, 1).await.expect_status(200);
    assert_eq!(server.call_count(), 3);
}

#[tokio::test]
async fn concurrent_duplicates_wait_for_the_first_and_share_its_answer() {
    let server = slow_calculator(Duration::from_millis(400)).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let calls: Vec<_> = (0..5).map(|_| tokio::spawn(call_with_id(gw.addr, Some("burst-1"), 1))).collect();
    let mut results = Vec::new();
    for call in calls {
        results.push(call.await.expect("join").result());
    }
    assert!(results.iter().all(|r| *r == results[0]), "{results:?}");
    assert_eq!(results[0]["value"], json!(2));
    assert_eq!(server.call_count(), 1, "five duplicates, one execution");
}

#[tokio::test]
async fn a_call_refused_before_the_tool_ran_can_be_retried_with_its_call_id() {
    let server = slow_calculator(Duration::ZERO).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let body = Bytes::from(
        json!({"request": {"tool_id": "Calculator.Add@1.0.0", "call_id": "fix-and-retry", "input": {"a": "x"}}})
            .to_string(),
    );
    common::send(gw.addr, "POST", "/tools/call", body, Some("application/json")).await.expect_status(422);
    let retried = call_with_id(gw.addr, Some("fix-and-retry"), 1).await;
    assert_eq!(retried.result()["value"], json!(2), "{}", retried.text());
    assert_eq!(server.call_count(), 1);
}

#[tokio::test]
async fn two_replicas_sharing_redis_run_a_call_once() {
    let redis = Redis::start();
    let server = slow_calculator(Duration::from_millis(300)).await;
    let toml = config(&server.url(), &format!("store = \"redis://{}\"", redis.addr));
    let (one, two) = (Gateway::start(&toml).await, Gateway::start(&toml).await);
    one.wait_for_tool("Calculator.Add@1.0.0").await;
    two.wait_for_tool("Calculator.Add@1.0.0").await;

    // Sequential: the duplicate lands on the other replica.
    let first = call_with_id(one.addr, Some("replica-1"), 10).await.result();
    let second = call_with_id(two.addr, Some("replica-1"), 10).await.result();
    assert_eq!(first, second);
    assert_eq!(server.call_count(), 1);

    // Concurrent, across both replicas.
    let calls: Vec<_> = (0..6)
        .map(|i| tokio::spawn(call_with_id(if i % 2 == 0 { one.addr } else { two.addr }, Some("replica-2"), 5)))
        .collect();
    let mut results: Vec<Value> = Vec::new();
    for call in calls {
        results.push(call.await.expect("join").result());
    }
    assert!(results.iter().all(|r| *r == results[0]), "{results:?}");
    assert_eq!(server.call_count(), 2, "one execution per call_id across replicas");

    // A different input under the same id, on either replica: 400.
    call_with_id(two.addr, Some("replica-1"), 99).await.server_error(400);
}

#[tokio::test]
async fn a_call_the_tool_server_received_is_kept_whatever_came_of_it() {
    let mut server = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    // The first call gets an HTML 500; every later one is answered.
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    server.on_call(move |req| if counter.fetch_add(1, Ordering::SeqCst) == 0 { html_500(req) } else { add(req) });
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    // The tool may have run before its server failed: a retry with the same
    // call_id gets the same failure rather than a second run.
    let failed = call_with_id(gw.addr, Some("flaky-1"), 1).await.result();
    assert_eq!(failed["success"], json!(false), "{failed}");
    assert_eq!(call_with_id(gw.addr, Some("flaky-1"), 1).await.result(), failed);
    assert_eq!(server.call_count(), 1);

    // A call that reached no tool server (unreachable) is not kept: the
    // retry with its call_id runs once the server is back.
    server.stop().await;
    let unreachable = call_with_id(gw.addr, Some("unreachable-1"), 1).await;
    assert_ne!(unreachable.status, 200, "{}", unreachable.text());
    server.restart().await;
    assert_eq!(call_with_id(gw.addr, Some("unreachable-1"), 1).await.result()["value"], json!(2));
    assert_eq!(call_with_id(gw.addr, Some("unreachable-1"), 1).await.result()["value"], json!(2));
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn a_tool_error_is_an_answer_and_is_replayed() {
    let server = ToolServer::start(catalog(vec![tool("Calculator.Add", "1.0.0", add_schema())])).await;
    server.on_call(|req| tool_error(req, json!({"message": "card declined"})));
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let first = call_with_id(gw.addr, Some("declined-1"), 1).await.result();
    assert_eq!(first["success"], json!(false));
    assert_eq!(call_with_id(gw.addr, Some("declined-1"), 1).await.result(), first);
    assert_eq!(server.call_count(), 1);
}

/// The value of a sample in a Prometheus text page, if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
}

async fn idempotency_metric(gw: &Gateway, result: &str) -> f64 {
    let text = common::send(gw.admin, "GET", "/metrics", Bytes::new(), None).await.text();
    sample(&text, &format!("otc_gateway_idempotency_total{{result=\"{result}\"}}")).unwrap_or(0.0)
}

#[tokio::test]
async fn without_redis_calls_run_undeduplicated_until_it_is_back() {
    let server = slow_calculator(Duration::ZERO).await;
    // Nothing listens there yet: the gateway starts anyway (fail open).
    let reserved = common::reserve_addr();
    let redis_addr = reserved.addr;
    let gw = Gateway::start(&config(&server.url(), &format!("store = \"redis://{redis_addr}\""))).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    call_with_id(gw.addr, Some("down-1"), 1).await.expect_status(200);
    call_with_id(gw.addr, Some("down-1"), 1).await.expect_status(200);
    assert_eq!(server.call_count(), 2, "no store, no deduplication, but every call answered");
    assert!(idempotency_metric(&gw, "store_unavailable").await >= 2.0);

    // Redis comes up: deduplication resumes without a restart.
    drop(reserved);
    let redis = Redis::start_on(redis_addr);
    let mut attempt = 0;
    let (first, again) =
        wait_within(Duration::from_secs(15), "deduplication resumed once Redis was back", async || {
            attempt += 1;
            let id = format!("back-{attempt}");
            let before = server.call_count();
            let first = call_with_id(gw.addr, Some(&id), 1).await.result();
            let again = call_with_id(gw.addr, Some(&id), 1).await.result();
            let runs = server.call_count() - before;
            if runs == 1 {
                Ok((first, again))
            } else {
                Err(format!("{id} ran {runs} times"))
            }
        })
        .await;
    assert_eq!(first, again);
    assert!(idempotency_metric(&gw, "replayed").await >= 1.0);

    // Redis goes away mid-run: calls keep being answered.
    drop(redis);
    for _ in 0..3 {
        let answer = call_with_id(gw.addr, Some("gone-1"), 1).await;
        assert_eq!(answer.result()["value"], json!(2));
    }
    let answer = call_with_id(gw.addr, None, 1).await;
    assert_eq!(answer.result()["value"], json!(2));
}

fn stored(value: i64) -> StoredCall {
    StoredCall {
        result: CallResult {
            call_id: "c".into(),
            duration: 1.0,
            success: true,
            value: Some(json!(value).into()),
            error: None,
        },
        upstream: "u".into(),
    }
}

/// Two stores on one Redis, as two replicas would have.
async fn two_stores(redis: &Redis, ttl: Duration) -> (IdempotencyStore, IdempotencyStore) {
    let config =
        IdempotencyConfig { ttl: Dur(ttl), store: Some(format!("redis://{}", redis.addr)), ..Default::default() };
    (IdempotencyStore::build(&config).await.expect("store"), IdempotencyStore::build(&config).await.expect("store"))
}

#[tokio::test]
async fn redis_claims_abandoned_by_a_replica_do_not_block_the_call_id() {
    let redis = Redis::start();
    let (one, two) = two_stores(&redis, Duration::from_secs(60)).await;
    let fp = Fingerprint::of("Calculator.Add@1.0.0", &json!({"a": 1, "b": 1}));

    // A claim dropped on one replica (its client went away) frees the id
    // for the other (the release runs on a spawned task).
    let Ok(Decision::Run(claim)) = one.claim(&key("dropped"), &fp, Duration::from_secs(1)).await else { panic!("run") };
    drop(claim);
    let claim = wait_until("the dropped claim is released", async || {
        match two.claim(&key("dropped"), &fp, Duration::from_millis(50)).await {
            Ok(Decision::Run(claim)) => Ok(claim),
            Ok(Decision::InProgress) => Err("still in progress"),
            other => panic!("{other:?}"),
        }
    })
    .await;
    claim.release().await;

    // A replica that dies mid-call: its claim lasts as long as the call
    // could (the wait), not the whole ttl.
    let Ok(Decision::Run(claim)) = one.claim(&key("crashed"), &fp, Duration::from_millis(400)).await else {
        panic!("run")
    };
    std::mem::forget(claim);
    assert!(matches!(two.claim(&key("crashed"), &fp, Duration::from_millis(50)).await, Ok(Decision::InProgress)));
    // On purpose: the dead replica's 400 ms claim has to lapse.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let Ok(Decision::Run(claim)) = two.claim(&key("crashed"), &fp, Duration::from_secs(1)).await else { panic!("run") };
    claim.complete(&stored(5)).await;
    match one.claim(&key("crashed"), &fp, Duration::from_secs(1)).await {
        Ok(Decision::Replay(call)) => assert_eq!(*call, stored(5)),
        other => panic!("{other:?}"),
    }
    let other_input = Fingerprint::of("Calculator.Add@1.0.0", &json!({"a": 2, "b": 1}));
    assert!(matches!(one.claim(&key("crashed"), &other_input, Duration::from_secs(1)).await, Ok(Decision::Conflict)));

    // The answer is kept for the ttl, under the documented prefix.
    let client = redis::Client::open(format!("redis://{}", redis.addr)).expect("client");
    let mut connection = redis::aio::ConnectionManager::new(client).await.expect("connect");
    let stored_key = format!("otc-gateway:idem:v2:{}", key("crashed").as_str());
    let ttl_ms: i64 = redis::cmd("PTTL").arg(&stored_key).query_async(&mut connection).await.expect("pttl");
    assert!(ttl_ms > 50_000 && ttl_ms <= 60_000, "{ttl_ms}");
    assert_eq!((one.stats().replayed, one.stats().conflict, two.stats().stored), (1, 1, 1));
}

#[tokio::test]
async fn concurrent_claims_across_redis_replicas_elect_one() {
    let redis = Redis::start();
    let (one, two) = two_stores(&redis, Duration::from_secs(60)).await;
    let (one, two) = (Arc::new(one), Arc::new(two));
    let fp = Fingerprint::of("Calculator.Add@1.0.0", &json!({"a": 1, "b": 1}));
    let runs = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..10)
        .map(|i| {
            let store = if i % 2 == 0 { one.clone() } else { two.clone() };
            let (fp, runs) = (fp.clone(), runs.clone());
            tokio::spawn(async move {
                match store.claim(&key("race"), &fp, Duration::from_secs(5)).await.expect("redis answers") {
                    Decision::Run(claim) => {
                        runs.fetch_add(1, Ordering::SeqCst);
                        // On purpose: the call runs a while, so the others
                        // find it running.
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        claim.complete(&stored(42)).await;
                        stored(42)
                    }
                    Decision::Replay(call) => (*call).clone(),
                    other => panic!("{other:?}"),
                }
            })
        })
        .collect();
    for task in tasks {
        assert_eq!(task.await.expect("join"), stored(42));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_client_that_goes_away_mid_call_does_not_make_it_run_twice() {
    let server = slow_calculator(Duration::from_millis(800)).await;
    let gw = Gateway::start(&config(&server.url(), "")).await;
    gw.wait_for_tool("Calculator.Add@1.0.0").await;
    let call = tokio::spawn(call_with_id(gw.addr, Some("gone-client"), 1));
    wait_until("the call reached the tool server", async || server.call_count() == 1).await;
    call.abort();
    // The client retries (before and after the first call would have ended).
    let retry = call_with_id(gw.addr, Some("gone-client"), 1).await.result();
    assert_eq!(retry["value"], json!(2));
    // On purpose: past the end of the first call's 800 ms at the tool server.
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(call_with_id(gw.addr, Some("gone-client"), 1).await.result(), retry);
    assert_eq!(server.call_count(), 1);
}

// ---------------------------------------------------------------------------
// A call_id belongs to its caller
// ---------------------------------------------------------------------------

const JWT_SECRET: &str = "an-hs256-secret-long-enough-for-the-gateway-32";

/// `User.Profile`: a tool that answers with the calling user's private data
/// (the user id and secret it was given), counting its runs.
async fn profile_server() -> ToolServer {
    let mut profile = common::needing("User.Profile", json!({"user_id": true, "secrets": [{"id": "PROFILE_KEY"}]}));
    profile["input_schema"] = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let server = ToolServer::start(catalog(vec![profile])).await;
    server.on_call(|req| {
        let context = &common::forwarded(req)["context"];
        let secret = context["secrets"].as_array().and_then(|s| s.first()).map(|s| s["value"].clone());
        common::success(req, json!({"private_data_of": context["user_id"], "with_secret": secret, "input": common::forwarded(req)["input"]}))
    });
    server
}

/// A gateway in front of `server`, `auth` its [auth] table, `extra` appended.
fn profile_config(server: &ToolServer, auth: &str, extra: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\n\n\
         [catalog]\npoll_interval = \"200ms\"\nrequest_timeout = \"1s\"\n\n\
         [[upstreams]]\nname = \"profiles\"\nurl = \"{}\"\nsecrets = [\"PROFILE_KEY\"]\n\n\
         [secrets]\nPROFILE_KEY = \"env:PROFILE_KEY\"\n\n[auth]\n{auth}\n\n{extra}",
        server.url()
    )
}

const JWT_AUTH: &str =
    "mode = \"jwt\"\nhs256_secret = \"env:GW_JWT_SECRET\"\napi_keys = [{ key = \"env:SVC_KEY\", user_id = \"svc\" }]";
const OPEN_AUTH: &str = "mode = \"none\"\napi_keys = [{ key = \"env:SVC_KEY\", user_id = \"svc\" }]";
const ENV: &[(&str, &str)] =
    &[("GW_JWT_SECRET", JWT_SECRET), ("PROFILE_KEY", "profile-secret-value"), ("SVC_KEY", "svc-api-key-0123456789")];

async fn profile_gateway(server: &ToolServer, auth: &str, extra: &str) -> Gateway {
    let gw = Gateway::start_with_env(&profile_config(server, auth, extra), ENV).await;
    // (Listed for the service key's holder: mode jwt lists nothing to anyone else.)
    gw.wait_listed(&[("oxp-api-key", "svc-api-key-0123456789")], "User.Profile@1.0.0").await;
    gw
}

fn bearer(user: &str) -> String {
    jwt::bearer(&jwt::hs256(&jwt::claims(user, json!({})), JWT_SECRET.as_bytes()))
}

/// A profile call with `call_id`, input `n` and `context`, with these headers.
async fn profile_call(gw: &Gateway, headers: &[(&str, &str)], call_id: &str, n: i64, context: Value) -> common::Resp {
    let body = json!({"request": {"tool_id": "User.Profile@1.0.0", "call_id": call_id, "input": {"n": n}, "context": context}});
    let mut all = vec![("content-type", "application/json")];
    all.extend_from_slice(headers);
    common::send_with_headers(gw.addr, "POST", "/tools/call", Bytes::from(body.to_string()), &all).await
}

async fn as_user(gw: &Gateway, user: &str, call_id: &str, n: i64) -> Value {
    let auth = bearer(user);
    let resp = profile_call(gw, &[("authorization", &auth)], call_id, n, json!({})).await;
    assert_eq!(resp.status, 200, "{user}: {}", resp.text());
    resp.result()
}

#[tokio::test]
async fn another_user_with_my_call_id_gets_their_own_call_never_my_answer() {
    let server = profile_server().await;
    let gw = profile_gateway(&server, JWT_AUTH, "").await;
    let alice = as_user(&gw, "alice", "X-1", 1).await;
    assert_eq!(alice["value"]["private_data_of"], json!("alice"));
    let bob = as_user(&gw, "bob", "X-1", 1).await;
    assert_eq!(bob["value"]["private_data_of"], json!("bob"), "bob must not get alice's answer: {bob}");
    assert_eq!(bob["call_id"], json!("X-1"), "each caller gets back the call_id it sent");
    assert_eq!(server.call_count(), 2, "bob's call ran for bob");
    // Alice's own duplicate is still answered from her first call.
    assert_eq!(as_user(&gw, "alice", "X-1", 1).await, alice);
    assert_eq!(server.call_count(), 2);
    // The upstream never saw one call_id for two callers.
    let ids: Vec<String> = server
        .calls()
        .iter()
        .map(|c| common::forwarded(c)["call_id"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_ne!(ids[0], ids[1], "{ids:?}");
    assert!(ids.iter().all(|id| id.ends_with(".X-1")), "{ids:?}");
}

/// What the gateway injects is not part of what makes a call the same:
/// after the secret it injects is rotated, the caller's retry with the same
/// `call_id` gets the first answer, not "a different call" (which would
/// invite a second run under a new id).
#[tokio::test]
async fn a_retry_after_a_secret_rotation_is_the_same_call() {
    let server = profile_server().await;
    let key = common::temp_file("profile-key", "txt", "profile-key-before-7c1d");
    let config = profile_config(&server, JWT_AUTH, "").replace("env:PROFILE_KEY", &format!("file:{}", key.display()));
    let gw = Gateway::start_with_env(&config, ENV).await;
    gw.wait_listed(&[("oxp-api-key", "svc-api-key-0123456789")], "User.Profile@1.0.0").await;
    let first = as_user(&gw, "alice", "rotated-1", 1).await;
    std::fs::write(&key, "profile-key-after-0e5a").unwrap();
    assert_eq!(as_user(&gw, "alice", "rotated-1", 1).await, first, "the retry is answered from the first run");
    assert_eq!(server.call_count(), 1);
    // The rotation did take: a new call gets the new key.
    as_user(&gw, "alice", "rotated-2", 1).await;
    let calls = server.calls();
    assert_eq!(common::forwarded(&calls[1])["context"]["secrets"][0]["value"], json!("profile-key-after-0e5a"));
}

#[tokio::test]
async fn a_call_id_planted_by_another_user_does_not_answer_mine() {
    let server = profile_server().await;
    let gw = profile_gateway(&server, JWT_AUTH, "").await;
    let planted = as_user(&gw, "bob", "order-7", 7).await;
    assert_eq!(planted["value"]["private_data_of"], json!("bob"));
    let alice = as_user(&gw, "alice", "order-7", 7).await;
    assert_eq!(alice["value"]["private_data_of"], json!("alice"), "alice got bob's planted answer: {alice}");
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn another_users_call_id_cannot_be_probed_or_squatted() {
    let server = profile_server().await;
    let gw = profile_gateway(&server, JWT_AUTH, "").await;
    as_user(&gw, "alice", "probe-1", 1).await;
    // Bob, the same id with another input: his own call, not "already used".
    let bob = as_user(&gw, "bob", "probe-1", 2).await;
    assert_eq!(bob["value"]["input"], json!({"n": 2}));
    // Alice reusing her own id for another input is still refused.
    let auth = bearer("alice");
    let reused = profile_call(&gw, &[("authorization", &auth)], "probe-1", 2, json!({})).await;
    assert!(reused.server_error(400)["message"].as_str().unwrap_or_default().contains("call_id"));
    assert_eq!(server.call_count(), 2);
}

#[tokio::test]
async fn anonymous_callers_are_told_apart_by_what_they_send() {
    let server = profile_server().await;
    let gw = profile_gateway(&server, OPEN_AUTH, "").await;
    let alice = profile_call(&gw, &[], "anon-1", 1, json!({"user_id": "alice"})).await.result();
    assert_eq!(alice["value"]["private_data_of"], json!("alice"));
    let bob = profile_call(&gw, &[], "anon-1", 1, json!({"user_id": "bob"})).await.result();
    assert_eq!(bob["value"]["private_data_of"], json!("bob"), "context.user_id bob replayed alice's answer: {bob}");
    assert_eq!(server.call_count(), 2);
    // The same anonymous caller's duplicate is replayed.
    assert_eq!(profile_call(&gw, &[], "anon-1", 1, json!({"user_id": "alice"})).await.result(), alice);
    assert_eq!(server.call_count(), 2);

    // An API-key caller's answer is theirs: an anonymous caller claiming the
    // same user id, with the same call_id, runs their own call.
    let keyed = profile_call(&gw, &[("oxp-api-key", "svc-api-key-0123456789")], "svc-1", 1, json!({})).await.result();
    assert_eq!(keyed["value"]["private_data_of"], json!("svc"));
    assert_eq!(
        profile_call(&gw, &[("oxp-api-key", "svc-api-key-0123456789")], "svc-1", 1, json!({})).await.result(),
        keyed
    );
    assert_eq!(server.call_count(), 3, "the key holder's duplicate is replayed");
    let spoofed = profile_call(&gw, &[], "svc-1", 1, json!({"user_id": "svc"})).await;
    assert_eq!(spoofed.status, 200, "{}", spoofed.text());
    assert_eq!(server.call_count(), 4, "the anonymous caller's call ran: it got no stored answer");
}

#[tokio::test]
async fn replicas_sharing_redis_keep_each_callers_call_ids_apart() {
    let redis = Redis::start();
    let server = profile_server().await;
    let store = format!("[idempotency]\nttl = \"1m\"\nstore = \"redis://{}\"\n", redis.addr);
    let one = profile_gateway(&server, JWT_AUTH, &store).await;
    let two = profile_gateway(&server, JWT_AUTH, &store).await;
    let alice = as_user(&one, "alice", "fleet-1", 1).await;
    assert_eq!(as_user(&two, "alice", "fleet-1", 1).await, alice, "alice's duplicate, on the other replica");
    assert_eq!(server.call_count(), 1);
    let bob = as_user(&two, "bob", "fleet-1", 1).await;
    assert_eq!(bob["value"]["private_data_of"], json!("bob"));
    assert_eq!(server.call_count(), 2);
    // Another input, bob, on the first replica: his own call again, no 400.
    assert_eq!(as_user(&one, "bob", "fleet-1", 1).await, bob);
    assert_eq!(as_user(&one, "carol", "fleet-1", 5).await["value"]["private_data_of"], json!("carol"));
    assert_eq!(server.call_count(), 3);
    // Redis holds neither the call_id nor who sent it in its key names.
    let client = redis::Client::open(format!("redis://{}", redis.addr)).expect("client");
    let mut connection = redis::aio::ConnectionManager::new(client).await.expect("connect");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(&mut connection).await.expect("keys");
    assert_eq!(keys.len(), 3, "one entry per caller: {keys:?}");
    assert!(
        keys.iter().all(|k| k.starts_with("otc-gateway:idem:v2:") && !k.contains("fleet") && !k.contains("alice")),
        "{keys:?}"
    );
}

/// The fingerprint entries were stored under before call_ids were scoped:
/// the tool id and the input's canonical JSON. Written out here because the
/// gateway no longer computes it (its fingerprint now covers the context).
fn unscoped_fingerprint(tool: &str, input: &Value) -> String {
    use sha2::{Digest, Sha256};
    fn canonical(hasher: &mut Sha256, value: &Value) {
        match value {
            Value::Object(map) => {
                let mut fields: Vec<_> = map.iter().collect();
                fields.sort_unstable_by(|a, b| a.0.cmp(b.0));
                hasher.update(b"{");
                for (key, field) in fields {
                    hasher.update(Value::String(key.clone()).to_string().as_bytes());
                    hasher.update(b":");
                    canonical(hasher, field);
                    hasher.update(b",");
                }
                hasher.update(b"}");
            }
            scalar => hasher.update(scalar.to_string().as_bytes()),
        }
    }
    let mut hasher = Sha256::new();
    hasher.update(tool.as_bytes());
    hasher.update([0]);
    canonical(&mut hasher, input);
    hasher.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test]
async fn answers_stored_before_call_ids_were_scoped_are_never_served() {
    let redis = Redis::start();
    let server = profile_server().await;
    let store = format!("[idempotency]\nttl = \"1m\"\nstore = \"redis://{}\"\n", redis.addr);
    let gw = profile_gateway(&server, OPEN_AUTH, &store).await;
    // An answer written by an older gateway, for anyone with the call_id.
    let planted = StoredCall {
        result: CallResult {
            call_id: "old-1".into(),
            duration: 1.0,
            success: true,
            value: Some(json!("someone else's data").into()),
            error: None,
        },
        upstream: "profiles".into(),
    };
    let value = format!(
        "D {} {}",
        unscoped_fingerprint("User.Profile@1.0.0", &json!({"n": 1})),
        serde_json::to_string(&planted).expect("json")
    );
    let client = redis::Client::open(format!("redis://{}", redis.addr)).expect("client");
    let mut connection = redis::aio::ConnectionManager::new(client).await.expect("connect");
    let () =
        redis::cmd("SET").arg("otc-gateway:idem:old-1").arg(value).query_async(&mut connection).await.expect("set");
    let answer = profile_call(&gw, &[], "old-1", 1, json!({"user_id": "alice"})).await.result();
    assert_eq!(answer["value"]["private_data_of"], json!("alice"), "an unscoped entry was served: {answer}");
    assert_eq!(server.call_count(), 1);
}
