//! Key files (DH-HMAC-CHAP secrets, TLS PSKs) read from disk, by the target's
//! configuration and by the host's CLI alike.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use zeroize::Zeroizing;

/// Permission bits a key file must not have: group or others may read, write or run it.
const KEY_FILE_FORBIDDEN_MODE: u32 = 0o077;

/// Reads a key file, refusing one that group or others may read.
pub fn read_key_file(p: &Path) -> Result<Zeroizing<String>, String> {
    let meta =
        std::fs::metadata(p).map_err(|e| format!("cannot read key file {}: {e}", p.display()))?;
    let mode = meta.permissions().mode();
    if mode & KEY_FILE_FORBIDDEN_MODE != 0 {
        return Err(format!(
            "key file {} is readable by group or others (mode {:o}); chmod 600 it",
            p.display(),
            mode & 0o777
        ));
    }
    std::fs::read_to_string(p)
        .map(|s| Zeroizing::new(s.trim().to_owned()))
        .map_err(|e| format!("cannot read key file {}: {e}", p.display()))
}
