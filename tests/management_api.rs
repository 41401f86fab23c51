//! The management API (issue 25, items 3 and 4) through a client nobody here wrote:
//! Python's grpcio with stubs generated from `target/proto` at test time
//! (`tests/management/api_client.py`), against a target in this process with its
//! configuration file, over mutual TLS with certificates made by openssl
//! (`tests/management/make-certs`). The script checks every operation, the roles, the
//! refusals (no certificate, an unknown CA, an expired certificate, a reader changing,
//! malformed fields, missing and duplicate things, a path that cannot be opened),
//! namespace visibility per host (AddNamespaceHost / RemoveNamespaceHost), two
//! clients changing one subsystem at once, and the event stream seeing a host
//! connect, which this test makes when the script asks (HOST-CONNECT on its stdout).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use nvmf_common::types::Nqn;
use nvmf_target::config::Config;
use nvmf_target::management::ManagementServer;
use nvmf_tests::ops_support::{connect_as, free_port, host, start_live, tmp_path};

const SUB: &str = "nqn.2026-11.io.example:managed";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// Runs `tests/management/make-certs` into a new directory.
pub fn make_certs(name: &str) -> PathBuf {
    let dir = tmp_path(name);
    let _ = std::fs::remove_dir_all(&dir);
    let ok = Command::new("bash")
        .arg(repo().join("tests/management/make-certs"))
        .arg(&dir)
        .status()
        .unwrap_or_else(|e| panic!("make-certs: {e}"));
    assert!(ok.success(), "make-certs failed (openssl: scripts/setup)");
    dir
}

fn yaml(port: u16, certs: &Path) -> String {
    let c = |f: &str| certs.join(f).display().to_string();
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:8M\" }}\n\
         management:\n  listen: 127.0.0.1:0\n  ca: {}\n  cert: {}\n  key: {}\n  admins: [orchestrator]\n  readers: [monitoring]\n",
        c("ca.pem"),
        c("server.pem"),
        c("server.key")
    )
}

#[test]
fn python_grpcio_client_drives_every_operation_and_is_refused_where_it_must_be() {
    let certs = make_certs("mgmt-certs");
    let work = tmp_path("mgmt-work");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).unwrap_or_else(|e| panic!("{e}"));
    let config = work.join("target.yaml");
    let text = yaml(free_port(), &certs);
    std::fs::write(&config, &text).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&text, Some(config.clone()));
    let cfg = Config::from_yaml_str(&text, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let mcfg = cfg
        .management
        .unwrap_or_else(|| panic!("no management section"));
    let server =
        ManagementServer::start(t.live.clone(), &mcfg).unwrap_or_else(|e| panic!("start: {e}"));
    let (host_nqn, _) = host(7);

    let mut child = Command::new("python3")
        .arg(repo().join("tests/management/api_client.py"))
        .env("MGMT_ADDR", server.local_addr().to_string())
        .env("CERTS", &certs)
        .env("PROTO_DIR", repo().join("target/proto"))
        .env("CONFIG", &config)
        .env("SUB", SUB)
        .env("HOST_NQN", host_nqn.to_string())
        .env("PORT2", free_port().to_string())
        .env("WORK", &work)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 (scripts/setup installs grpcio): {e}"));
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("stdin"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let mut lines = Vec::new();
    let mut host_ctrl = None;
    for line in BufReader::new(stdout).lines() {
        let line = line.unwrap_or_else(|e| panic!("{e}"));
        println!("{line}");
        if line == "HOST-CONNECT" {
            let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
            let c = connect_as(&t.fabric(1), 7, &sub, 1, 0)
                .unwrap_or_else(|e| panic!("host connect: {e}"));
            host_ctrl = Some(c);
            writeln!(stdin, "connected").unwrap_or_else(|e| panic!("{e}"));
            stdin.flush().unwrap_or_else(|e| panic!("{e}"));
        }
        lines.push(line);
    }
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    if let Some(c) = host_ctrl {
        c.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    }
    let failed: Vec<&String> = lines.iter().filter(|l| l.starts_with("FAIL")).collect();
    assert!(failed.is_empty(), "failed checks: {failed:#?}");
    let summary = lines.last().cloned().unwrap_or_default();
    assert!(
        status.success() && summary == "SUMMARY passed=15 failed=0",
        "the script: {status}, last line {summary:?}"
    );
    drop(server);
    let _ = std::fs::remove_dir_all(&work);
    let _ = std::fs::remove_dir_all(&certs);
}
