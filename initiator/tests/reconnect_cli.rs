//! `--ctrl-loss-tmo` and `--reconnect-delay` (issue 6, point 5): `perf` and `map` (the
//! binary) over NVMe/TCP on 127.0.0.1 survive a restart of the target on the same port.
//! The host reconnects with back-off, the I/O that was in flight is retried on the new
//! controller, and the data verifies; a target that stays away ends the run within
//! ctrl-loss-tmo instead of hanging.
//!
//! The target runs in this process (a file namespace, so the data outlives the
//! restart) on an ephemeral port; the host is the `nvmf-initiator` binary.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_target::config::Config;
use nvmf_target::target::Target;
use nvmf_target::tcp::TcpServer;

const NQN: &str = "nqn.2024-01.io.nvmf-rs:reconnect-cli";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000c1";
const HOSTID: &str = "00000000-0000-4000-8000-0000000000c1";
/// Size of the namespace's backing file.
const DISK_BYTES: u64 = 64 << 20;
/// How long the target is away during a restart.
const OUTAGE: Duration = Duration::from_millis(1500);
/// Longest a test waits for a host process.
const EXIT_TIMEOUT: Duration = Duration::from_secs(90);

/// A scratch file removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str, len: u64) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "nvmf-reconnect-cli-{}-{tag}.img",
            std::process::id()
        ));
        let f = std::fs::File::create(&p).unwrap_or_else(|e| panic!("{e}"));
        f.set_len(len).unwrap_or_else(|e| panic!("{e}"));
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An ephemeral port on 127.0.0.1 (bound and released).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("{e}"))
}

/// Our target serving `disk` as namespace 1 of [`NQN`] on 127.0.0.1:`port`.
fn start_target(port: u16, disk: &Path) -> (TcpServer, Arc<Target>) {
    let yaml = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, adrfam: ipv4, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [{NQN}] }}\n\
         subsystems:\n  - nqn: {NQN}\n    allow_any_host: true\n    namespaces: [{{ nsid: 1, device_path: \"{}\" }}]\n",
        disk.display()
    );
    let cfg = Config::from_yaml_str(&yaml, "<test>").unwrap_or_else(|e| panic!("{e}"));
    let target = Target::from_config(&cfg).unwrap_or_else(|e| panic!("{e}"));
    let server =
        TcpServer::start(target.clone(), &target.ports()).unwrap_or_else(|e| panic!("{e}"));
    (server, target)
}

/// Stops the target (as on SIGTERM: in-flight commands answered, connections
/// closed), waits [`OUTAGE`], and starts it again on the same port.
fn restart_target(
    server: TcpServer,
    target: Arc<Target>,
    port: u16,
    disk: &Path,
) -> (TcpServer, Arc<Target>) {
    server.shutdown();
    target.sync_backends();
    drop(target);
    std::thread::sleep(OUTAGE);
    start_target(port, disk)
}

/// `nvmf-initiator ARGS -t tcp -a 127.0.0.1 -s PORT -n NQN` with a fixed identity and
/// a 1 s reconnect delay.
fn host(sub: &str, port: u16, extra: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_nvmf-initiator"));
    cmd.args([sub, "-t", "tcp", "-a", "127.0.0.1", "-s"])
        .arg(port.to_string())
        .args(["-n", NQN, "-q", HOSTNQN, "-I", HOSTID])
        .args(["--reconnect-delay", "1", "--timeout", "5"])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

/// Waits for `child` to exit (killing it after [`EXIT_TIMEOUT`]).
fn wait(mut child: Child) -> Output {
    let deadline = Instant::now() + EXIT_TIMEOUT;
    while child.try_wait().unwrap_or_else(|e| panic!("{e}")).is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
            panic!(
                "host still running after {EXIT_TIMEOUT:?}: hung\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap_or_else(|e| panic!("{e}"))
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "perf output is not JSON ({e}):\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

#[test]
fn perf_survives_a_target_restart_with_verified_data() {
    let disk = Scratch::new("perf", DISK_BYTES);
    let port = free_port();
    let (server, target) = start_target(port, &disk.0);
    let child = host(
        "perf",
        port,
        &[
            "--rw",
            "randwrite",
            "--bs",
            "4k",
            "--iodepth",
            "8",
            "--numjobs",
            "2",
            "-i",
            "2",
            "--size",
            "16M",
            "--runtime",
            "6",
            "--verify",
            "--ctrl-loss-tmo",
            "30",
            "--output-format",
            "json",
        ],
    )
    .spawn()
    .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(1500));
    let (server, target) = restart_target(server, target, port, &disk.0);
    let out = wait(child);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "perf failed: {}\n{err}", out.status);
    assert!(err.contains("reconnected"), "no reconnect reported:\n{err}");
    let j = json(&out);
    let total = &j["total"];
    assert_eq!(total["error"], 0, "{j}");
    let verify = &j["verify"];
    assert_eq!(verify["failures"], 0, "{j}");
    assert!(verify["blocks_checked"].as_u64().unwrap_or(0) > 0, "{j}");
    server.shutdown();
    drop(target);
}

#[test]
fn perf_gives_up_after_ctrl_loss_tmo_without_hanging() {
    let disk = Scratch::new("gone", DISK_BYTES);
    let port = free_port();
    let (server, target) = start_target(port, &disk.0);
    let child = host(
        "perf",
        port,
        &[
            "--rw",
            "randread",
            "--bs",
            "4k",
            "--iodepth",
            "4",
            "--runtime",
            "30",
            "--ctrl-loss-tmo",
            "3",
            "--output-format",
            "json",
        ],
    )
    .spawn()
    .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(1000));
    let lost = Instant::now();
    server.shutdown();
    drop(target);
    let out = wait(child);
    let took = lost.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "perf without a target succeeded:\n{err}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(20),
        "gave up after {took:?}, ctrl-loss-tmo is 3 s:\n{err}"
    );
    let j = json(&out);
    assert!(j["total"]["error"].as_u64().unwrap_or(0) > 0, "{j}");
    assert!(j.to_string().contains("ctrl-loss-tmo"), "{j}");
}

