//! `file:/path`: secrets from files (Docker/Kubernetes secrets, Vault agent
//! sinks).

use std::future::Future;
use std::path::Path;

use super::{SecretSource, VaultError};
use crate::secret::SecretString;

/// The largest secret file read; anything bigger is not a credential and
/// would only waste memory.
const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads the whole file at resolve time (so rotated files are picked up),
/// trimming one trailing newline (`\n` or `\r\n`), which editors and
/// `echo` add but no credential contains.
#[derive(Clone, Copy, Debug, Default)]
pub struct FileSource;

impl FileSource {
    /// Reads `path` now, without blocking the tokio runtime.
    pub async fn read(&self, path: &Path) -> Result<SecretString, VaultError> {
        let shown = || path.display().to_string();
        let unreadable = |kind| VaultError::FileUnreadable { path: shown(), kind };
        let meta = tokio::fs::metadata(path).await.map_err(|e| unreadable(e.kind()))?;
        if !meta.is_file() {
            return Err(unreadable(std::io::ErrorKind::InvalidInput));
        }
        if meta.len() > MAX_FILE_BYTES {
            return Err(unreadable(std::io::ErrorKind::FileTooLarge));
        }
        let bytes = tokio::fs::read(path).await.map_err(|e| unreadable(e.kind()))?;
        let mut text = String::from_utf8(bytes).map_err(|_| VaultError::FileNotUtf8 { path: shown() })?;
        if text.ends_with('\n') {
            text.pop();
            if text.ends_with('\r') {
                text.pop();
            }
        }
        Ok(SecretString::from(text))
    }
}

impl SecretSource for FileSource {
    type Key = Path;

    fn fetch(&self, path: &Path) -> impl Future<Output = Result<SecretString, VaultError>> + Send {
        self.read(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn temp_path(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("otc-file-source-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        dir.join(name)
    }

    #[tokio::test]
    async fn one_trailing_newline_is_trimmed() {
        let cases: [(&str, &[u8], &str); 5] = [
            ("a", b"secret-a\n", "secret-a"),
            ("b", b"secret-b", "secret-b"),
            ("c", b"secret-c\r\n", "secret-c"),
            ("d", b"line1\nline2\n\n", "line1\nline2\n"),
            ("e", b"  padded  \n", "  padded  "),
        ];
        for (name, content, want) in cases {
            let p = temp_path(name);
            std::fs::write(&p, content).expect("write");
            let v = FileSource.fetch(&p).await.expect("read");
            assert_eq!(v.expose(), want, "{name}");
        }
    }

    #[tokio::test]
    async fn reads_at_resolve_time() {
        let p = temp_path("rotating");
        std::fs::write(&p, "v1\n").expect("write");
        assert_eq!(FileSource.fetch(&p).await.expect("read").expose(), "v1");
        std::fs::write(&p, "v2\n").expect("write");
        assert_eq!(FileSource.fetch(&p).await.expect("read").expose(), "v2");
    }

    #[tokio::test]
    async fn a_missing_file_is_unreadable_with_its_kind() {
        let p = temp_path("does-not-exist");
        let err = FileSource.fetch(&p).await.expect_err("missing");
        match &err {
            VaultError::FileUnreadable { kind, path } => {
                assert_eq!(*kind, std::io::ErrorKind::NotFound);
                assert!(path.ends_with("does-not-exist"));
            }
            other => panic!("{other:?}"),
        }
        assert!(err.to_string().contains("does-not-exist"));
    }

    #[tokio::test]
    async fn a_directory_or_binary_file_is_refused() {
        let dir = temp_path("a-dir");
        std::fs::create_dir_all(&dir).expect("dir");
        assert!(matches!(
            FileSource.fetch(&dir).await,
            Err(VaultError::FileUnreadable { kind: std::io::ErrorKind::InvalidInput, .. })
        ));
        let bin = temp_path("binary");
        std::fs::write(&bin, [0xff, 0xfe, 0x00]).expect("write");
        assert!(matches!(FileSource.fetch(&bin).await, Err(VaultError::FileNotUtf8 { .. })));
    }
}
