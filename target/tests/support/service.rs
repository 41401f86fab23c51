//! The `nvmf-target` binary driven as a service by the tests: `ctl` over its admin
//! socket, signals, waiting for `ctl status`.

use std::path::Path;
use std::process::{Child, Command};
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

/// Runs `nvmf-target ctl --socket SOCK ARGS...`: whether it succeeded, and its output.
pub fn ctl(sock: &Path, args: &[&str]) -> (bool, String) {
    let out = bin()
        .arg("ctl")
        .arg("--socket")
        .arg(sock)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
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