#[test]
fn map_survives_a_target_restart_under_fio_verify() {
    let fio_ok = Command::new("fio")
        .arg("--enghelp")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("nbd"));
    assert!(
        fio_ok,
        "fio with the nbd engine is missing: run scripts/setup"
    );
    let disk = Scratch::new("map", DISK_BYTES);
    let port = free_port();
    let (server, target) = start_target(port, &disk.0);
    let mut map = host("map", port, &["--tcp", "0", "--ctrl-loss-tmo", "30"])
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = map
        .stdout
        .take()
        .unwrap_or_else(|| panic!("no stdout pipe"));
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    let uri = line
        .split(" at ")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no NBD URI in {line:?}"))
        .to_string();
    // 4096 random 4 KiB writes at ~1500/s (about 3 s), then every block read back
    // and checked; the target restarts while the writes run.
    let fio = Command::new("fio")
        .args([
            "--ioengine=nbd",
            "--verify_state_save=0",
            "--name=restart",
            "--rw=randwrite",
            "--bs=4k",
        ])
        .args(["--iodepth=8", "--size=16M", "--rate_iops=1500"])
        .args(["--verify=crc32c", "--do_verify=1", "--verify_fatal=1"])
        .arg(format!("--uri={uri}"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    std::thread::sleep(Duration::from_millis(800));
    let (server, target) = restart_target(server, target, port, &disk.0);
    let fio_out = wait(fio);
    assert!(
        fio_out.status.success(),
        "fio failed across the restart:\n{}\n{}",
        String::from_utf8_lossy(&fio_out.stdout),
        String::from_utf8_lossy(&fio_out.stderr)
    );
    let fio_text = String::from_utf8_lossy(&fio_out.stdout);
    assert!(fio_text.contains("err= 0"), "{fio_text}");
    // SAFETY: kill(2) on our own child's pid; no memory is involved.
    let r = unsafe { libc::kill(map.id() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(r, 0);
    let out = wait(map);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "map exited {}:\n{err}", out.status);
    assert!(err.contains("reconnecting"), "no reconnect logged:\n{err}");
    assert!(err.contains("(0 failed)"), "{err}");
    server.shutdown();
    drop(target);
}
