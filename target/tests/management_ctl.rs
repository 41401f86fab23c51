//! `nvmf-target ctl --server` (issue 25, item 3) against the binary in another
//! process: the same subcommands and the same output as over the admin socket
//! (changes, refusals, status, export, top), roles enforced, a change made through
//! the API durable across SIGKILL + start, and a change that cannot be saved (a full
//! file system: root, as CI runs) refused with the running state unchanged.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "support/service.rs"]
mod service;
use service::{bin, ctl, free_port, output, start, stop};

#[path = "support/tmpfs.rs"]
mod tmpfs;
use tmpfs::{fill, Tmpfs};

const SUB: &str = "nqn.2026-11.io.example:remote";

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvmf-mgmt-ctl-{}-{name}", std::process::id()))
}

fn make_certs(dir: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/management/make-certs");
    let ok = Command::new("bash")
        .arg(script)
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "make-certs failed (openssl: scripts/setup)");
}

fn config(port: u16, api: u16, certs: &Path) -> String {
    let c = |f: &str| certs.join(f).display().to_string();
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:8M\" }}\n\
         management:\n  listen: 127.0.0.1:{api}\n  ca: {}\n  cert: {}\n  key: {}\n  admins: [orchestrator]\n  readers: [monitoring]\n",
        c("ca.pem"),
        c("server.pem"),
        c("server.key")
    )
}

/// One target process with its socket, API port and certificates.
struct Remote {
    sock: PathBuf,
    api: u16,
    certs: PathBuf,
}

impl Remote {
    /// `nvmf-target ctl --server ... ARGS` as `who` (admin, reader): success, output.
    fn ctl_as(&self, who: &str, args: &[&str]) -> (bool, String) {
        let c = |f: String| self.certs.join(f);
        output(
            bin()
                .arg("ctl")
                .arg("--server")
                .arg(format!("127.0.0.1:{}", self.api))
                .arg("--ca")
                .arg(c("ca.pem".into()))
                .arg("--cert")
                .arg(c(format!("{who}.pem")))
                .arg("--key")
                .arg(c(format!("{who}.key")))
                .args(args),
        )
    }

    fn api(&self, args: &[&str]) -> (bool, String) {
        self.ctl_as("admin", args)
    }

    fn socket(&self, args: &[&str]) -> (bool, String) {
        ctl(&self.sock, args)
    }
}

/// (NGUID, UUID) of namespace `nsid` as a host connected to 127.0.0.1:`port` sees it.
fn identity(port: u16, nsid: u32) -> ([u8; 16], Option<[u8; 16]>) {
    use nvmf_initiator::controller::{ConnectOptions, Controller};
    use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
    let nqn = |s: &str| nvmf_common::types::Nqn::new(s).unwrap_or_else(|e| panic!("{e}"));
    let fabric = std::sync::Arc::new(TcpFabric::new(
        std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        TcpOptions::default(),
    ));
    let mut o = ConnectOptions::new(
        nqn(SUB),
        nqn("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000aa01"),
        [0xAA; 16],
    );
    o.nr_io_queues = 0;
    let c = Controller::connect(fabric, o).unwrap_or_else(|e| panic!("connect: {e}"));
    let ns = c
        .namespace(nvmf_common::types::Nsid(nsid))
        .unwrap_or_else(|e| panic!("{e}"));
    let ids = (ns.nguid, ns.uuid);
    c.shutdown().unwrap_or_else(|e| panic!("{e}"));
    ids
}

