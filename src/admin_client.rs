//! The command line's client of a running gateway's admin listener:
//! `otc-gateway explain` and `otc-gateway changes` ask it over plain HTTP
//! (the admin listener's own), with the admin token when there is one.

use std::path::Path;
use std::time::Duration;

use http_body_util::BodyExt;

use crate::config::{Config, SecretRef};
use crate::secret::SecretString;
use crate::vault::SecretResolver;

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// A running gateway's admin listener, and the token to present.
pub struct AdminClient {
    addr: String,
    token: Option<SecretString>,
}

impl AdminClient {
    /// `admin` (`host:port`) or else `[server] admin_listen` of the config
    /// at `config_path`; the token from `admin_token` (a secret reference,
    /// never the value: the process list would show it), or else the
    /// config's own `admin_token`, but only when the address is the
    /// config's too (a config's token never goes to an address typed on
    /// the command line).
    pub async fn new(
        admin: Option<String>,
        admin_token: Option<&str>,
        config_path: &Path,
    ) -> Result<AdminClient, String> {
        let (addr, config) = match admin {
            Some(admin) => (admin, None),
            None => match Config::load(config_path) {
                Ok(config) => (config.server.admin_listen.clone(), Some(config)),
                Err(e) => return Err(format!("{e} (or give --admin host:port)")),
            },
        };
        let addr = addr.trim_start_matches("http://").trim_end_matches('/').to_owned();
        let reference = match admin_token.map(SecretRef::parse) {
            Some(Ok(reference)) => Some(reference),
            Some(Err(e)) => return Err(format!("--admin-token: {e} (give a reference such as env:OTC_ADMIN_TOKEN)")),
            None => config.as_ref().and_then(|c| c.server.admin_token.as_ref()).map(|t| t.get_ref().clone()),
        };
        let token = match reference {
            None => None,
            Some(reference) => {
                let vault = config.and_then(|c| c.vault);
                let secrets = SecretResolver::new(vault, TIMEOUT).map_err(|e| e.to_string())?;
                let token = secrets.resolve(&reference, None).await;
                Some(token.map_err(|e| format!("the admin token ({reference}): {e}"))?)
            }
        };
        Ok(AdminClient { addr, token })
    }

    /// One request; the body of a 2xx answer, else why not.
    pub async fn request(&self, method: http::Method, path: &str, json: Option<Vec<u8>>) -> Result<String, String> {
        let admin = self.addr.as_str();
        let exchange = async {
            let stream =
                tokio::net::TcpStream::connect(admin).await.map_err(|e| format!("connecting to {admin}: {e}"))?;
            let (mut sender, connection) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
                .await
                .map_err(|e| format!("{admin}: {e}"))?;
            tokio::spawn(connection);
            let mut request = http::Request::builder().method(method).uri(path).header(http::header::HOST, admin);
            if json.is_some() {
                request = request.header(http::header::CONTENT_TYPE, "application/json");
            }
            if let Some(token) = &self.token {
                let mut value = http::HeaderValue::try_from(format!("Bearer {}", token.expose()))
                    .map_err(|_| "the admin token is not a valid header value".to_owned())?;
                value.set_sensitive(true);
                request = request.header(http::header::AUTHORIZATION, value);
            }
            let body = http_body_util::Full::new(bytes::Bytes::from(json.unwrap_or_default()));
            let request = request.body(body).map_err(|e| e.to_string())?;
            let response = sender.send_request(request).await.map_err(|e| format!("{admin}: {e}"))?;
            let status = response.status();
            let body = response.into_body().collect().await.map_err(|e| format!("{admin}: {e}"))?.to_bytes();
            let text = String::from_utf8_lossy(&body).into_owned();
            match status {
                s if s.is_success() => Ok(text),
                http::StatusCode::UNAUTHORIZED if self.token.is_none() => Err(format!(
                    "{admin} answered {status}: {text} (give --admin-token env:NAME, or --config with the gateway's \
                     admin_token and no --admin)"
                )),
                _ => Err(format!("{admin} answered {status}: {text}")),
            }
        };
        tokio::time::timeout(TIMEOUT, exchange).await.map_err(|_| format!("{admin} did not answer within 10 s"))?
    }
}
