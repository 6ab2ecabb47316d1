//! What triggers a config reload: a change to the config file on disk, or a
//! SIGHUP.
//!
//! This module only says *when*; what a reload does (parse, validate, swap)
//! is up to the `on_change` callback.
//!
//! The file is looked at, not its directory: twice a second, one `stat`
//! through any symlinks tells whether it is another file (a rename over it,
//! a Kubernetes ConfigMap swap of `..data`), or the same file written
//! again. Nothing else in the directory costs anything or triggers a
//! reload. (Written here rather than with the `notify` crate: its inotify
//! watcher must watch the whole directory to see a rename, so every write to
//! any file there woke it, and a trace log kept beside the config fed itself
//! through notify's own trace lines, a core's worth; its polling watcher
//! refuses a file that does not exist yet.)
//!
//! Bursts (one save is often several changes; a deploy may write many times)
//! are coalesced: `on_change` runs once the file has been quiet for the
//! debounce time.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime};

/// How often the config file is looked at.
pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// How many debounce periods a continuous stream of changes may hold back
/// `on_change` before it runs anyway.
const MAX_DEFER_FACTOR: u32 = 10;

/// Why reload triggers could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The path has no file name (such as `/` or `..`).
    #[error("config path {0} does not name a file")]
    NoFileName(PathBuf),
    /// The file's directory does not exist or cannot be read.
    #[error("cannot watch {dir} for config changes: {source}")]
    Watch {
        /// The directory of the config file.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The thread that watches could not be started.
    #[error("cannot start the config watcher thread: {0}")]
    Thread(#[source] std::io::Error),
    /// [`on_sighup`] was called outside a tokio runtime.
    #[error("SIGHUP reload needs a tokio runtime: {0}")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
    /// The SIGHUP handler could not be installed.
    #[error("cannot listen for SIGHUP: {0}")]
    Signal(#[source] std::io::Error),
}

/// What the poller passes to the debounce thread.
enum Message {
    /// The file changed.
    Changed,
    /// The [`ConfigWatcher`] was dropped.
    Stop,
}

/// A running watch on a config file. Dropping it stops the watch: no
/// `on_change` runs after the drop, except one that had already started.
pub struct ConfigWatcher {
    path: PathBuf,
    stop: Sender<Message>,
    /// Dropped with the watcher: the poller sees it gone and ends.
    _alive: std::sync::Arc<()>,
}

impl std::fmt::Debug for ConfigWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigWatcher").field("path", &self.path).finish_non_exhaustive()
    }
}

impl Drop for ConfigWatcher {
    fn drop(&mut self) {
        // The debounce thread may already be gone; nothing to do then.
        let _ = self.stop.send(Message::Stop);
    }
}

/// What a `stat` of the config says: which file it is (device and inode,
/// through symlinks), its length and when it was last written. `None`:
/// there is no file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen(Option<FileState>);

/// Device, inode, length, modification and change times.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileState {
    dev: u64,
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
    changed: Option<SystemTime>,
}

impl Seen {
    fn of(path: &Path) -> Seen {
        use std::os::unix::fs::MetadataExt;
        Seen(std::fs::metadata(path).ok().map(|m| FileState {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            modified: m.modified().ok(),
            changed: ctime(&m),
        }))
    }
}

/// When the file's inode last changed (a `touch`, a `chmod`, a write).
fn ctime(meta: &std::fs::Metadata) -> Option<SystemTime> {
    use std::os::unix::fs::MetadataExt;
    let nanos = u32::try_from(meta.ctime_nsec()).ok()?;
    SystemTime::UNIX_EPOCH.checked_add(Duration::new(u64::try_from(meta.ctime()).ok()?, nanos))
}

