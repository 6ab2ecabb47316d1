//! An OTLP/HTTP trace receiver on loopback (tests/peers/otlp_receiver.py, on
//! the official `opentelemetry-proto` definitions from PyPI): what the
//! gateway exported, as JSON. Needs the test Python (`OTC_TEST_PYTHON`, else
//! `.venv/bin/python`).

use super::*;

/// tests/peers/otlp_receiver.py on a loopback port, killed on drop.
pub struct Receiver {
    child: Child,
    addr: SocketAddr,
}

impl Receiver {
    /// `mode`: "ok", "fail" (503) or "hang" (never answers).
    pub fn start(mode: &str) -> Receiver {
        let addr = free_addr();
        let mut child = Command::new(sdk_python())
            .arg(peer_script("otlp_receiver.py"))
            .arg(addr.port().to_string())
            .arg(mode)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start otlp_receiver.py");
        let what = "otlp_receiver.py (is opentelemetry-proto installed?)";
        wait_listening(&mut child, addr, what, Duration::from_secs(30), String::new);
        Receiver { child, addr }
    }

    /// The base URL, for `[tracing] otlp_endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub async fn spans(&self) -> Vec<Value> {
        let resp = send(self.addr, "GET", "/spans", Bytes::new(), None).await;
        resp.expect_status(200);
        resp.json().as_array().cloned().unwrap_or_default()
    }

    /// The spans of `trace`, once `pred` holds for them.
    pub async fn wait_for(&self, trace: &str, what: &str, pred: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        wait_within(Duration::from_secs(20), what, async || {
            let spans: Vec<Value> = self.spans().await.into_iter().filter(|s| s["trace_id"] == trace).collect();
            if pred(&spans) {
                Ok(spans)
            } else {
                Err(format!("trace {trace} has {spans:#?}"))
            }
        })
        .await
    }

    /// The spans, of any trace, for which `pred` holds, once there is one.
    pub async fn wait_for_any(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        wait_within(Duration::from_secs(20), what, async || {
            let spans: Vec<Value> = self.spans().await.into_iter().filter(&pred).collect();
            if spans.is_empty() {
                Err("none yet".to_owned())
            } else {
                Ok(spans)
            }
        })
        .await
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
