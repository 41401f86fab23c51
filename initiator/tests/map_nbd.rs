//! `nvmf-initiator map` (the binary) against real NBD clients: libnbd's `nbdinfo`,
//! `qemu-img`, and fio's nbd engine with `--verify`; and a SIGTERM that drains.
//!
//! The tools come from scripts/setup (fio, libnbd-bin, qemu-utils). A missing tool
//! fails the test with that message: it is never skipped silently.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Longest wait for the server's ready line.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest wait for the server to exit after SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Panics unless `tool` runs (it is installed by scripts/setup).
fn require(tool: &str) {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "{tool} is missing: run scripts/setup (installs fio, libnbd-bin, qemu-utils)"
    );
}

/// A running `nvmf-initiator map`.
struct Map {
    child: Child,
    uri: String,
    socket: Option<PathBuf>,
}

impl Map {
    /// Starts `map -t loopback --namespace SPEC` on a fresh Unix socket (or TCP port 0).
    fn start(ns: &str, tcp: bool, extra: &[&str]) -> Map {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let socket = (!tcp).then(|| {
            std::env::temp_dir().join(format!("nvmf-map-it-{}-{n}.sock", std::process::id()))
        });
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_nvmf-initiator"));
        cmd.args(["map", "-t", "loopback", "--namespace", ns, "-q"])
            .arg("nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-00000000000a")
            .args(["-I", "00000000-0000-4000-8000-00000000000a"]);
        match &socket {
            Some(p) => cmd.arg("--socket").arg(p),
            None => cmd.args(["--tcp", "0"]),
        };
        cmd.args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("spawn nvmf-initiator: {e}"));
        let out = child
            .stdout
            .take()
            .unwrap_or_else(|| panic!("no stdout pipe"));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = BufReader::new(out).read_line(&mut line);
            let _ = tx.send(line);
        });
        let line = rx
            .recv_timeout(START_TIMEOUT)
            .unwrap_or_else(|_| panic!("map did not start in {START_TIMEOUT:?}"));
        let uri = line
            .split(" at ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("no URI in the ready line {line:?}"))
            .to_string();
        Map { child, uri, socket }
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is involved.
        let r = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(r, 0, "kill {sig}");
    }

    /// Sends SIGTERM and returns the exit output once the server stopped.
    fn stop(mut self) -> Output {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            match self.child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => panic!("map did not stop within {STOP_TIMEOUT:?} of SIGTERM"),
            }
        }
        let child = std::mem::replace(
            &mut self.child,
            Command::new("true")
                .spawn()
                .unwrap_or_else(|e| panic!("spawn true: {e}")),
        );
        child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("wait: {e}"))
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn assert_clean_stop(out: &Output, socket: Option<&Path>) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "map exited {}: {err}", out.status);
    assert!(err.contains("SIGTERM: draining"), "{err}");
    assert!(err.contains("stopped:"), "{err}");
    if let Some(p) = socket {
        assert!(!p.exists(), "socket {} left behind", p.display());
    }
}

#[test]
fn nbdinfo_sees_the_export() {
    require("nbdinfo");
    let m = Map::start("ram:64M", false, &["--export-name", "disk"]);
    let out = run(Command::new("nbdinfo").arg("--json").arg(&m.uri));
    let j = String::from_utf8_lossy(&out.stdout);
    for want in [
        "\"export-name\": \"disk\"",
        "\"structured\": true",
        "\"export-size\": 67108864",
        "\"can_multi_conn\": true",
        "\"can_trim\": true",
        "\"can_zero\": true",
        "\"can_fua\": true",
        "\"can_flush\": true",
        "\"block_size_minimum\": 512",
    ] {
        assert!(j.contains(want), "{want} not in {j}");
    }
    let out = run(Command::new("nbdinfo").arg("--list").arg(&m.uri));
    assert!(String::from_utf8_lossy(&out.stdout).contains("export=\"disk\""));
    let socket = m.socket.clone();
    assert_clean_stop(&m.stop(), socket.as_deref());
}

