//! `nvmf-target ctl top` as a person runs it: plain-text snapshots when stdout is not a
//! terminal, and the full-screen view in tmux (send-keys, capture-pane) that quits on
//! q and on Ctrl-C and gives the terminal back. Also the binary's metrics endpoint.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:top";
/// Size of the tmux window (narrower than a row: the view cuts lines to fit).
const COLS: &str = "100";
const ROWS: &str = "50";
/// How long the view gets to draw or to exit.
const PATIENCE: Duration = Duration::from_secs(20);

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nvmf-top-{}-{name}", std::process::id()))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A running target with metrics on a free port; killed on drop.
struct Running {
    child: Child,
    sock: PathBuf,
    metrics: String,
}

impl Drop for Running {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn start(name: &str) -> Running {
    let cfg = tmp(&format!("{name}.yaml"));
    let sock = tmp(&format!("{name}.sock"));
    let port = free_port();
    std::fs::write(
        &cfg,
        format!(
            "metrics:\n  listen: 127.0.0.1:0\n\
             ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
             subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:8M\" }}\n"
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut child = bin()
        .arg("--config")
        .arg(&cfg)
        .arg("--ctl-socket")
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let out = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let mut metrics = String::new();
    let mut lines = BufReader::new(out).lines();
    for line in lines.by_ref() {
        let line = line.unwrap_or_else(|e| panic!("{e}"));
        if let Some(url) = line.strip_prefix("metrics at http://") {
            metrics = url.trim_end_matches("/metrics").to_string();
            break;
        }
    }
    // Keep reading, so a later line never meets a closed pipe.
    std::thread::spawn(move || lines.for_each(drop));
    assert!(!metrics.is_empty(), "the target printed no metrics address");
    let deadline = Instant::now() + PATIENCE;
    while !sock.exists() {
        assert!(Instant::now() < deadline, "no admin socket");
        std::thread::sleep(Duration::from_millis(50));
    }
    Running {
        child,
        sock,
        metrics,
    }
}

#[test]
fn plain_text_snapshots_when_not_a_terminal() {
    let t = start("plain");
    let out = bin()
        .args(["ctl", "--socket"])
        .arg(&t.sock)
        .args(["top", "--interval", "0.2", "--iterations", "2"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.matches("nvmf-target top: interval").count(),
        2,
        "{text}"
    );
    for want in [
        "POLL GROUP",
        "nvmf-tcp-pg0",
        "SUBSYSTEM",
        "NAMESPACE",
        "HOST",
        SUB,
    ] {
        assert!(text.contains(want), "{want} missing:\n{text}");
    }
    assert!(
        !text.contains('\x1b'),
        "no terminal escapes in plain text:\n{text}"
    );
    // The binary serves its metrics too.
    let mut s = std::net::TcpStream::connect(&t.metrics).unwrap_or_else(|e| panic!("{e}"));
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut resp = String::new();
    s.read_to_string(&mut resp)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("nvmf_poll_group_busy_seconds_total{group=\"nvmf-tcp-pg0\"}"));
}

/// A private tmux server (its own socket name), killed on drop.
struct Tmux(String);

impl Tmux {
    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.0])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("tmux (scripts/setup installs it): {e}"))
    }

    fn screen(&self) -> String {
        String::from_utf8_lossy(&self.run(&["capture-pane", "-p", "-t", "top"]).stdout).into_owned()
    }

    fn wait_screen(&self, what: &str, ok: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let s = self.screen();
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}; screen:\n{s}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.run(&["kill-server"]);
    }
}

/// Starts the view in tmux, waits for a full screen, presses `key`, and checks it
/// exited with status 0 and left the alternate screen.
fn top_in_tmux(sock: &Path, key: &str, name: &str) {
    let tmux = Tmux(format!("nvmf-top-{}-{name}", std::process::id()));
    // The shell prints the exit status after the view ends, and lingers so the pane
    // can be read.
    let cmd = format!(
        "{} ctl --socket {} top --interval 0.3; echo TOP-EXITED:$?; sleep 60",
        env!("CARGO_BIN_EXE_nvmf-target"),
        sock.display()
    );
    let out = tmux.run(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        COLS,
        "-y",
        ROWS,
        &cmd,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let screen = tmux.wait_screen("no view drawn", |s| {
        s.contains("POLL GROUP") && s.lines().any(|l| l.starts_with(SUB))
    });
    assert!(
        screen.contains("SUBSYSTEM") && screen.contains("(q quits)"),
        "{screen}"
    );
    let out = tmux.run(&["send-keys", "-t", "top", key]);
    assert!(out.status.success());
    let after = tmux.wait_screen("the view did not exit", |s| s.contains("TOP-EXITED:"));
    assert!(after.contains("TOP-EXITED:0"), "{after}");
    assert!(
        !after.contains("POLL GROUP"),
        "the alternate screen was not left:\n{after}"
    );
}

#[test]
fn full_screen_in_tmux_quits_on_q_and_ctrl_c() {
    let t = start("tmux");
    top_in_tmux(&t.sock, "q", "q");
    top_in_tmux(&t.sock, "C-c", "ctrl-c");
}
