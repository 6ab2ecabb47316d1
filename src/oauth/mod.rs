//! Per-user OAuth: the gateway as the OAuth client of each managed
//! `[authorization.<provider>]`. It hands out challenges (a link and a
//! `check_url`), runs the authorization code flow with PKCE when the link's
//! user opens it, stores the grant only once the browser that finished the
//! flow is proven to be that user's (`flow.rs`), refreshes it before it
//! expires (one refresh per user and provider at a time, across replicas
//! when the grant lives in Vault) and forgets and revokes it on disconnect.
//!
//! - `provider.rs`: endpoints, the authorization request, the token endpoint.
//! - `flow.rs`: opening a link, the callback.
//! - `verifier.rs`: with a verifier, the application's confirmation and the
//!   browser's way back.
//! - `login.rs`: `[login]`, browsers signing in to the gateway, sessions.
//! - `challenges.rs`: where links and flows in progress are kept: memory
//!   (`links.rs`) or, shared by a fleet, Redis (`links_redis.rs`).
//! - `store.rs`: the grants, embedded (sealed, `seal.rs`) or in Vault.

mod challenges;
mod flow;
mod links;
mod links_redis;
mod login;
mod provider;
mod seal;
mod store;
mod verifier;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

pub use flow::{Finished, Opened};
pub use links::LinkStatus;
pub use login::{SignInStart, SignedIn};
pub use provider::Account;

use self::challenges::Challenges;
use self::links::Links;
use self::links_redis::RedisLinks;
use self::login::Login;
use self::provider::{Provider, Refreshed};
use self::seal::Sealer;
use self::store::{now, EmbeddedStore, Grant, GrantStore};
use crate::config::{Config, StateConfig, UserVerification};
use crate::metrics::Metrics;
use crate::otel::{self, Kind, Span};
use crate::redis_client::SharedRedis;
use crate::secret::SecretString;
use crate::vault::SecretResolver;

/// How long a replica may hold a Vault grant's refresh before another
/// replica takes over.
const REFRESH_LEASE: Duration = Duration::from_secs(15);
/// How often a replica waiting on another's refresh reads the grant again.
const LEASE_POLL: Duration = Duration::from_millis(100);

/// What went wrong in the OAuth machinery (never with a token in it).
#[derive(Debug, Clone, thiserror::Error)]
pub enum OAuthError {
    /// The store or its key could not be set up.
    #[error("OAuth setup: {0}")]
    Setup(String),
    /// The grant store could not be read or written.
    #[error("grant store: {0}")]
    Store(String),
    /// The provider could not be reached or answered with an error.
    #[error("provider: {0}")]
    Provider(String),
}