#[test]
fn qemu_img_writes_and_compares_over_tcp() {
    require("qemu-img");
    let m = Map::start("ram:16M", true, &[]);
    assert!(m.uri.starts_with("nbd://127.0.0.1:"), "{}", m.uri);
    let src = std::env::temp_dir().join(format!("nvmf-map-it-{}.img", std::process::id()));
    let data: Vec<u8> = (0..4u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&src, &data).unwrap();
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(&m.uri));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(&m.uri));
    let back = src.with_extension("back");
    run(Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "raw"])
        .arg(&m.uri)
        .arg(&back));
    let b = std::fs::read(&back).unwrap();
    assert_eq!(b.len(), 16 << 20);
    assert_eq!(&b[..data.len()], &data[..]);
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&back);
    assert_clean_stop(&m.stop(), None);
}

fn fio(uri: &str, args: &[&str]) -> String {
    let out = run(Command::new("fio")
        .args([
            "--ioengine=nbd",
            "--output-format=terse",
            "--terse-version=3",
            // No verify state files left in the working directory.
            "--verify_state_save=0",
        ])
        .arg(format!("--uri={uri}"))
        .args(args));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn fio_nbd_engine_verifies_through_the_map() {
    require("fio");
    let engines = run(Command::new("fio").arg("--enghelp"));
    assert!(
        String::from_utf8_lossy(&engines.stdout).contains("nbd"),
        "this fio has no nbd engine"
    );
    let m = Map::start("ram:64M", false, &[]);
    // 4 KiB random writes at QD 16, then read back and checked.
    fio(
        &m.uri,
        &[
            "--name=rand4k",
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=16",
            "--size=16M",
            "--verify=crc32c",
            "--do_verify=1",
        ],
    );
    // Two jobs (two NBD connections: multi-conn) on disjoint halves, 256 KiB writes
    // that the server splits into several NVMe commands, with FUA-free flushes.
    fio(
        &m.uri,
        &[
            "--name=seq256k",
            "--rw=write",
            "--bs=256k",
            "--iodepth=8",
            "--numjobs=2",
            "--size=16M",
            "--offset_increment=16M",
            "--fsync=4",
            "--verify=md5",
            "--do_verify=1",
        ],
    );
    // Mixed sizes.
    fio(
        &m.uri,
        &[
            "--name=mixed",
            "--rw=randwrite",
            "--bsrange=4k-64k",
            "--iodepth=8",
            "--size=8M",
            "--offset=40M",
            "--verify=crc32c",
            "--do_verify=1",
        ],
    );
    // Trims (NBD_CMD_TRIM → Dataset Management, Deallocate).
    fio(
        &m.uri,
        &[
            "--name=trim",
            "--rw=randtrim",
            "--bs=64k",
            "--iodepth=8",
            "--size=8M",
            "--offset=48M",
        ],
    );
    let socket = m.socket.clone();
    let out = m.stop();
    assert_clean_stop(&out, socket.as_deref());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(0 failed)"), "{err}");
}

#[test]
fn sigterm_drains_while_fio_runs() {
    require("fio");
    let m = Map::start("null:1G", false, &[]);
    let mut load = Command::new("fio")
        .args(["--ioengine=nbd", "--name=load", "--rw=randread", "--bs=4k"])
        .args(["--iodepth=32", "--time_based", "--runtime=30", "--size=1G"])
        .arg(format!("--uri={}", m.uri))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let socket = m.socket.clone();
    let t0 = Instant::now();
    let out = m.stop();
    assert!(
        t0.elapsed() < Duration::from_secs(15),
        "drain took {:?}",
        t0.elapsed()
    );
    assert_clean_stop(&out, socket.as_deref());
    // fio sees its connection close; it must end on its own, not hang.
    let deadline = Instant::now() + STOP_TIMEOUT;
    while load.try_wait().unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "fio hung after the server stopped"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
