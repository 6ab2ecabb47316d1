//! Waiting for a condition: the one poll loop every test uses, with a
//! deadline and a failure message that says what was awaited and what was
//! last seen.
//!
//! ```ignore
//! let listing = wait_until("Calc.Echo is listed", async || {
//!     let resp = gw.get("/tools").await;
//!     if resp.text().contains("Calc.Echo") { Ok(resp) } else { Err(resp.text()) }
//! })
//! .await;
//! ```

use super::*;

/// How often a condition is checked again.
const POLL_EVERY: Duration = Duration::from_millis(50);

/// What a check answers: done (with a value), or not yet (with what it saw,
/// for the failure message).
pub trait Check {
    /// What the wait returns once the condition holds.
    type Done;
    /// `Ok` once done; `Err(what was seen)` while not.
    fn outcome(self) -> Result<Self::Done, String>;
}

impl Check for bool {
    type Done = ();
    fn outcome(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("the condition did not hold".to_owned())
        }
    }
}

impl<T> Check for Option<T> {
    type Done = T;
    fn outcome(self) -> Result<T, String> {
        self.ok_or_else(|| "nothing yet".to_owned())
    }
}

impl<T, E: std::fmt::Display> Check for Result<T, E> {
    type Done = T;
    fn outcome(self) -> Result<T, String> {
        self.map_err(|e| e.to_string())
    }
}

/// Checks `check` until it is done, for up to [`WAIT_TIMEOUT`]; its value.
/// Panics naming `what` (read as "timed out waiting until {what}") and the
/// last thing seen.
pub async fn wait_until<C: Check>(what: &str, check: impl AsyncFnMut() -> C) -> C::Done {
    wait_within(WAIT_TIMEOUT, what, check).await
}

/// [`wait_until`] with another limit (a process that starts slowly, a
/// debug build's long import).
pub async fn wait_within<C: Check>(limit: Duration, what: &str, mut check: impl AsyncFnMut() -> C) -> C::Done {
    let deadline = Instant::now() + limit;
    loop {
        match check().await.outcome() {
            Ok(done) => return done,
            Err(seen) if Instant::now() >= deadline => {
                panic!("timed out after {limit:?} waiting until {what}; last seen: {seen}")
            }
            Err(_) => tokio::time::sleep(POLL_EVERY).await,
        }
    }
}

/// [`wait_within`] for code outside an async runtime (child processes,
/// plain threads): blocks the thread between checks.
pub fn wait_blocking<C: Check>(limit: Duration, what: &str, mut check: impl FnMut() -> C) -> C::Done {
    let deadline = Instant::now() + limit;
    loop {
        match check().outcome() {
            Ok(done) => return done,
            Err(seen) if Instant::now() >= deadline => {
                panic!("timed out after {limit:?} waiting until {what}; last seen: {seen}")
            }
            Err(_) => std::thread::sleep(POLL_EVERY),
        }
    }
}

/// Waits (blocking) until `addr` accepts connections from `child`, a server
/// just started; panics naming `what`, with `log()` (its output), when it
/// exits first or is not listening within `limit`.
pub fn wait_listening(child: &mut Child, addr: SocketAddr, what: &str, limit: Duration, log: impl Fn() -> String) {
    wait_blocking(limit, &format!("{what} listens on {addr}"), || {
        if std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("{what} exited ({status}) before listening on {addr}:\n{}", log());
        }
        Err(log())
    })
}
