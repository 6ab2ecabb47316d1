//! Starting the gateway: the pingora data plane on `listen`, and a small
//! control runtime for catalog polling and the admin listener.

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::listeners::TcpSocketOptions;
use pingora::server::configuration::ServerConf;
use pingora::server::Server;
use pingora::services::listening::Service;

use crate::config::Config;
use crate::gateway::Gateway;
use crate::proxy::{DataPlane, FrontDoor};
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
    let data_listen = DataListen::resolve(&config.server.listen)?;
    let listen = data_listen.addr;
    let threads = match config.server.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    let shutdown_timeout = config.server.shutdown_timeout.0;
    for warning in config.security_warnings() {
        tracing::warn!("{warning}");
    }
    let handle = control.handle().clone();
    let gateway = handle.block_on(Gateway::new(config))?;
    gateway.set_listen_addr(listen);
    let admin_addr = gateway.generation().config.server.admin_listen.clone();
    let admin = handle
        .block_on(tokio::net::TcpListener::bind(&admin_addr))
        .map_err(|e| StartError::Listen { addr: admin_addr.clone(), detail: e.to_string() })?;
    let admin_local = admin.local_addr().map_err(|e| StartError::Listen { addr: admin_addr, detail: e.to_string() })?;
    // Requests being served, from their head to their reply.
    let serving = Arc::new(AtomicUsize::new(0));

    let watcher = {
        let _entered = handle.enter();
        gateway.start_polling();
        handle.spawn(crate::admin::serve_admin(admin, gateway.clone(), config_path.clone()));
        handle.spawn(drain_on_sigterm(serving.clone(), shutdown_timeout, gateway.integrity.clone()));
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
        // One single-threaded runtime per thread, a connection staying on
        // the thread that accepted it, as nginx's workers do: a call's task is
        // never moved between threads, and tokio's scheduler does less per
        // wakeup (benches/HISTORY.md, "Figures behind the code"). Upstream
        // connections are pooled per thread to match (upstream/call_client.rs).
        work_stealing: false,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let open_files = raise_open_files_limit();
    let mut service = Service::new(
        "otc-gateway data plane".to_owned(),
        DataPlane::new(Arc::new(FrontDoor::new(gateway, serving)), open_files),
    );
    match data_listen.options() {
        Some(options) => service.add_tcp_with_settings(&listen.to_string(), options),
        None => service.add_tcp(&listen.to_string()),
    }
    // (`data_listen` holds a port-0 reservation; run_forever never returns.)
    server.add_service(service);
    server.run_forever()
}

/// Raises the soft limit on open files to the hard one, as nginx's
/// `worker_rlimit_nofile` does: every client connection and every upstream
/// connection is a descriptor, and a soft limit of 1,024 (a common default)
/// would refuse connections long before `server.max_connections`. Returns
/// the limit in force, if it could be read.
fn raise_open_files_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit and setrlimit only read and write `limit`.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
                return None;
            }
            if limit.rlim_cur < limit.rlim_max {
                let raised = libc::rlimit { rlim_cur: limit.rlim_max, rlim_max: limit.rlim_max };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                    limit = raised;
                }
            }
        }
        Some(limit.rlim_cur)
    }
    #[cfg(not(unix))]
    None
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
/// writes the tool pins not written yet, then exits 0. pingora has stopped accepting by then.
async fn drain_on_sigterm(serving: Arc<AtomicUsize>, deadline: Duration, integrity: Arc<crate::integrity::Integrity>) {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch SIGTERM; pingora's own shutdown applies");
            return;
        }
    };
    term.recv().await;
    tracing::info!(serving = serving.load(Ordering::Acquire), ?deadline, "SIGTERM: draining the requests being served");
    let until = Instant::now() + deadline;
    // A moment for requests accepted just before the signal to be counted.
    tokio::time::sleep(Duration::from_millis(50)).await;
    while serving.load(Ordering::Acquire) > 0 && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let left = serving.load(Ordering::Acquire);
    if left > 0 {
        tracing::warn!(left, "shutdown deadline reached with calls still in flight");
    }
    // Tools pinned since the last write are kept for the next start.
    integrity.flush().await;
    tracing::info!("otc-gateway stopped");
    std::process::exit(0);
}

/// The data plane's listen address, with port 0 made concrete.
///
/// pingora binds by address string and cannot report the port it got, so a
/// port 0 is chosen here. The chosen port stays reserved by a socket bound
/// with SO_REUSEPORT but never listening (it receives no connections) until
/// the process ends, and pingora binds beside it with SO_REUSEPORT. Released
/// instead, the port could be taken by any other program in the meantime
/// (startup can take seconds), and the ready line would then name that
/// program's port.
struct DataListen {
    addr: SocketAddr,
    /// The reservation, for a port 0 only.
    reservation: Option<tokio::net::TcpSocket>,
}

impl DataListen {
    fn resolve(text: &str) -> Result<DataListen, StartError> {
        let listen_error = |detail: String| StartError::Listen { addr: text.to_owned(), detail };
        let addr = text
            .to_socket_addrs()
            .map_err(|e| listen_error(e.to_string()))?
            .next()
            .ok_or_else(|| listen_error("resolves to no address".into()))?;
        if addr.port() != 0 {
            return Ok(DataListen { addr, reservation: None });
        }
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() }
            .map_err(|e| listen_error(e.to_string()))?;
        socket.set_reuseport(true).map_err(|e| listen_error(e.to_string()))?;
        socket.bind(addr).map_err(|e| listen_error(e.to_string()))?;
        let addr = socket.local_addr().map_err(|e| listen_error(e.to_string()))?;
        Ok(DataListen { addr, reservation: Some(socket) })
    }

    /// The listener's socket options: SO_REUSEPORT beside a reservation.
    /// A configured port gets pingora's defaults, so that a port already in
    /// use is an error rather than shared.
    fn options(&self) -> Option<TcpSocketOptions> {
        self.reservation.as_ref().map(|_| {
            let mut options = TcpSocketOptions::default();
            options.so_reuseport = Some(true);
            options
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_0_stays_reserved_for_the_data_plane_alone() {
        let listen = DataListen::resolve("127.0.0.1:0").expect("a free port");
        assert_ne!(listen.addr.port(), 0);
        // Nobody else can take the port while the gateway starts...
        let taken = std::net::TcpListener::bind(listen.addr);
        assert_eq!(taken.map(drop).map_err(|e| e.kind()), Err(std::io::ErrorKind::AddrInUse));
        // ...but the data plane, binding as pingora does with these options.
        let options = listen.options().expect("options for a port 0");
        assert_eq!(options.so_reuseport, Some(true));
        let data_plane = tokio::net::TcpSocket::new_v4().expect("socket");
        data_plane.set_reuseaddr(true).expect("reuseaddr");
        data_plane.set_reuseport(true).expect("reuseport");
        data_plane.bind(listen.addr).expect("the data plane binds beside the reservation");
        // The reservation does not listen: every connection reaches the data plane.
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        runtime.block_on(async {
            let listener = data_plane.listen(16).expect("listen");
            for _ in 0..8 {
                let _client = tokio::net::TcpStream::connect(listen.addr).await.expect("connect");
                listener.accept().await.expect("accepted by the data plane");
            }
        });
    }

    #[test]
    fn a_configured_port_is_bound_as_is() {
        let listen = DataListen::resolve("127.0.0.1:8080").expect("an address");
        assert_eq!(listen.addr.port(), 8080);
        assert!(listen.reservation.is_none() && listen.options().is_none());
    }
}
