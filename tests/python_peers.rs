//! Real third-party peers from PyPI: langchain-tool-server behind the
//! gateway (bare lists, bare tool names), and the official `oxp` client in
//! front of it. `scripts/test.sh` installs both into virtualenvs.

mod common;

use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{find_tool, free_addr, GatewayConfig};
use serde_json::{json, Value};

/// A Python interpreter from a virtualenv the test script made.
fn python(env_var: &str, venv: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(venv).join("bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh, which installs the Python peers",
        path.display()
    );
    path
}

fn peer_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/peers").join(name)
}

/// A Python server process, killed on drop.
struct PythonServer {
    child: Child,
    addr: SocketAddr,
}

impl PythonServer {
    fn start(python: PathBuf, script: &str) -> PythonServer {
        let addr = free_addr();
        let child = Command::new(python)
            .arg(peer_script(script))
            .arg(addr.port().to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the python peer");
        let mut server = PythonServer { child, addr };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(server.child.try_wait().expect("wait").is_none(), "{script} exited before listening");
            assert!(Instant::now() < deadline, "{script} did not listen within 30 s");
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn langchain_tool_server_behind_the_gateway_and_the_oxp_client_in_front() {
    let langchain = PythonServer::start(python("OTC_TEST_LANGCHAIN_PYTHON", ".venv-langchain"), "langchain_server.py");
    let gw = GatewayConfig::new()
        .upstream_with("lc", &format!("http://{}", langchain.addr), "toolkit = \"Math\"\nversion = \"1.0.0\"")
        .start()
        .await;

    // Bare names in a bare list become canonical ids with flat schemas.
    let add = gw.wait_for_tool("Math.add@1.0.0").await;
    assert_eq!(add["input_schema"]["properties"]["a"]["type"], "integer");
    assert!(add["input_schema"].get("parameters").is_none());
    assert!(find_tool(&gw.tools().await, "Math.explode@1.0.0").is_some());

    // A call goes upstream under the original id and comes back canonical.
    let resp = gw.call("Math.add@1.0.0", json!({"a": 2, "b": 40})).await;
    let result = resp.result();
    assert_eq!(result["success"], json!(true), "{result}");
    assert_eq!(result["value"], json!(42));
    assert!(result["call_id"].is_string() && result["duration"].is_number(), "{result}");
    assert_eq!(resp.json()["$schema"], "otc://1.0");

    // Bad input never reaches it; a raising tool is a tool failure.
    let errors = gw.call("Math.add@1", json!({"a": "two", "b": 40})).await.parameter_errors();
    assert!(errors.contains_key("a"), "{errors:?}");
    let failed = gw.call("Math.explode", json!({"reason": "boom"})).await.result();
    assert_eq!(failed["success"], json!(false), "{failed}");
    assert!(failed["error"]["message"].is_string());

    // The official client of the 1.0 openapi, against the gateway.
    let output = Command::new(python("OTC_TEST_PYTHON", ".venv"))
        .arg(peer_script("oxp_client.py"))
        .arg(gw.url())
        .output()
        .expect("run the oxp client");
    assert!(output.status.success(), "oxp client failed: {}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).expect("the client prints JSON");
    assert_eq!(seen["ids"], json!(["Math.add@1.0.0", "Math.explode@1.0.0"]), "{seen}");
    // The client's model reads numbers as floats.
    assert_eq!(seen["call"]["result"]["value"].as_f64(), Some(42.0), "{seen}");
    assert_eq!(seen["call"]["result"]["success"], json!(true), "{seen}");
    assert_eq!(seen["unknown"], json!(400), "{seen}");
    assert_eq!(seen["invalid"], json!(422), "{seen}");
}
