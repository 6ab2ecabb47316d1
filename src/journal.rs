//! An append-only journal of events, one JSON object per entry, in a file
//! of the state directory or in a Redis list a fleet shares: where tool
//! pins and their decisions (`integrity/`) and approvals (`approvals/`)
//! are kept. Every replica folds the same entries in the same order, so
//! they agree.

use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::redis_client::{self, SharedRedis};

/// The longest one Redis command of the journal may take.
const REDIS_TIMEOUT: Duration = Duration::from_secs(2);

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The state directory's file.
    #[error("journal {path}: {error}")]
    File {
        /// The file.
        path: String,
        /// What went wrong.
        error: String,
    },
    /// The shared Redis.
    #[error("journal in Redis: {0}")]
    Redis(String),
}

/// One journal.
pub(crate) enum Journal {
    /// A file of the state directory, one entry a line.
    File {
        /// The file.
        path: PathBuf,
        /// Read, never written (`otc-gateway check`).
        read_only: bool,
    },
    /// A Redis list.
    Redis {
        /// The Redis.
        redis: Arc<SharedRedis>,
        /// The list's key.
        key: &'static str,
        /// Read, never written.
        read_only: bool,
    },
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Journal::File { path, .. } => write!(f, "Journal({})", path.display()),
            Journal::Redis { .. } => f.write_str("Journal(redis)"),
        }
    }
}

impl Journal {
    /// The Redis list `redis_key` when there is a Redis, else the file
    /// `file` in `dir` (made when missing, and cut back to its last whole
    /// entry after a crash).
    pub(crate) fn open(
        dir: &Path,
        file: &str,
        redis: Option<(Arc<SharedRedis>, &'static str)>,
        read_only: bool,
    ) -> Result<Journal, JournalError> {
        if let Some((redis, key)) = redis {
            return Ok(Journal::Redis { redis, key, read_only });
        }
        let path = dir.join(file);
        let fail = |e: std::io::Error| JournalError::File { path: path.display().to_string(), error: e.to_string() };
        if !read_only {
            std::fs::create_dir_all(dir).map_err(fail)?;
            let mut file =
                std::fs::OpenOptions::new().create(true).read(true).append(true).open(&path).map_err(fail)?;
            let mut text = Vec::new();
            file.read_to_end(&mut text).map_err(fail)?;
            let whole = text.iter().rposition(|b| *b == b'\n').map_or(0, |at| at + 1);
            if whole < text.len() {
                file.set_len(whole as u64).map_err(fail)?;
            }
        }
        Ok(Journal::File { path, read_only })
    }

    /// A journal kept nowhere: nothing read, nothing written.
    pub(crate) fn nowhere() -> Journal {
        Journal::File { path: PathBuf::new(), read_only: true }
    }

    /// Whether appended entries are kept (not read-only, not nowhere).
    pub(crate) fn is_kept(&self) -> bool {
        !matches!(self, Journal::File { read_only: true, .. } | Journal::Redis { read_only: true, .. })
    }

    /// Appends `events` in order (nothing when read-only).
    pub(crate) async fn append<E: Serialize>(&self, events: &[E]) -> Result<(), JournalError> {
        let lines: Vec<String> = events.iter().filter_map(|e| serde_json::to_string(e).ok()).collect();
        match self {
            Journal::File { read_only: true, .. } | Journal::Redis { read_only: true, .. } => Ok(()),
            Journal::File { path, .. } => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || {
                    let fail = |e: std::io::Error| JournalError::File {
                        path: path.display().to_string(),
                        error: e.to_string(),
                    };
                    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).map_err(fail)?;
                    let mut text = lines.join("\n");
                    text.push('\n');
                    file.write_all(text.as_bytes()).map_err(fail)?;
                    file.sync_data().map_err(fail)
                })
                .await
                .map_err(|e| JournalError::File { path: String::new(), error: e.to_string() })?
            }
            Journal::Redis { redis, key, .. } => {
                let mut connection = redis.connection();
                let mut push = redis::cmd("RPUSH");
                push.arg(*key).arg(lines);
                redis_client::bounded(REDIS_TIMEOUT, push.query_async::<u64>(&mut connection))
                    .await
                    .map(|_| ())
                    .map_err(JournalError::Redis)
            }
        }
    }

    /// Replaces a file journal's entries by `events` (a new file renamed
    /// over the old, so a crash leaves one or the other whole) and returns
    /// the offset after them; `None` for a Redis list, which other replicas
    /// read by index and which is therefore never rewritten, and when
    /// read-only. Only for a journal no one else writes meanwhile: the
    /// owner's, when it opens it.
    pub(crate) async fn replace<E: Serialize>(&self, events: &[E]) -> Result<Option<u64>, JournalError> {
        let Journal::File { path, read_only: false } = self else { return Ok(None) };
        let mut text = String::new();
        for event in events {
            if let Ok(line) = serde_json::to_string(event) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        let path = path.clone();
        tokio::task::spawn_blocking(move || {
            let fail =
                |e: std::io::Error| JournalError::File { path: path.display().to_string(), error: e.to_string() };
            let mut fresh = path.clone().into_os_string();
            fresh.push(".new");
            let fresh = PathBuf::from(fresh);
            let mut file = std::fs::File::create(&fresh).map_err(fail)?;
            file.write_all(text.as_bytes()).map_err(fail)?;
            file.sync_data().map_err(fail)?;
            std::fs::rename(&fresh, &path).map_err(fail)?;
            Ok(Some(text.len() as u64))
        })
        .await
        .map_err(|e| JournalError::File { path: String::new(), error: e.to_string() })?
    }

    /// The entries from `offset` on (a byte offset in the file, an index in
    /// Redis), and the offset after them. Unreadable entries are skipped.
    pub(crate) async fn read_from<E: DeserializeOwned>(&self, offset: u64) -> Result<(Vec<E>, u64), JournalError> {
        let (entries, next) = match self {
            Journal::File { path, .. } => {
                let path = path.clone();
                tokio::task::spawn_blocking(move || read_file(&path, offset))
                    .await
                    .map_err(|e| JournalError::File { path: String::new(), error: e.to_string() })??
            }
            Journal::Redis { redis, key, .. } => {
                let mut connection = redis.connection();
                let mut range = redis::cmd("LRANGE");
                range.arg(*key).arg(offset).arg(-1);
                let entries: Vec<String> = redis_client::bounded(REDIS_TIMEOUT, range.query_async(&mut connection))
                    .await
                    .map_err(JournalError::Redis)?;
                let next = offset + entries.len() as u64;
                (entries, next)
            }
        };
        let events = entries
            .iter()
            .filter_map(|entry| match serde_json::from_str(entry) {
                Ok(event) => Some(event),
                Err(e) => {
                    tracing::warn!(error = %e, journal = ?self, "an unreadable entry of a journal was skipped");
                    None
                }
            })
            .collect();
        Ok((events, next))
    }
}

/// The whole lines of the file from `offset`, and the offset after them.
fn read_file(path: &Path, offset: u64) -> Result<(Vec<String>, u64), JournalError> {
    let fail = |e: std::io::Error| JournalError::File { path: path.display().to_string(), error: e.to_string() };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), offset)),
        Err(e) => return Err(fail(e)),
    };
    file.seek(SeekFrom::Start(offset)).map_err(fail)?;
    let mut text = String::new();
    file.read_to_string(&mut text).map_err(fail)?;
    let whole = text.rfind('\n').map_or(0, |at| at + 1);
    let lines = text[..whole].lines().filter(|l| !l.is_empty()).map(str::to_owned).collect();
    Ok((lines, offset + whole as u64))
}