/// Why a step of the flow (opening a link, a callback, a confirmation)
/// ended without a grant: each is a page for the person at the browser, or
/// the application's error.
#[derive(Debug, Clone, thiserror::Error)]
pub enum FlowError {
    /// No managed provider by that name.
    #[error("no OAuth provider {0:?} is configured")]
    UnknownProvider(String),
    /// A link, `state` or flow id never issued, forged, expired, or for
    /// another provider.
    #[error("this authorization link is not valid")]
    UnknownLink,
    /// A link past its lifetime.
    #[error("this authorization link has expired")]
    Expired,
    /// A link whose flow completed already.
    #[error("this authorization link was already used")]
    Used,
    /// The browser (or the confirming caller) is signed in as another user
    /// than the one the link was made for: nothing is stored.
    #[error("this link belongs to another user")]
    WrongUser,
    /// A callback of a `login`-verified flow in a browser not signed in.
    #[error("this browser is not signed in to the gateway")]
    SignInRequired,
    /// A sign-in's callback in another browser than the one that started it.
    #[error("this sign-in was started in another browser")]
    OtherBrowser,
    /// A verifier flow's callback, or its `return_to`, in another browser
    /// than the one that opened the link: nothing changes.
    #[error("this connection was started in another browser")]
    NotThisBrowser,
    /// `[login]` is not configured.
    #[error("signing in to the gateway is not configured ([login])")]
    NoLogin,
    /// The provider sent the browser back with an error (`error=`).
    #[error("the provider refused the authorization: {0}")]
    Refused(String),
    /// The callback had neither `code` nor `error`, or no `state`.
    #[error("the callback is missing {0}")]
    BadCallback(&'static str),
    /// The provider or the store failed.
    #[error(transparent)]
    Failed(#[from] OAuthError),
}

/// Why a call could not get a token.
#[derive(Debug)]
pub enum TokenError {
    /// The caller must authorize (first time, more scopes, or the grant was
    /// revoked): ask for these scopes.
    Authorize(BTreeSet<String>),
    /// The store or the provider failed right now.
    Unavailable(OAuthError),
}

/// A challenge's two links.
#[derive(Debug, Clone)]
pub struct Challenge {
    /// Opened by the user's browser: starts the flow (single-use).
    pub url: String,
    /// Polled by the client: `{"status": ...}`.
    pub check_url: String,
}

/// Held while one user's grant at one provider is refreshed.
type RefreshLock = tokio::sync::Mutex<()>;

/// State that outlives a reload: links, flows, the state key, the embedded
/// store and the refresh locks.
#[derive(Debug, Default)]
struct Shared {
    links: Links,
    sealer: Mutex<Option<(StateConfig, Arc<Sealer>)>>,
    embedded: Mutex<Option<(StateConfig, Arc<EmbeddedStore>)>>,
    refreshing: Mutex<HashMap<(String, String), Weak<RefreshLock>>>,
}

/// One managed provider: its client, its grants, and who may finish its flows.
#[derive(Debug)]
struct Managed {
    provider: Provider,
    store: GrantStore,
    verification: UserVerification,
}

/// Every managed provider, with their stores, and `[login]`.
#[derive(Debug)]
pub struct OAuth {
    providers: HashMap<String, Managed>,
    secrets: Arc<SecretResolver>,
    shared: Arc<Shared>,
    /// With `[state] redis`: the challenges live there instead of `shared.links`.
    redis_links: Option<Arc<RedisLinks>>,
    /// `[login]`: browsers signing in to the gateway.
    login: Option<Arc<Login>>,
}

impl OAuth {
    /// The managed providers of `config`. Links, flows, refresh locks and
    /// the embedded store (when `[state]` is unchanged) carry over from the
    /// generation before a reload.
    ///
    /// With `redis` (`[state] redis`), challenges are kept there, so any
    /// replica can open a link or take its callback.
    pub(crate) async fn build(
        config: &Config,
        secrets: Arc<SecretResolver>,
        previous: Option<&OAuth>,
        redis: Option<&Arc<SharedRedis>>,
    ) -> Result<OAuth, OAuthError> {
        let shared = previous.map(|p| p.shared.clone()).unwrap_or_default();
        let any_managed = config.authorization.values().any(|s| s.is_managed()) || config.login.is_some();
        let redis_links = match redis.filter(|_| any_managed) {
            None => None,
            Some(redis) => match previous.and_then(|p| p.redis_links.as_ref()).filter(|l| l.is_in(redis)) {
                Some(kept) => Some(kept.clone()),
                None => Some(Arc::new(RedisLinks::new(redis.clone()))),
            },
        };
        let mut providers = HashMap::new();
        for (id, section) in config.authorization.iter().filter(|(_, s)| s.is_managed()) {
            let store = match &section.store {
                Some(at) => GrantStore::Vault { secrets: secrets.clone(), at: at.get_ref().clone() },
                None => GrantStore::Embedded(embedded_store(&shared, &config.state, &secrets).await?),
            };
            // `Config::validate` refused a managed provider without one.
            let verification = config.user_verification(id).unwrap_or(UserVerification::Login);
            providers.insert(id.clone(), Managed { provider: Provider::new(id, section)?, store, verification });
        }
        let login = match &config.login {
            None => None,
            Some(section) => match previous.and_then(|p| p.login.as_ref()).filter(|l| l.is_for(section.get_ref())) {
                Some(kept) => Some(kept.clone()),
                None => {
                    let sealer = state_sealer(&shared, &config.state, &secrets).await?;
                    Some(Arc::new(Login::new(config, section.get_ref(), sealer)?))
                }
            },
        };
        Ok(OAuth { providers, secrets, shared, redis_links, login })
    }

    /// Where challenges in progress are kept.
    fn challenges(&self) -> Challenges<'_> {
        match &self.redis_links {
            Some(redis) => Challenges::Redis(redis),
            None => Challenges::Memory(&self.shared.links),
        }
    }

    /// Starts signing a browser in, to come back to `return_to` (a path
    /// under `/oauth/`).
    pub async fn sign_in(&self, return_to: &str, public_url: &str) -> Result<SignInStart, FlowError> {
        let login = self.login.as_ref().ok_or(FlowError::NoLogin)?;
        login.start(&self.challenges(), &self.secrets, return_to, public_url).await
    }

    /// The sign-in's callback, in the browser holding `binding`; `refused`
    /// says which user ids no browser may be (API keys').
    pub async fn signed_in(
        &self,
        state: Option<&str>,
        code: Option<&str>,
        error: Option<&str>,
        binding: Option<&str>,
        refused: impl Fn(&str) -> bool,
    ) -> Result<SignedIn, FlowError> {
        let login = self.login.as_ref().ok_or(FlowError::NoLogin)?;
        login.finish(&self.challenges(), &self.secrets, state, code, error, binding, refused).await
    }

    /// The user a session cookie's value stands for, while it lasts.
    pub fn session_user(&self, cookie: &str) -> Option<String> {
        self.login.as_ref()?.session_user(cookie)
    }

    /// The providers the gateway runs the flow for, by name.
    pub fn managed(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.providers.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }

    /// Whether the gateway runs the flow for `provider`.
    pub fn manages(&self, provider: &str) -> bool {
        self.providers.contains_key(provider)
    }

    fn provider(&self, id: &str) -> Result<&Managed, FlowError> {
        self.providers.get(id).ok_or_else(|| FlowError::UnknownProvider(id.to_owned()))
    }

    /// The caller's access token for `provider` covering `required` (and
    /// the configured scopes), refreshed first when it expires within the
    /// provider's margin. A refresh at the provider is a client span under
    /// `span` (the call's `inject` step), when that is recorded.
    pub async fn token(
        &self,
        provider: &str,
        user: &str,
        required: &BTreeSet<String>,
        metrics: &Metrics,
        span: Option<&Span>,
    ) -> Result<SecretString, TokenError> {
        let Some(Managed { provider: p, store, .. }) = self.providers.get(provider) else {
            return Err(TokenError::Unavailable(OAuthError::Setup(format!("{provider} is not managed"))));
        };
        let mut wanted: BTreeSet<String> = p.configured_scopes().cloned().collect();
        wanted.extend(required.iter().cloned());
        let grant = store.get(provider, user).await.map_err(TokenError::Unavailable)?;
        match judge(p, grant.as_ref(), &wanted) {
            Judgement::Authorize => Err(TokenError::Authorize(wanted)),
            Judgement::MoreScopes => {
                // Incremental: ask for what it has and what is missing, so the
                // new grant replaces the old one without losing scopes.
                wanted.extend(grant.iter().flat_map(|g| g.scopes.iter().cloned()));
                Err(TokenError::Authorize(wanted))
            }
            Judgement::Use => grant.map(|g| g.access_token).ok_or(TokenError::Authorize(wanted)),
            Judgement::Refresh => self.refreshed(p, store, user, metrics, span).await.map_err(|e| match e {
                TokenError::Authorize(_) => TokenError::Authorize(wanted),
                other => other,
            }),
        }
    }

    /// What `token` would find for `user` at `provider` covering `required`,
    /// reading the grant but neither refreshing it nor issuing a challenge
    /// (`GET /explain`). Never the token itself.
    pub async fn standing(
        &self,
        provider: &str,
        user: &str,
        required: &BTreeSet<String>,
    ) -> Result<GrantStanding, OAuthError> {
        let Managed { provider: p, store, .. } =
            self.providers.get(provider).ok_or_else(|| OAuthError::Setup(format!("{provider} is not managed")))?;
        let mut wanted: BTreeSet<String> = p.configured_scopes().cloned().collect();
        wanted.extend(required.iter().cloned());
        let grant = store.get(provider, user).await?;
        let (met, why) = match judge(p, grant.as_ref(), &wanted) {
            Judgement::Authorize if grant.is_none() => (false, "not connected: the user must authorize".to_owned()),
            Judgement::Authorize => (false, "expired, without a refresh token: the user must authorize again".into()),
            Judgement::MoreScopes => {
                let lacking: Vec<&str> = wanted
                    .iter()
                    .filter(|s| grant.as_ref().is_some_and(|g| !g.scopes.contains(*s)))
                    .map(|s| s.as_str())
                    .collect();
                (false, format!("connected without the scopes {}: the user must authorize again", lacking.join(" ")))
            }
            Judgement::Use => (true, "connected, with the scopes needed".to_owned()),
            Judgement::Refresh => (true, "connected; the token is refreshed on the next call".to_owned()),
        };
        Ok(GrantStanding { held: grant.as_ref().map(GrantFacts::of), met, why })
    }

    /// Every grant held at each managed provider (or only at `provider`),
    /// without a token: who, which scopes, and when (`GET /grants` on the
    /// admin listener). A provider whose store fails is reported as such.
    pub async fn grants(&self, provider: Option<&str>) -> Result<Vec<ProviderGrants>, FlowError> {
        if let Some(p) = provider {
            self.provider(p)?;
        }
        let mut out = Vec::new();
        for id in self.managed().into_iter().filter(|id| provider.is_none_or(|p| p == *id)) {
            let listed = match self.providers.get(id) {
                Some(managed) => managed.store.list(id).await,
                None => continue,
            };
            let (grants, error) = match listed {
                Ok(mut grants) => {
                    grants.sort_by(|a, b| a.0.cmp(&b.0));
                    let summary =
                        |(user_id, grant): (String, Grant)| GrantSummary { user_id, grant: GrantFacts::of(&grant) };
                    (grants.into_iter().map(summary).collect(), None)
                }
                Err(e) => (Vec::new(), Some(e.to_string())),
            };
            out.push(ProviderGrants { provider: id.to_owned(), grants, error });
        }
        Ok(out)
    }

    /// The grant after one refresh, however many calls ask at once: in this
    /// process a lock per user and provider; with a store replicas share, a
    /// lease written with check-and-set.
    async fn refreshed(
        &self,
        p: &Provider,
        store: &GrantStore,
        user: &str,
        metrics: &Metrics,
        span: Option<&Span>,
    ) -> Result<SecretString, TokenError> {
        let lock = self.refresh_lock(&p.id, user);
        let _held = lock.lock().await;
        let margin = p.config.refresh_margin.as_secs();
        let unavailable = TokenError::Unavailable;
        let deadline = tokio::time::Instant::now() + REFRESH_LEASE;
        loop {
            // Check-and-set races and another replica's lease are waited out
            // for one lease's length at most.
            if tokio::time::Instant::now() >= deadline {
                return Err(unavailable(OAuthError::Provider("the grant's refresh did not settle in time".into())));
            }
            let Some(current) = store.get_versioned(&p.id, user).await.map_err(unavailable)? else {
                return Err(TokenError::Authorize(BTreeSet::new()));
            };
            if !current.grant.expiring(margin) {
                return Ok(current.grant.access_token);
            }
            let mut version = current.version;
            if store.is_shared() {
                // Another replica holds the lease: wait for its result.
                if current.grant.refreshing_until.is_some_and(|until| until > now()) {
                    tokio::time::sleep(LEASE_POLL).await;
                    continue;
                }
                let mut leased = current.grant.clone();
                leased.refreshing_until = Some(now() + REFRESH_LEASE.as_secs());
                if !store.put(&p.id, user, &leased, Some(version)).await.map_err(unavailable)? {
                    continue;
                }
                version += 1;
            }
            let mut client = otel::child(span, "oauth refresh", Kind::Client);
            let refreshed = p.refresh(&self.secrets, &current.grant, client.as_mut()).await;
            if let Some(client) = &mut client {
                describe_refresh(client, &p.id, &refreshed);
            }
            drop(client);
            return match refreshed {
                Ok(Refreshed::Grant(mut fresh)) => {
                    metrics.record_oauth_refresh(&p.id, "ok");
                    fresh.connected_at = current.grant.connected_at;
                    fresh.refreshed_at = Some(now());
                    let cas = store.is_shared().then_some(version);
                    if !store.put(&p.id, user, &fresh, cas).await.map_err(unavailable)? {
                        tracing::warn!(provider = p.id, "a refreshed grant lost a check-and-set race; using it anyway");
                    }
                    Ok(fresh.access_token)
                }
                Ok(Refreshed::Revoked) => {
                    metrics.record_oauth_refresh(&p.id, "invalid_grant");
                    tracing::info!(
                        provider = p.id,
                        "the provider refused the refresh token; the user must authorize again"
                    );
                    store.delete(&p.id, user).await.map_err(unavailable)?;
                    Err(TokenError::Authorize(BTreeSet::new()))
                }
                Err(e) => {
                    metrics.record_oauth_refresh(&p.id, "error");
                    if store.is_shared() {
                        // Give the lease back so another try need not wait.
                        let _ = store.put(&p.id, user, &current.grant, Some(version)).await;
                    }
                    Err(unavailable(e))
                }
            };
        }
    }

    /// The lock that makes refreshes of one user's grant single-flight here.
    fn refresh_lock(&self, provider: &str, user: &str) -> Arc<RefreshLock> {
        let mut locks = self.shared.refreshing.lock().unwrap_or_else(|p| p.into_inner());
        let key = (provider.to_owned(), user.to_owned());
        if let Some(lock) = locks.get(&key).and_then(Weak::upgrade) {
            return lock;
        }
        locks.retain(|_, weak| weak.strong_count() > 0);
        let lock = Arc::new(RefreshLock::new(()));
        locks.insert(key, Arc::downgrade(&lock));
        lock
    }

    /// A new challenge for `user` at `provider` asking `scopes`, its links
    /// under `public_url`.
    pub async fn challenge(
        &self,
        provider: &str,
        user: &str,
        scopes: BTreeSet<String>,
        public_url: &str,
        metrics: &Metrics,
    ) -> Result<Challenge, OAuthError> {
        let ttl = self.providers.get(provider).map_or(Duration::from_secs(600), |m| m.provider.config.link_ttl);
        let (link, check) = self.challenges().issue(provider, user, scopes, ttl).await?;
        metrics.record_oauth_challenge(provider, "issued");
        Ok(Challenge {
            url: format!("{public_url}/oauth/{provider}/start/{link}"),
            check_url: format!("{public_url}/oauth/{provider}/check/{check}"),
        })
    }

    /// A link's status for its own caller; `None` for anyone else.
    pub async fn status(&self, provider: &str, check_id: &str, user: &str) -> Option<LinkStatus> {
        self.challenges().status(provider, check_id, user).await
    }

    /// Forgets the caller's grant and revokes it at the provider when it
    /// can. Returns whether there was one.
    pub async fn disconnect(&self, provider: &str, user: &str) -> Result<bool, FlowError> {
        let Managed { provider: p, store, .. } = self.provider(provider)?;
        let Some(grant) = store.get_versioned(provider, user).await?.map(|v| v.grant) else { return Ok(false) };
        store.delete(provider, user).await?;
        match p.revoke(&self.secrets, &grant).await {
            Ok(revoked) => tracing::info!(provider, revoked, "a user disconnected"),
            // Forgotten here either way; the provider's copy expires.
            Err(e) => {
                tracing::warn!(provider, error = %e, "revocation at the provider failed; the grant is forgotten here")
            }
        }
        Ok(true)
    }
}

/// A refresh's client span: the provider, and the outcome as
/// `otc_gateway_oauth_refreshes_total` counts it. Never a token.
fn describe_refresh(span: &mut Span, provider: &str, refreshed: &Result<Refreshed, OAuthError>) {
    span.set("otc.oauth.provider", provider);
    span.set("otc.oauth.grant_type", "refresh_token");
    let outcome = match refreshed {
        Ok(Refreshed::Grant(_)) => "ok",
        Ok(Refreshed::Revoked) => "invalid_grant",
        Err(_) => "error",
    };
    span.set("otc.oauth.refresh.outcome", outcome);
    match outcome {
        "invalid_grant" => span.fail("invalid_grant"),
        // The status, when the provider answered with an error one, is set.
        "error" if !span.is_failed() => span.fail("provider_error"),
        _ => {}
    }
}

/// What a stored grant means for a call needing `wanted`: the one judgement
/// behind `OAuth::token` and `OAuth::standing`.
enum Judgement {
    /// No grant, or one expired that cannot be refreshed: authorize.
    Authorize,
    /// A grant lacking scopes: authorize again, for more.
    MoreScopes,
    /// A grant to use as it is.
    Use,
    /// A grant about to expire, with a refresh token: refresh first.
    Refresh,
}

fn judge(p: &Provider, grant: Option<&Grant>, wanted: &BTreeSet<String>) -> Judgement {
    let Some(grant) = grant else { return Judgement::Authorize };
    if !grant.covers(wanted) {
        return Judgement::MoreScopes;
    }
    if !grant.expiring(p.config.refresh_margin.as_secs()) {
        return Judgement::Use;
    }
    match (grant.refresh_token.is_some(), grant.expired()) {
        (true, _) => Judgement::Refresh,
        (false, true) => Judgement::Authorize,
        (false, false) => Judgement::Use,
    }
}

/// A user's grant at a provider, as `GET /explain` reports it: no token.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrantStanding {
    /// The grant stored, if any.
    pub held: Option<GrantFacts>,
    /// Whether a call would get a token from it.
    pub met: bool,
    /// Why, in words.
    pub why: String,
}