/// Status without the live counters (they move between two calls).
fn settled(status: &str) -> String {
    status
        .lines()
        .filter(|l| !l.starts_with("transport "))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn ctl_over_the_api_answers_as_over_the_socket_and_its_changes_are_durable() {
    use nix::sys::signal::Signal;
    let certs = tmp("certs");
    make_certs(&certs);
    let cfg = tmp("target.yaml");
    let sock = tmp("target.sock");
    let r = Remote {
        sock: sock.clone(),
        api: free_port(),
        certs: certs.clone(),
    };
    let port = free_port();
    std::fs::write(&cfg, config(port, r.api, &certs)).unwrap_or_else(|e| panic!("{e}"));
    let child = start(&cfg, &sock, SUB);

    // Queries: the same text.
    for args in [&["export"][..], &["status"], &["status", "--json"]] {
        let (a, b) = (r.api(args), r.socket(args));
        assert!(a.0 && b.0, "{args:?}: {a:?} {b:?}");
        if args == ["export"] {
            assert_eq!(a.1, b.1, "{args:?}");
        } else if args == ["status"] {
            assert_eq!(settled(&a.1), settled(&b.1), "{args:?}");
        } else {
            assert!(a.1.contains("\"genctr\""), "{}", a.1);
        }
    }
    // A change: the same line; undone and redone over the socket for comparison.
    let add = ["add-ns", SUB, "ram:4M", "--nsid", "2"];
    let (ok, by_api) = r.api(&add);
    assert!(ok, "{by_api}");
    assert!(r.socket(&["remove-ns", SUB, "2"]).0);
    let (ok, by_socket) = r.socket(&add);
    assert!(ok, "{by_socket}");
    assert_eq!(by_api, by_socket);
    // A refusal: the same message, a failed exit.
    let (a, b) = (r.api(&add), r.socket(&add));
    assert!(!a.0 && !b.0);
    assert_eq!(a.1, b.1);
    assert!(
        a.1.contains("refused: subsystem") && a.1.contains("already has namespace 2"),
        "{}",
        a.1
    );
    // A reader may look, not change.
    let (ok, out) = r.ctl_as("reader", &["status"]);
    assert!(ok && out.contains(SUB), "{out}");
    let (ok, out) = r.ctl_as("reader", &["remove-ns", SUB, "2"]);
    assert!(!ok && out.contains("monitoring is a reader"), "{out}");
    // A certificate of another CA never gets an answer.
    let (ok, out) = r.ctl_as("rogue", &["status"]);
    assert!(!ok && out.contains("management API"), "{out}");
    // top over the API.
    let (ok, out) = r.api(&["top", "--iterations", "1", "--interval", "0.5"]);
    assert!(ok && out.contains(SUB), "{out}");

    // Added through the API, then SIGKILL and a new start: still there, with the same
    // identity the host saw.
    let (ok, out) = r.api(&["add-ns", SUB, "ram:2M", "--nsid", "3"]);
    assert!(ok, "{out}");
    let ids = identity(port, 3);
    assert_ne!(ids.0, [0; 16], "no NGUID");
    assert!(ids.1.is_some(), "no UUID");
    stop(child, Signal::SIGKILL);
    let _ = std::fs::remove_file(&sock);
    let child = start(&cfg, &sock, SUB);
    let (ok, s) = r.api(&["status"]);
    assert!(ok, "{s}");
    for (nsid, path) in [(1, "ram:8M"), (2, "ram:4M"), (3, "ram:2M")] {
        assert!(
            s.contains(&format!("namespace {nsid} {path} ")),
            "namespace {nsid} lost:\n{s}"
        );
    }
    assert_eq!(
        identity(port, 3),
        ids,
        "identity changed across SIGKILL + start"
    );

    // Roles follow a reload: the reader made an admin may change.
    let mut c = nvmf_target::config::Config::load(&cfg).unwrap_or_else(|e| panic!("{e}"));
    if let Some(m) = c.management.as_mut() {
        m.readers.clear();
        m.admins.push("monitoring".into());
    }
    let yaml = c.to_yaml().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&cfg, yaml).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out) = r.api(&["reload"]);
    assert!(ok && out.contains("management API roles changed"), "{out}");
    let (ok, out) = r.ctl_as("reader", &["remove-ns", SUB, "3"]);
    assert!(ok, "{out}");
    stop(child, Signal::SIGTERM);
    let _ = std::fs::remove_file(&cfg);
    let _ = std::fs::remove_dir_all(&certs);
}

#[test]
fn an_api_change_that_cannot_be_saved_is_refused_and_changes_nothing() {
    let fs = Tmpfs::new(tmp("tmpfs"), 256 * 1024);
    let certs = tmp("certs-full");
    make_certs(&certs);
    let cfg = fs.path("target.yaml");
    let sock = tmp("full.sock");
    let r = Remote {
        sock: sock.clone(),
        api: free_port(),
        certs: certs.clone(),
    };
    std::fs::write(&cfg, config(free_port(), r.api, &certs)).unwrap_or_else(|e| panic!("{e}"));
    let child = start(&cfg, &sock, SUB);
    let before = std::fs::read(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let filler = fill(&fs.0);

    let (ok, out) = r.api(&["add-ns", SUB, "ram:1M", "--nsid", "2"]);
    assert!(
        !ok && out.contains("cannot save the change") && out.contains("nothing changed"),
        "{out}"
    );
    let (_, s) = r.api(&["status"]);
    assert!(!s.contains("namespace 2 "), "applied anyway:\n{s}");
    assert_eq!(
        std::fs::read(&cfg).unwrap_or_default(),
        before,
        "the file changed"
    );
    // Room again: the same change goes through and is saved.
    std::fs::remove_file(&filler).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out) = r.api(&["add-ns", SUB, "ram:1M", "--nsid", "2"]);
    assert!(ok, "{out}");
    let file = std::fs::read_to_string(&cfg).unwrap_or_default();
    assert!(file.contains("ram:1M"), "{file}");
    stop(child, nix::sys::signal::Signal::SIGTERM);
    let _ = std::fs::remove_dir_all(&certs);
}
