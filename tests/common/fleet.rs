//! A fleet's shared parts on loopback: a real `redis-server`, and Debian's
//! nginx balancing round-robin over gateways, or standing in front of an
//! API as a proxy that normalises paths.

use super::*;

/// A real redis-server on a loopback port, killed on drop.
pub struct Redis {
    child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
}

impl Redis {
    /// On a free port.
    pub fn start() -> Redis {
        Redis::start_on(free_addr())
    }

    /// On this address (to bring a killed one back where it was).
    pub fn start_on(addr: SocketAddr) -> Redis {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &addr.port().to_string(), "--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is missing: run scripts/test.sh, which installs it");
        let mut redis = Redis { child, addr };
        wait_listening(&mut redis.child, addr, "redis-server", WAIT_TIMEOUT, String::new);
        redis
    }

    /// `redis://ADDR`.
    pub fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// nginx round-robin over `backends`, on a free port, killed on drop.
pub struct Nginx {
    child: Child,
    /// Where clients connect.
    pub addr: SocketAddr,
    dir: PathBuf,
}

impl Nginx {
    /// One worker; a backend that refuses connections is skipped (a request
    /// not yet sent goes to the next one) and left alone for 10 s.
    pub fn start(backends: &[SocketAddr]) -> Nginx {
        Nginx::start_on(free_addr(), backends)
    }

    /// The same, listening on `addr` (when the backends must know it first).
    pub fn start_on(addr: SocketAddr, backends: &[SocketAddr]) -> Nginx {
        let servers: String =
            backends.iter().map(|b| format!("    server {b} max_fails=1 fail_timeout=10s;\n")).collect();
        let http = format!(
            "  upstream gateways {{\n{servers}    keepalive 16;\n  }}\n\
             server {{\n    listen {addr};\n    location / {{\n      proxy_pass http://gateways;\n\
             proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n\
             proxy_next_upstream error timeout;\n      proxy_connect_timeout 1s;\n    }}\n  }}\n"
        );
        Nginx::run(addr, &http)
    }

    /// A plain reverse proxy in front of `api`, as one is often written:
    /// `proxy_pass` with a URI (`/`), so nginx passes on the path it
    /// normalised (`%2E%2E` decoded and resolved, `//` merged) rather than
    /// the one it was sent. The hostile party of tests/openapi.rs.
    pub fn normalising_proxy(api: SocketAddr) -> Nginx {
        let addr = free_addr();
        let http = format!(
            "  server {{\n    listen {addr};\n    location / {{\n      proxy_pass http://{api}/;\n\
             proxy_http_version 1.1;\n      proxy_set_header Connection \"\";\n    }}\n  }}\n"
        );
        Nginx::run(addr, &http)
    }

    /// nginx on `addr` with `http` inside its `http` block.
    fn run(addr: SocketAddr, http: &str) -> Nginx {
        let dir = temp_file("nginx", "d", "");
        std::fs::remove_file(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        let user = if unsafe_is_root() { "user root root;\n" } else { "" };
        let conf = format!(
            "{user}worker_processes 1;\ndaemon off;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n  access_log off;\n  client_body_temp_path {d}/tmp;\n  proxy_temp_path {d}/tmp;\n\
             fastcgi_temp_path {d}/tmp;\n  uwsgi_temp_path {d}/tmp;\n  scgi_temp_path {d}/tmp;\n{http}}}\n",
            d = dir.display()
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new("nginx")
            .args(["-e", &format!("{}/error.log", dir.display()), "-p"])
            .arg(&dir)
            .arg("-c")
            .arg(dir.join("nginx.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx is missing: run scripts/test.sh, which installs it");
        let mut nginx = Nginx { child, addr, dir };
        let error_log = nginx.dir.join("error.log");
        let log = || std::fs::read_to_string(&error_log).unwrap_or_default();
        wait_listening(&mut nginx.child, addr, "nginx", WAIT_TIMEOUT, log);
        nginx
    }
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether this process runs as root (nginx then needs a `user` line).
fn unsafe_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().next())
        == Some("0")
}