/// What the gateway shows of a stored grant: never its tokens.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrantFacts {
    /// The scopes it covers.
    pub scopes: Vec<String>,
    /// When its access token expires (Unix seconds), when known.
    pub expires_at: Option<u64>,
    /// When the user first connected (Unix seconds), when recorded.
    pub connected_at: Option<u64>,
    /// When the gateway last refreshed it (Unix seconds), if ever.
    pub refreshed_at: Option<u64>,
    /// Whether the provider gave a refresh token (the gateway renews it).
    pub refreshable: bool,
}

impl GrantFacts {
    fn of(grant: &Grant) -> GrantFacts {
        GrantFacts {
            scopes: grant.scopes.iter().cloned().collect(),
            expires_at: grant.expires_at,
            connected_at: grant.connected_at,
            refreshed_at: grant.refreshed_at,
            refreshable: grant.refresh_token.is_some(),
        }
    }
}

/// One provider's grants, as `GET /grants` lists them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProviderGrants {
    /// The provider.
    pub provider: String,
    /// Each user's grant, by user id.
    pub grants: Vec<GrantSummary>,
    /// Why the store could not be listed, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One user's grant, without its tokens.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrantSummary {
    /// The user.
    pub user_id: String,
    /// The grant.
    #[serde(flatten)]
    pub grant: GrantFacts,
}

