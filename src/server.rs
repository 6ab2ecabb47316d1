//! Starting the gateway: the pingora data plane on `listen`, and a small
//! control runtime for catalog polling and the admin listener.

use std::path::PathBuf;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::services::listening::Service;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;

use crate::config::Config;
use crate::gateway::Gateway;
use crate::proxy::OtcProxy;
use crate::reload::ConfigWatcher;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listen address that does not parse or cannot be bound.
    #[error("cannot listen on {addr}: {detail}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        detail: String,
    },
    /// The config could not become a runtime.
    #[error(transparent)]
    Build(#[from] crate::gateway::BuildError),
    /// The control runtime could not start.
    #[error("cannot start the control runtime: {0}")]
    Runtime(std::io::Error),
    /// The config file cannot be watched for reloads.
    #[error("cannot watch the config for reloads: {0}")]
    Reload(String),
}

/// A started control plane: the runtime that polls catalogs and serves admin.
pub struct ControlPlane {
    runtime: tokio::runtime::Runtime,
}

impl ControlPlane {
    /// A small runtime of its own, so polling and admin never take a data
    /// plane worker.
    pub fn new() -> Result<ControlPlane, StartError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otc-control")
            .enable_all()
            .build()
            .map_err(StartError::Runtime)?;
        Ok(ControlPlane { runtime })
    }

    /// The runtime's handle, to spawn on it.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime.handle()
    }
}

/// Runs the gateway with `config` until it is told to stop; never returns.
/// With `config_path`, the file is watched and reloaded on change and on
/// SIGHUP. `banner`, given the address actually bound (a port 0 made
/// concrete), is printed after the ready line (the demo's curl lines).
pub fn run(
    config: Config,
    config_path: Option<PathBuf>,
    control: ControlPlane,
    banner: Option<fn(SocketAddr) -> String>,
) -> Result<(), StartError> {
    let listen = concrete_addr(&config.server.listen)?;
    let threads = match config.server.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let shutdown_timeout = config.server.shutdown_timeout.0;
    let handle = control.handle().clone();
    let gateway = handle.block_on(Gateway::new(config))?;
    let admin_addr = gateway.runtime().config.server.admin_listen.clone();
    let admin = handle
        .block_on(tokio::net::TcpListener::bind(&admin_addr))
        .map_err(|e| StartError::Listen { addr: admin_addr.clone(), detail: e.to_string() })?;
    let admin_local = admin.local_addr().map_err(|e| StartError::Listen { addr: admin_addr, detail: e.to_string() })?;
    let in_flight = Arc::new(AtomicUsize::new(0));

    let watcher = {
        let _entered = handle.enter();
        gateway.start_polling();
        handle.spawn(crate::admin::serve_admin(admin, gateway.clone()));
        handle.spawn(drain_on_sigterm(in_flight.clone(), shutdown_timeout));
        match config_path {
            Some(path) => Some(watch_for_reloads(&gateway, &handle, path)?),
            None => None,
        }
    };
    std::thread::Builder::new()
        .name("otc-control".into())
        .spawn(move || {
            let _watcher = watcher;
            announce_when_ready(listen, admin_local, banner);
            // Keep the control runtime (pollers, admin, reloads) alive for
            // the life of the process.
            control.runtime.block_on(std::future::pending::<()>());
        })
        .map_err(StartError::Runtime)?;

    // pingora stops accepting on SIGTERM and then waits out its grace period;
    // `drain_on_sigterm` exits as soon as nothing is in flight, well within it.
    let conf = ServerConf {
        threads,
        grace_period_seconds: Some(shutdown_timeout.as_secs() + 2),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let mut service = Service::new("otc-gateway data plane".to_owned(), OtcProxy::new(gateway, in_flight));
    service.add_tcp(&listen.to_string());
    server.add_service(service);
    server.run_forever()
}

/// Reloads the config when its file changes (including an atomic rename or a
/// Kubernetes ConfigMap symlink swap) and on SIGHUP.
fn watch_for_reloads(
    gateway: &Arc<Gateway>,
    handle: &tokio::runtime::Handle,
    path: PathBuf,
) -> Result<ConfigWatcher, StartError> {
    let reload = {
        let (gateway, handle, path) = (gateway.clone(), handle.clone(), path.clone());
        move || {
            let (gateway, path) = (gateway.clone(), path.clone());
            // The outcome is logged, counted and shown in /status by reload().
            handle.spawn(async move { gateway.reload(&path).await.ok() });
        }
    };
    let watcher = crate::reload::watch_config(&path, Duration::from_millis(200), reload.clone())
        .map_err(|e| StartError::Reload(e.to_string()))?;
    crate::reload::on_sighup(reload).map_err(|e| StartError::Reload(e.to_string()))?;
    Ok(watcher)
}

/// On SIGTERM, waits until no request is in flight (or `deadline` passes),
/// then exits 0. pingora has stopped accepting by then.
async fn drain_on_sigterm(in_flight: Arc<AtomicUsize>, deadline: Duration) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; pingora's own shutdown applies");
            return;
        }
    };
    term.recv().await;
    tracing::info!(in_flight = in_flight.load(Ordering::Acquire), ?deadline, "SIGTERM: draining in-flight calls");
    let until = Instant::now() + deadline;
    // A moment for requests accepted just before the signal to be counted.
    tokio::time::sleep(Duration::from_millis(50)).await;
    while in_flight.load(Ordering::Acquire) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = in_flight.load(Ordering::Acquire);
    if left > 0 {
        tracing::warn!(left, "shutdown deadline reached with calls still in flight");
    }
    tracing::info!("otc-gateway stopped");
    std::process::exit(0);
}

/// A listen address with port 0 replaced by a free port, because pingora
/// binds by address string and cannot report the port it got.
fn concrete_addr(text: &str) -> Result<SocketAddr, StartError> {
    let listen_error = |detail: String| StartError::Listen { addr: text.to_owned(), detail };
    let addr = text
        .to_socket_addrs()
        .map_err(|e| listen_error(e.to_string()))?
        .next()
        .ok_or_else(|| listen_error("resolves to no address".into()))?;
    if addr.port() != 0 {
        return Ok(addr);
    }
    let probe = StdListener::bind(addr).map_err(|e| listen_error(e.to_string()))?;
    probe.local_addr().map_err(|e| listen_error(e.to_string()))
}

/// Prints the ready line once the data plane accepts connections.
fn announce_when_ready(listen: SocketAddr, admin: SocketAddr, banner: Option<fn(SocketAddr) -> String>) {
    let mut probe = listen;
    if probe.ip().is_unspecified() {
        probe.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect_timeout(&probe, Duration::from_millis(200)).is_err() {
        if Instant::now() > deadline {
            tracing::error!(%listen, "the data plane did not start listening within 30s");
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The one line scripts and tests wait for.
    println!("otc-gateway listening on {listen} (admin {admin})");
    if let Some(banner) = banner {
        println!("{}", banner(listen));
    }
}
