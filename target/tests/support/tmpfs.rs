//! A small tmpfs for "the disk is full" tests (mounting needs root, as CI runs).

#![allow(dead_code)] // each test file uses its own part

use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs of a given size mounted on a new directory, unmounted on drop.
pub struct Tmpfs(pub PathBuf);

impl Tmpfs {
    pub fn new(dir: PathBuf, bytes: u64) -> Tmpfs {
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={bytes}"), "tmpfs"])
            .arg(&dir)
            .status()
            .is_ok_and(|s| s.success());
        assert!(
            ok,
            "mount tmpfs on {} (needs root, as CI runs)",
            dir.display()
        );
        Tmpfs(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Fills the file system holding `dir` (a filler file as large as it gets).
pub fn fill(dir: &Path) -> PathBuf {
    use std::io::Write;
    let filler = dir.join("filler");
    let mut f = std::fs::File::create(&filler).unwrap_or_else(|e| panic!("{e}"));
    let block = vec![0xAAu8; 4096];
    while f.write_all(&block).is_ok() {}
    filler
}
