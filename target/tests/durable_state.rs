//! Durable running state (issue 25, item 2) with the `nvmf-target` binary: a
//! namespace added with `ctl` is in the configuration file before `ctl` returns, and is
//! there again after `ctl reload`, SIGHUP, SIGTERM + start and SIGKILL + start; `ctl
//! export` prints a configuration that starts the same target; a hand edit made
//! meanwhile is never undone by a live change (the change is refused until a reload).

use std::path::PathBuf;
use std::time::Duration;

#[path = "support/service.rs"]
mod service;
use service::{ctl, free_port, signal, start, stop};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:durable";

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvmf-durable-{}-{name}", std::process::id()))
}

fn config(port: u16, namespaces: &str) -> String {
    format!(
        "# the operator's file\n\
         ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n{namespaces}"
    )
}

fn has_ns(status: &str, nsid: u32, path: &str) -> bool {
    status.contains(&format!("namespace {nsid} {path} "))
}

#[test]
fn a_live_namespace_survives_reload_sighup_sigterm_and_sigkill() {
    use nix::sys::signal::Signal;
    let port = free_port();
    let cfg = tmp("target.yaml");
    let sock = tmp("target.sock");
    let img = tmp("ns2.img");
    std::fs::write(&img, vec![0u8; 4 << 20]).unwrap_or_else(|e| panic!("{e}"));
    let img_s = img.display().to_string();
    std::fs::write(
        &cfg,
        config(port, "      - { nsid: 1, device_path: \"ram:8M\" }\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let child = start(&cfg, &sock, SUB);

    // Added live: in the file when ctl returns.
    let (ok, out) = ctl(&sock, &["add-ns", SUB, &img_s, "--nsid", "2"]);
    assert!(ok, "{out}");
    let file = std::fs::read_to_string(&cfg).unwrap_or_else(|e| panic!("{e}"));
    assert!(file.contains(&img_s), "not in the file:\n{file}");
    assert!(
        file.starts_with("# nvmf-target configuration."),
        "header:\n{file}"
    );

    // ctl export prints what starts the same target: the file's own content.
    let (ok, exported) = ctl(&sock, &["export"]);
    assert!(ok, "{exported}");
    assert_eq!(exported, file, "export and the file differ");

    // Reload and SIGHUP keep it.
    let (ok, out) = ctl(&sock, &["reload"]);
    assert!(ok && out.contains("no change"), "{out}");
    assert!(has_ns(&ctl(&sock, &["status"]).1, 2, &img_s));
    signal(&child, Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    assert!(has_ns(&ctl(&sock, &["status"]).1, 2, &img_s));

    // SIGTERM + start, then SIGKILL + start.
    stop(child, Signal::SIGTERM);
    let child = start(&cfg, &sock, SUB);
    assert!(has_ns(&ctl(&sock, &["status"]).1, 2, &img_s));
    stop(child, Signal::SIGKILL);
    let _ = std::fs::remove_file(&sock);
    let child = start(&cfg, &sock, SUB);
    let s = ctl(&sock, &["status"]).1;
    assert!(has_ns(&s, 1, "ram:8M") && has_ns(&s, 2, &img_s), "{s}");

    // A hand edit: the next live change is refused (the edit is not lost), a reload
    // applies the edit, then the change goes through and both are in the file.
    let edited = config(
        port,
        &format!(
            "      - {{ nsid: 1, device_path: \"ram:8M\" }}\n      - {{ nsid: 2, device_path: \"{img_s}\" }}\n      - {{ nsid: 3, device_path: \"ram:4M\" }}\n"
        ),
    );
    std::fs::write(&cfg, &edited).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out) = ctl(&sock, &["add-ns", SUB, "ram:2M", "--nsid", "4"]);
    assert!(!ok && out.contains("was edited since"), "{out}");
    assert_eq!(
        std::fs::read_to_string(&cfg).unwrap_or_default(),
        edited,
        "the hand edit was overwritten"
    );
    assert!(!has_ns(&ctl(&sock, &["status"]).1, 4, "ram:2M"));
    let (ok, out) = ctl(&sock, &["reload"]);
    assert!(ok, "{out}");
    let (ok, out) = ctl(&sock, &["add-ns", SUB, "ram:2M", "--nsid", "4"]);
    assert!(ok, "{out}");
    let s = ctl(&sock, &["status"]).1;
    assert!(has_ns(&s, 3, "ram:4M") && has_ns(&s, 4, "ram:2M"), "{s}");
    stop(child, Signal::SIGKILL);
    let _ = std::fs::remove_file(&sock);
    let child = start(&cfg, &sock, SUB);
    let s = ctl(&sock, &["status"]).1;
    for (nsid, path) in [
        (1, "ram:8M"),
        (2, img_s.as_str()),
        (3, "ram:4M"),
        (4, "ram:2M"),
    ] {
        assert!(has_ns(&s, nsid, path), "namespace {nsid} lost:\n{s}");
    }
    stop(child, Signal::SIGTERM);
    for p in [&cfg, &img] {
        let _ = std::fs::remove_file(p);
    }
}
