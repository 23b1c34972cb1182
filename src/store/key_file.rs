//! The server key's file: where answer links and login cookies get their key, kept out of the
//! database. SQLite keeps it beside the database (`<db>.key`, made on first start); replicas on
//! PostgreSQL are each given the same file (`--secret-file`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::OpenError;
use super::sqlite::files::PRIVATE;
use crate::domain::ServerKey;

/// The server key in `path`, if the file exists.
pub fn read(path: &Path) -> Result<Option<ServerKey>, OpenError> {
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(OpenError::Database(format!("cannot read the server key {}: {e}", path.display()))),
    };
    let trimmed = text.trim_ascii().to_vec();
    ServerKey::new(trimmed).map(Some).ok_or_else(|| {
        OpenError::Database(format!(
            "the server key {} is shorter than {} bytes; restore it, or remove it to start with a new one \
             (answer links already sent and logins then stop working)",
            path.display(),
            ServerKey::MIN_LEN
        ))
    })
}

/// Writes a new key file, `0600`, whole or not at all: a temporary file, synced, then renamed
/// into place, and the directory synced so the name survives a crash.
pub fn write(path: &Path, key: &ServerKey) -> Result<(), OpenError> {
    let failed =
        |e: std::io::Error| OpenError::Database(format!("cannot write the server key {}: {e}", path.display()));
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".new");
    let temporary = PathBuf::from(temporary);
    let mut file =
        OpenOptions::new().write(true).create(true).truncate(true).mode(PRIVATE).open(&temporary).map_err(failed)?;
    file.write_all(key.expose()).and_then(|()| file.write_all(b"\n")).and_then(|()| file.sync_all()).map_err(failed)?;
    std::fs::rename(&temporary, path).map_err(failed)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        File::open(dir).and_then(|d| d.sync_all()).map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn keys_are_written_private_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("server.key");
        write(&key, &ServerKey::generate()).unwrap();
        assert_eq!(std::fs::metadata(&key).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(read(&key).unwrap().unwrap().expose().len(), 64);
        assert!(read(&dir.path().join("none.key")).unwrap().is_none());
        std::fs::write(&key, "short").unwrap();
        assert!(read(&key).is_err(), "a short key is refused, not used");
    }
}