/// Watches `path` for changes and calls `on_change` once per burst of them.
///
/// The file is looked at every [`POLL_INTERVAL`] through any symlinks, so
/// it may be replaced by a rename or a ConfigMap symlink swap, or may not
/// exist yet; its directory must exist. A change is another file at the
/// path, a write into it, a change of its attributes, its creation or
/// removal. Opening or reading it (as a reload does) is not a change, and
/// nothing that happens to other files is.
///
/// After a change, `on_change` runs when no further change has come for
/// `debounce`, or at the latest `10 × debounce` after the first, so that a
/// file rewritten without pause still gets reloaded. Changes during a running
/// `on_change` lead to one more call after it.
///
/// `on_change` runs on a thread of the watcher's own; it may block (changes
/// queue up meanwhile). A panic in it is logged and the watch goes on.
pub fn watch_config(
    path: &Path,
    debounce: Duration,
    on_change: impl Fn() + Send + Sync + 'static,
) -> Result<ConfigWatcher, ReloadError> {
    let file_name = path.file_name().ok_or_else(|| ReloadError::NoFileName(path.to_path_buf()))?;
    let dir = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::read_dir(&dir).map_err(|source| ReloadError::Watch { dir: dir.clone(), source })?;

    let (tx, rx) = mpsc::channel();
    let alive = std::sync::Arc::new(());
    let watched = std::sync::Arc::downgrade(&alive);
    let (changes, polled) = (tx.clone(), path.to_path_buf());
    // Seen now: a change right after this returns is a change.
    let mut last = Seen::of(&polled);
    std::thread::Builder::new()
        .name("otc-config-poll".into())
        .spawn(move || loop {
            std::thread::sleep(POLL_INTERVAL);
            if watched.upgrade().is_none() {
                return;
            }
            let now = Seen::of(&polled);
            if now != last {
                last = now;
                if changes.send(Message::Changed).is_err() {
                    return;
                }
            }
        })
        .map_err(ReloadError::Thread)?;
    let label = path.display().to_string();
    std::thread::Builder::new()
        .name("otc-config-watch".into())
        .spawn(move || debounce_loop(&rx, debounce, &label, &on_change))
        .map_err(ReloadError::Thread)?;
    tracing::debug!(dir = %dir.display(), file = ?file_name, "watching config for changes");
    Ok(ConfigWatcher { path: path.to_path_buf(), stop: tx, _alive: alive })
}

/// Waits for changes, coalesces each burst, and calls `on_change` once per
/// burst, until the watcher is dropped.
fn debounce_loop(rx: &Receiver<Message>, debounce: Duration, label: &str, on_change: &(dyn Fn() + Send + Sync)) {
    let max_defer = debounce.saturating_mul(MAX_DEFER_FACTOR);
    loop {
        match rx.recv() {
            Ok(Message::Changed) => {}
            Ok(Message::Stop) | Err(_) => return,
        }
        let first = Instant::now();
        let mut quiet_until = first + debounce;
        let latest = first + max_defer;
        loop {
            let deadline = quiet_until.min(latest);
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            match rx.recv_timeout(deadline - now) {
                Ok(Message::Changed) => quiet_until = Instant::now() + debounce,
                Ok(Message::Stop) | Err(RecvTimeoutError::Disconnected) => return,
                Err(RecvTimeoutError::Timeout) => break,
            }
        }
        tracing::info!(config = label, "config changed on disk");
        run(on_change, "file change");
    }
}

/// Calls `on_change`, logging a panic instead of propagating it.
fn run(on_change: &(dyn Fn() + Send + Sync), trigger: &str) {
    if catch_unwind(AssertUnwindSafe(on_change)).is_err() {
        tracing::error!(trigger, "config reload callback panicked");
    }
}

