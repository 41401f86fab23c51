//! Files the target must never leave half-written (the configuration a live change
//! rewrote, persistent reservations): the new content goes to a temporary file in the
//! same directory, is flushed to stable storage, renamed over the old one, and the
//! directory is flushed so the rename itself survives a power loss. A crash at any
//! point leaves the old file or the new one, never a mix; a temporary file left by a
//! crash is removed by the next write. The new file keeps the old one's mode and owner
//! (a configuration with secrets stays 0600); a file that did not exist is created 0600.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Mode of a file the target creates (it may hold secrets or host lists).
const NEW_FILE_MODE: u32 = 0o600;

/// Where a write stands; [`write_atomic_until`] stops after a chosen number of them
/// (the crash-point tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    /// The temporary file exists (empty).
    Created,
    /// This many bytes of it are written.
    Wrote(usize),
    /// Its content is on stable storage.
    Synced,
    /// It replaced the old file.
    Renamed,
    /// The directory entry is on stable storage: done.
    DirSynced,
}

/// The temporary file a write of `path` uses (one per process: two writers of one
/// file in one process are serialized by their caller).
fn temp_of(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{}", std::process::id()))
}

/// Removes temporary files of earlier writes of `path` that a crash left behind.
fn remove_stale_temps(path: &Path) {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Replaces `path` with `bytes` atomically and durably.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_until(path, bytes, bytes.len().max(1), usize::MAX).map(|_| ())
}

/// [`write_atomic`] in `chunk`-byte writes, stopping (as a crash would) after
/// `points` [`Point`]s. Returns the last point reached.
pub fn write_atomic_until(
    path: &Path,
    bytes: &[u8],
    chunk: usize,
    points: usize,
) -> std::io::Result<Point> {
    let mut left = points;
    let mut reach = |p: Point| {
        left = left.saturating_sub(1);
        (left == 0).then_some(p)
    };
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    remove_stale_temps(path);
    let tmp = temp_of(path);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(NEW_FILE_MODE)
        .open(&tmp)?;
    if let Ok(old) = fs::metadata(path) {
        // Best effort for the owner (only root may give a file away); the mode always.
        let _ = std::os::unix::fs::fchown(&f, Some(old.uid()), Some(old.gid()));
        if let Err(e) = f.set_permissions(old.permissions()) {
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
    }
    if let Some(p) = reach(Point::Created) {
        return Ok(p);
    }
    let mut done = 0;
    for piece in bytes.chunks(chunk.max(1)) {
        if let Err(e) = f.write_all(piece) {
            drop(f);
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        done += piece.len();
        if let Some(p) = reach(Point::Wrote(done)) {
            return Ok(p);
        }
    }
    if let Err(e) = f.sync_all() {
        drop(f);
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    drop(f);
    if let Some(p) = reach(Point::Synced) {
        return Ok(p);
    }
    if let Err(e) = fs::rename(&tmp, path) {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(p) = reach(Point::Renamed) {
        return Ok(p);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::File::open(dir)?.sync_all()?;
    }
    Ok(Point::DirSynced)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("nvmf-durable-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    /// A crash after any point leaves the old content or the new one, and the next
    /// write cleans up and succeeds.
    #[test]
    fn every_crash_point_leaves_old_or_new() {
        let d = dir("points");
        let path = d.join("state.yaml");
        let old = b"old content that is long enough to take several chunks\n".repeat(3);
        let new = b"the new content, different and longer than the old one ...\n".repeat(4);
        let mut points = 0;
        for stop in 1.. {
            write_atomic(&path, &old).unwrap();
            let p = write_atomic_until(&path, &new, 12, stop).unwrap();
            let now = fs::read(&path).unwrap();
            assert!(now == old || now == new, "after {p:?}: half-written file");
            if p == Point::Renamed || p == Point::DirSynced {
                assert_eq!(now, new, "after {p:?}");
            } else {
                assert_eq!(now, old, "after {p:?}");
            }
            points += 1;
            if p == Point::DirSynced {
                break;
            }
        }
        assert!(points >= 20, "only {points} crash points");
        // The mode of the file it replaces is kept.
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        write_atomic(&path, &new).unwrap();
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        write_atomic(&path, &old).unwrap();
        let left: Vec<_> = fs::read_dir(&d).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "temporary files left: {left:?}");
        fs::remove_dir_all(&d).unwrap();
    }
}