/// `{public_url}/oauth/{provider}/callback`: the redirect URI to register.
pub fn callback_url(public_url: &str, provider: &str) -> String {
    format!("{public_url}/oauth/{provider}/callback")
}

/// The embedded store for `[state]`: the one already open when it is the
/// same, else opened now (with the configured or generated key).
async fn embedded_store(
    shared: &Shared,
    state: &StateConfig,
    secrets: &SecretResolver,
) -> Result<Arc<EmbeddedStore>, OAuthError> {
    if let Some((open_for, store)) = &*shared.embedded.lock().unwrap_or_else(|p| p.into_inner()) {
        if open_for == state {
            return Ok(store.clone());
        }
    }
    let sealer = state_sealer(shared, state, secrets).await?;
    // A reload that moves the store closes the old file first.
    let mut slot = shared.embedded.lock().unwrap_or_else(|p| p.into_inner());
    slot.take();
    let store = Arc::new(EmbeddedStore::open(&state.dir, sealer)?);
    *slot = Some((state.clone(), store.clone()));
    Ok(store)
}

/// The key that seals grants at rest and sessions: `[state] encryption_key`,
/// else one generated once in `[state] dir`; the one already read when
/// `[state]` is the same.
async fn state_sealer(
    shared: &Shared,
    state: &StateConfig,
    secrets: &SecretResolver,
) -> Result<Arc<Sealer>, OAuthError> {
    if let Some((read_for, sealer)) = &*shared.sealer.lock().unwrap_or_else(|p| p.into_inner()) {
        if read_for == state {
            return Ok(sealer.clone());
        }
    }
    std::fs::create_dir_all(&state.dir)
        .map_err(|e| OAuthError::Setup(format!("cannot create [state] dir {}: {e}", state.dir.display())))?;
    let sealer = Arc::new(match &state.encryption_key {
        Some(reference) => {
            let key = secrets
                .resolve(reference, None)
                .await
                .map_err(|e| OAuthError::Setup(format!("[state] encryption_key: {e}")))?;
            Sealer::from_text(&key)?
        }
        None => Sealer::from_dir(&state.dir)?,
    });
    *shared.sealer.lock().unwrap_or_else(|p| p.into_inner()) = Some((state.clone(), sealer.clone()));
    Ok(sealer)
}
