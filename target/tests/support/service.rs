//! The `nvmf-target` binary driven as a service by the tests: started on a config
//! file, `ctl` over its admin socket, signals, waiting for `ctl status`, stopping.

#![allow(dead_code)] // each test file uses its own part

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The binary under test.
pub fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_nvmf-target"))
}

/// A TCP port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `cmd`: whether it succeeded, and its stdout then stderr.
pub fn output(cmd: &mut Command) -> (bool, String) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// Runs `nvmf-target ctl --socket SOCK ARGS...`: whether it succeeded, and its output.
pub fn ctl(sock: &Path, args: &[&str]) -> (bool, String) {
    output(bin().arg("ctl").arg("--socket").arg(sock).args(args))
}

/// Starts the target on `cfg` with its socket at `sock`; returns once `ctl status`
/// shows `ready` (a subsystem NQN of the config).
pub fn start(cfg: &Path, sock: &Path, ready: &str) -> Child {
    let child = bin()
        .arg("--config")
        .arg(cfg)
        .arg("--ctl-socket")
        .arg(sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    wait_status(sock, "the target answers", |s| s.contains(ready));
    child
}

/// Sends `sig` and waits (20 s at most) for the process to exit.
pub fn stop(mut child: Child, sig: nix::sys::signal::Signal) {
    signal(&child, sig);
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().ok().flatten().is_none() {
        assert!(
            Instant::now() < deadline,
            "the target did not exit on {sig}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn signal(child: &Child, sig: nix::sys::signal::Signal) {
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, sig).unwrap_or_else(|e| panic!("kill: {e}"));
}

/// Waits (20 s at most) until `ctl status` output satisfies `ok`.
pub fn wait_status(sock: &Path, what: &str, ok: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, s) = ctl(sock, &["status"]);
        if ok(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: last status:\n{s}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
