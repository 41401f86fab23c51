//! The `nvmf-target` binary: config errors and bad backing paths exit non-zero with a
//! message naming the file, line and key, or the path.

use std::process::Command;

fn target() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
}

fn tmp(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("nvmf-cli-{}-{name}", std::process::id()));
    std::fs::write(&p, text).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    p
}

#[test]
fn config_error_names_file_line_and_key() {
    let p = tmp(
        "bad.yaml",
        "ports:\n  - portid: 1\n    trtype: loopback\nsubsystems:\n  - nqn: nqn.2024-01.io.x:a\n    allow_any_host: true\n    namespaces:\n      - nsid: one\n        device_path: ram:1M\n",
    );
    let out = target().arg("--config").arg(&p).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:8:", p.display())), "{err}");
    assert!(err.contains("subsystems[0].namespaces[0].nsid"), "{err}");
    let out = target().arg("check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn check_config_accepts_the_examples() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../configs");
    for f in ["loopback.yaml", "file.yaml", "rdma.yaml", "tcp.yaml"] {
        let out = target()
            .arg("check-config")
            .arg(format!("{dir}/{f}"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn missing_backing_path_is_refused_with_its_name() {
    let out = target()
        .args([
            "--transport",
            "loopback",
            "--namespace",
            "/nonexistent/disk.img",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/nonexistent/disk.img"), "{err}");
}

#[test]
fn too_small_backing_file_is_refused() {
    let p = tmp("small.img", "abc");
    let out = target()
        .args(["--transport", "loopback", "--namespace"])
        .arg(&p)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&p.display().to_string()), "{err}");
    std::fs::remove_file(&p).unwrap();
}

#[test]
fn prints_effective_config() {
    let out = target()
        .args([
            "--transport",
            "loopback",
            "--nqn",
            "nqn.2024-01.io.x:b",
            "--namespace",
            "null:1G",
            "--print-config",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let y = String::from_utf8_lossy(&out.stdout);
    assert!(
        y.contains("nqn.2024-01.io.x:b") && y.contains("null:1G"),
        "{y}"
    );
}

#[test]
fn rdma_port_without_an_rdma_device_is_refused_with_the_reason() {
    // 192.0.2.1 (TEST-NET-1) is no local address anywhere: without an RDMA stack the
    // rdma_cm device is missing, with one the address belongs to no RDMA device.
    let out = target()
        .args([
            "--transport",
            "rdma",
            "--listen",
            "192.0.2.1:4420",
            "--namespace",
            "null:1M",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("RDMA port 1 (192.0.2.1:4420)"), "{err}");
    assert!(err.contains("no RDMA device"), "{err}");
}

#[test]
fn rdma_without_listen_address_is_refused() {
    let out = target()
        .args(["--transport", "rdma", "--namespace", "null:1M"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--transport rdma needs --listen"), "{err}");
}
