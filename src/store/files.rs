//! The files beside the database, and who may read them: the database and its `-wal` and `-shm`
//! files, the `.lock` that keeps a second server away, and the `.key` holding the server key. All
//! are created readable by their owner only (SQLite gives the `-wal` and `-shm` files the mode of
//! the database file, so creating that one `0600` covers all three); an existing file that others
//! may read is reported at start.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::OpenError;
use crate::domain::ServerKey;

/// Owner read and write, nothing for anyone else.
const PRIVATE: u32 = 0o600;

/// `<db>.lock` or `<db>.key`: beside the database, named after its canonical path so that two
/// spellings of the same file (a symlink, `./x.db`) share one lock and one key.
pub fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let canonical = std::fs::canonicalize(db).unwrap_or_else(|_| {
        // Not created yet: the directory can still be resolved.
        let dir = db.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = db.file_name().map(PathBuf::from).unwrap_or_default();
        std::fs::canonicalize(dir).map(|d| d.join(&name)).unwrap_or_else(|_| db.to_owned())
    });
    let mut path = canonical.into_os_string();
    path.push(suffix);
    PathBuf::from(path)
}

/// Opens (creating it `0600` if missing) a file to lock.
pub fn open_lock(path: &Path) -> Result<File, OpenError> {
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(PRIVATE)
        .open(path)
        .map_err(|e| OpenError::Locked(format!("cannot create the lock file {}: {e}", path.display())))
}

/// Creates the database file `0600` if it does not exist yet, before SQLite opens it (SQLite
/// would create it `0644`, less the umask).
pub fn create_database(path: &Path) -> Result<(), OpenError> {
    match OpenOptions::new().write(true).create_new(true).mode(PRIVATE).open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(OpenError::Database(format!("{} cannot be created: {e}", path.display()))),
    }
}

/// Logs a warning for each of these files that exists and that others may read or write.
pub fn warn_if_exposed(paths: &[&Path]) {
    for path in paths {
        let Ok(meta) = std::fs::metadata(path) else { continue };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            tracing::warn!(
                "{} is readable or writable by other users (mode {mode:03o}); it holds gates, answers or the \
                 server key: `chmod 600` it",
                path.display()
            );
        }
    }
}

/// The server key in `path`, if the file exists.
pub fn read_key(path: &Path) -> Result<Option<ServerKey>, OpenError> {
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
pub fn write_key(path: &Path, key: &ServerKey) -> Result<(), OpenError> {
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

    #[test]
    fn created_files_are_private() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        create_database(&db).unwrap();
        let lock = open_lock(&sibling(&db, ".lock")).unwrap();
        drop(lock);
        let key = sibling(&db, ".key");
        write_key(&key, &ServerKey::generate()).unwrap();
        for path in [db.clone(), sibling(&db, ".lock"), key.clone()] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
        assert_eq!(read_key(&key).unwrap().unwrap().expose().len(), 64);
        assert!(read_key(&dir.path().join("none.key")).unwrap().is_none());
        std::fs::write(&key, "short").unwrap();
        assert!(read_key(&key).is_err(), "a short key is refused, not used");
    }
}
