//! The files beside the database, and who may read them: the database and its `-wal` and `-shm`
//! files, the `.lock` that keeps a second server away, and the `.key` holding the server key
//! (`store::key_file`). All are created readable by their owner only (SQLite gives the `-wal` and `-shm` files the mode of
//! the database file, so creating that one `0600` covers all three); an existing file that others
//! may read is reported at start.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::store::OpenError;

/// Owner read and write, nothing for anyone else.
pub(crate) const PRIVATE: u32 = 0o600;

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
        for path in [db.clone(), sibling(&db, ".lock")] {
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", path.display());
        }
    }
}