/// Calls `on_change` on every SIGHUP, from a task spawned on the current
/// tokio runtime, for as long as that runtime runs.
///
/// The handler is installed before this returns, so a SIGHUP sent after it
/// returns reaches `on_change` and never terminates the process. Several
/// SIGHUPs in quick succession may be coalesced into one call. `on_change`
/// runs on the runtime's thread: keep it short, or hand the work off.
///
/// Fails outside a tokio runtime (or one without its IO driver enabled) or
/// when the handler cannot be installed.
pub fn on_sighup(on_change: impl Fn() + Send + Sync + 'static) -> Result<tokio::task::JoinHandle<()>, ReloadError> {
    use tokio::signal::unix::{signal, SignalKind};
    let runtime = tokio::runtime::Handle::try_current().map_err(ReloadError::NoRuntime)?;
    let _entered = runtime.enter();
    let mut hangups = signal(SignalKind::hangup()).map_err(ReloadError::Signal)?;
    Ok(runtime.spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!("SIGHUP received: reloading the config");
            run(&on_change, "SIGHUP");
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// A fresh directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
            let dir = std::env::temp_dir().join(format!("otc-reload-{}-{name}-{nanos}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            // Canonical, so that paths in events match (the temp dir may be a symlink).
            TempDir(dir.canonicalize().unwrap())
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Counts `on_change` calls.
    #[derive(Clone, Default)]
    struct Counter(Arc<AtomicUsize>);

    impl Counter {
        fn callback(&self) -> impl Fn() + Send + Sync + 'static {
            let count = self.0.clone();
            move || {
                count.fetch_add(1, Ordering::SeqCst);
            }
        }

        fn get(&self) -> usize {
            self.0.load(Ordering::SeqCst)
        }

        /// Waits (up to 10 s) for at least `n` calls, then for things to
        /// settle, and returns the count.
        fn wait_for(&self, n: usize, settle: Duration) -> usize {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.get() < n && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            std::thread::sleep(settle);
            self.get()
        }
    }

    const DEBOUNCE: Duration = Duration::from_millis(150);
    /// How long a test watches for a call that must not come: an absence
    /// has no event to wait on. (The watcher runs on the OS's file events
    /// and a thread of its own, not on a clock a test could pause; the
    /// other sleeps here pace writes, as an editor would.)
    const SETTLE: Duration = Duration::from_millis(2000);

    fn write(path: &Path, text: &str) {
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn in_place_write_calls_once() {
        let dir = TempDir::new("in-place");
        let config = dir.0.join("gateway.toml");
        write(&config, "generation = 1\n");
        let counter = Counter::default();
        let _watcher = watch_config(&config, DEBOUNCE, counter.callback()).unwrap();

        write(&config, "generation = 2\n");
        assert_eq!(counter.wait_for(1, SETTLE), 1);

        // Reading the file (as a reload does) is no change.
        let _ = std::fs::read_to_string(&config).unwrap();
        std::thread::sleep(SETTLE);
        assert_eq!(counter.get(), 1);

        // A later edit is a second change.
        write(&config, "generation = 3\n");
        assert_eq!(counter.wait_for(2, SETTLE), 2);
    }

    #[test]
    fn atomic_rename_over_the_file_is_seen_and_other_files_are_not() {
        let dir = TempDir::new("rename");
        let config = dir.0.join("gateway.toml");
        write(&config, "generation = 1\n");
        let counter = Counter::default();
        let _watcher = watch_config(&config, DEBOUNCE, counter.callback()).unwrap();

        // Unrelated files in the same directory, written without pause (a
        // log kept beside the config): no call.
        write(&dir.0.join("gateway.toml.bak"), "x = 1\n");
        std::fs::create_dir(dir.0.join("sub")).unwrap();
        let churn_until = Instant::now() + SETTLE;
        let mut n = 0;
        while Instant::now() < churn_until {
            n += 1;
            write(&dir.0.join("trace.log"), &"line\n".repeat(n % 100));
            write(&dir.0.join(format!("other-{}.toml", n % 5)), "x = 1\n");
        }
        assert_eq!(counter.get(), 0);

        // The temp file's own events don't count; the rename does, twice in a row.
        for generation in 2..=3 {
            let tmp = dir.0.join(".gateway.toml.tmp");
            write(&tmp, &format!("generation = {generation}\n"));
            std::fs::rename(&tmp, &config).unwrap();
            assert_eq!(counter.wait_for(generation - 1, SETTLE), generation - 1);
            assert_eq!(std::fs::read_to_string(&config).unwrap(), format!("generation = {generation}\n"));
        }
    }

    #[test]
    fn configmap_symlink_swap_is_seen() {
        use std::os::unix::fs::symlink;
        let dir = TempDir::new("configmap");
        let d = &dir.0;
        // The layout kubelet makes for a ConfigMap volume.
        std::fs::create_dir(d.join("..2026_01_01_00_00_00.000000001")).unwrap();
        write(&d.join("..2026_01_01_00_00_00.000000001/gateway.toml"), "generation = 1\n");
        symlink("..2026_01_01_00_00_00.000000001", d.join("..data")).unwrap();
        symlink("..data/gateway.toml", d.join("gateway.toml")).unwrap();
        let config = d.join("gateway.toml");
        assert_eq!(std::fs::read_to_string(&config).unwrap(), "generation = 1\n");

        let counter = Counter::default();
        let _watcher = watch_config(&config, DEBOUNCE, counter.callback()).unwrap();

        // An update: a new timestamped dir, a new link renamed over ..data,
        // the old dir removed. gateway.toml itself is never touched.
        for (generation, stamp) in [(2, "..2026_01_02_00_00_00.000000002"), (3, "..2026_01_03_00_00_00.000000003")] {
            let old = std::fs::read_link(d.join("..data")).unwrap();
            std::fs::create_dir(d.join(stamp)).unwrap();
            write(&d.join(stamp).join("gateway.toml"), &format!("generation = {generation}\n"));
            symlink(stamp, d.join("..data_tmp")).unwrap();
            std::fs::rename(d.join("..data_tmp"), d.join("..data")).unwrap();
            std::fs::remove_dir_all(d.join(old)).unwrap();

            assert_eq!(counter.wait_for(generation - 1, SETTLE), generation - 1);
            assert_eq!(std::fs::read_to_string(&config).unwrap(), format!("generation = {generation}\n"));
        }
    }

    #[test]
    fn a_burst_of_writes_is_coalesced() {
        let dir = TempDir::new("burst");
        let config = dir.0.join("gateway.toml");
        write(&config, "generation = 0\n");
        let counter = Counter::default();
        let _watcher = watch_config(&config, Duration::from_millis(300), counter.callback()).unwrap();

        for generation in 1..=20 {
            write(&config, &format!("generation = {generation}\n"));
            std::thread::sleep(Duration::from_millis(5));
        }
        let calls = counter.wait_for(1, SETTLE);
        assert!((1..=2).contains(&calls), "{calls} calls for one burst");
    }

    #[test]
    fn a_continuous_stream_still_reloads() {
        let dir = TempDir::new("stream");
        let config = dir.0.join("gateway.toml");
        let counter = Counter::default();
        let debounce = Duration::from_millis(50);
        let _watcher = watch_config(&config, debounce, counter.callback()).unwrap();
        // Writes every 20 ms for 1.5 s: never quiet for 50 ms, yet on_change
        // runs at the latest 500 ms after the first write.
        let end = Instant::now() + Duration::from_millis(1500);
        let mut generation = 0;
        while Instant::now() < end {
            generation += 1;
            write(&config, &format!("generation = {generation}\n"));
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(counter.get() >= 1, "no call during a continuous stream of writes");
    }

    #[test]
    fn a_file_created_later_is_seen_and_drop_stops_the_watch() {
        let dir = TempDir::new("drop");
        let config = dir.0.join("gateway.toml");
        let counter = Counter::default();
        let watcher = watch_config(&config, DEBOUNCE, counter.callback()).unwrap();
        write(&config, "generation = 1\n");
        assert_eq!(counter.wait_for(1, SETTLE), 1);

        drop(watcher);
        write(&config, "generation = 2\n");
        std::thread::sleep(SETTLE);
        assert_eq!(counter.get(), 1);
    }

    #[test]
    fn a_panicking_callback_does_not_end_the_watch() {
        let dir = TempDir::new("panic");
        let config = dir.0.join("gateway.toml");
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let _watcher = watch_config(&config, DEBOUNCE, move || {
            if seen.fetch_add(1, Ordering::SeqCst) == 0 {
                panic!("first reload fails hard");
            }
        })
        .unwrap();
        write(&config, "generation = 1\n");
        let counter = Counter(calls);
        assert_eq!(counter.wait_for(1, SETTLE), 1);
        write(&config, "generation = 2\n");
        assert_eq!(counter.wait_for(2, SETTLE), 2);
    }

    #[test]
    fn errors() {
        let missing = std::env::temp_dir().join("otc-reload-no-such-dir-9f1c/gateway.toml");
        let err = watch_config(&missing, DEBOUNCE, || {}).unwrap_err();
        assert!(matches!(err, ReloadError::Watch { .. }), "{err:?}");
        assert!(err.to_string().contains("otc-reload-no-such-dir-9f1c"), "{err}");

        let err = watch_config(Path::new("/"), DEBOUNCE, || {}).unwrap_err();
        assert!(matches!(err, ReloadError::NoFileName(_)), "{err:?}");

        let err = on_sighup(|| {}).unwrap_err();
        assert!(matches!(err, ReloadError::NoRuntime(_)), "{err:?}");
    }

    #[test]
    fn a_relative_path_watches_the_current_directory() {
        // Only checks that the parent of a bare file name is taken as ".".
        let counter = Counter::default();
        let watcher = watch_config(Path::new("otc-reload-relative-test.toml"), DEBOUNCE, counter.callback()).unwrap();
        drop(watcher);
    }

    #[tokio::test]
    async fn sighup_calls_back() {
        let counter = Counter::default();
        let task = on_sighup(counter.callback()).unwrap();
        let pid = std::process::id().to_string();
        for expected in 1..=2 {
            let status = tokio::process::Command::new("kill").args(["-HUP", &pid]).status().await.unwrap();
            assert!(status.success());
            let deadline = Instant::now() + Duration::from_secs(10);
            while counter.get() < expected && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            assert_eq!(counter.get(), expected);
        }
        task.abort();
    }
}
