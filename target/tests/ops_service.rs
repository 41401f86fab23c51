//! The `nvmf-target` binary as a service: `ctl status` over the admin socket, SIGHUP
//! re-reading the configuration (and refusing a bad one), `--log-format json`, and an
//! orderly exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

#[path = "support/service.rs"]
mod service;
use service::{bin, ctl, free_port, signal, wait_status};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:svc";

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvmf-svc-{}-{name}", std::process::id()))
}

fn config(port: u16, namespaces: &str) -> String {
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n{namespaces}"
    )
}

#[test]
fn ctl_sighup_json_logs_and_sigterm() {
    let port = free_port();
    let cfg = tmp("svc.yaml");
    let sock = tmp("svc.sock");
    let one = "      - { nsid: 1, device_path: \"ram:8M\" }\n";
    std::fs::write(&cfg, config(port, one)).unwrap_or_else(|e| panic!("{e}"));
    let mut child = bin()
        .arg("--config")
        .arg(&cfg)
        .arg("--ctl-socket")
        .arg(&sock)
        .arg("--log-format")
        .arg("json")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let stderr = child.stderr.take().unwrap_or_else(|| panic!("stderr"));
    let lines = std::thread::spawn(move || {
        BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .collect::<Vec<String>>()
    });

    let s = wait_status(&sock, "target up", |s| s.contains(SUB));
    assert!(s.contains(&format!("listening on 127.0.0.1:{port}")), "{s}");
    assert!(s.contains("namespace 1 ram:8M"), "{s}");

    // ctl: add a namespace, then a refusal with its reason.
    let (ok, out) = ctl(&sock, &["add-ns", SUB, "null:4M", "--nsid", "3"]);
    assert!(ok && out.contains("namespace 3 added"), "{out}");
    let (ok, out) = ctl(&sock, &["remove-ns", SUB, "7"]);
    assert!(!ok && out.contains("no namespace 7"), "{out}");

    // SIGHUP: the file (now with namespace 2) replaces the running config, so the
    // socket-added namespace 3 goes away.
    let two = format!("{one}      - {{ nsid: 2, device_path: \"ram:4M\" }}\n");
    std::fs::write(&cfg, config(port, &two)).unwrap_or_else(|e| panic!("{e}"));
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    let s = wait_status(&sock, "SIGHUP applied", |s| {
        s.contains("namespace 2 ram:4M") && !s.contains("namespace 3")
    });
    assert!(s.contains("namespace 1"), "{s}");

    // A bad file is refused whole; the running config stays.
    std::fs::write(&cfg, "ports: [ {").unwrap_or_else(|e| panic!("{e}"));
    signal(&child, nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(500));
    let (_, s) = ctl(&sock, &["status"]);
    assert!(s.contains("namespace 2 ram:4M"), "{s}");

    let (ok, json) = ctl(&sock, &["status", "--json"]);
    assert!(ok && json.contains("\"genctr\""), "{json}");

    signal(&child, nix::sys::signal::Signal::SIGTERM);
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "exit: {status}");
    let lines = lines.join().unwrap_or_else(|_| panic!("stderr reader"));
    assert!(!lines.is_empty());
    for l in &lines {
        assert!(
            l.starts_with('{') && l.ends_with('}'),
            "not a JSON log line: {l}"
        );
    }
    let all = lines.join("\n");
    assert!(all.contains("configuration re-read refused"), "{all}");
    assert!(all.contains("shutdown complete"), "{all}");
    assert!(!sock.exists(), "the admin socket is removed on exit");
    let _ = std::fs::remove_file(&cfg);
}

#[test]
fn service_files_match_the_binary() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = bin()
        .arg("check-config")
        .arg(format!("{root}/configs/etc-nvmf-target.yaml"))
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let unit = std::fs::read_to_string(format!("{root}/packaging/nvmf-target.service"))
        .unwrap_or_else(|e| panic!("{e}"));
    let help = bin()
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in ["--config", "--log-format", "--ctl-socket"] {
        assert!(unit.contains(flag) && help.contains(flag), "{flag}");
    }
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    assert!(unit.contains("check-config /etc/nvmf-target/config.yaml"));
    // ProtectSystem=full makes /etc read-only: live changes are saved in the config file.
    assert!(
        unit.contains("ReadWritePaths=/etc/nvmf-target"),
        "the service could not save live changes"
    );
}
