//! A private Ceph cluster for the RBD tests (`scripts/ceph-test-cluster`): one monitor
//! and one memstore OSD on 127.0.0.1, under a temporary directory, stopped by PID when
//! the [`CephCluster`] is dropped. Starting it FAILS the test with the reason (and the
//! daemons' log tails) when it cannot start: the RBD tests are never skipped.
//!
//! One file for every crate that starts a cluster, included with `#[path]`: the RBD
//! backend's unit tests (`target/src/backend/rbd/tests.rs`), the binary's tests
//! (`target/tests/rbd_gateways.rs`) and the end-to-end tests (`tests/lib.rs`). It
//! needs only std and `nvmf_target::config`, which all three reach by that name.

use std::path::{Path, PathBuf};
use std::process::Command;

use nvmf_target::config::Config;

/// A running test cluster.
pub struct CephCluster {
    dir: PathBuf,
    conf: PathBuf,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ceph-test-cluster")
}

impl CephCluster {
    /// Starts a cluster whose pool `rbd` holds `rbd/img` of `image_size` (`64M`).
    /// `name` keeps the clusters of one test process apart.
    pub fn start(name: &str, image_size: &str) -> CephCluster {
        let dir = std::env::temp_dir().join(format!("nvmf-ceph-{}-{name}", std::process::id()));
        let out = Command::new(script())
            .arg("start")
            .arg(&dir)
            .arg("")
            .arg(image_size)
            .output()
            .unwrap_or_else(|e| panic!("cannot run scripts/ceph-test-cluster: {e}"));
        assert!(
            out.status.success(),
            "the Ceph test cluster did not start (scripts/setup installs ceph-mon, ceph-osd, \
             ceph-common): {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = dir.join("ceph.conf");
        CephCluster { dir, conf }
    }

    /// The cluster's configuration file.
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// Runs `TOOL -c CONF ARGS...` (`rbd`, `ceph`) and returns its standard output,
    /// failing the test if it fails.
    fn run(&self, tool: &str, args: &[&str]) -> String {
        let out = Command::new(tool)
            .arg("-c")
            .arg(&self.conf)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `rbd -c CONF ARGS...`, failing the test if it fails.
    pub fn rbd(&self, args: &[&str]) -> String {
        self.run("rbd", args)
    }

    /// Runs `ceph -c CONF ARGS...`, failing the test if it fails.
    pub fn ceph(&self, args: &[&str]) -> String {
        self.run("ceph", args)
    }

    /// The OSD's process id.
    pub fn osd_pid(&self) -> i32 {
        let p = self.dir.join("run/osd.0.pid");
        let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        s.trim()
            .parse()
            .unwrap_or_else(|e| panic!("{}: {s:?}: {e}", p.display()))
    }

    /// Points every `rbd:` namespace of `cfg` at this cluster.
    pub fn attach(&self, cfg: &mut Config) {
        for s in &mut cfg.subsystems {
            for n in &mut s.namespaces {
                if n.device_path.starts_with("rbd:") {
                    n.ceph_conf = Some(self.conf.clone());
                }
            }
        }
    }
}

impl Drop for CephCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).output();
    }
}
