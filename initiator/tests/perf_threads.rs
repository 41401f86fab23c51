//! `perf --numjobs` beyond the cores (issue 15, deliverable 4): the `nvmf-initiator`
//! binary multiplexes its jobs onto a bounded set of polling threads. Against targets
//! whose I/O queues hold 128 entries (an in-process loopback target from `--config`,
//! and an in-process NVMe/TCP target on 127.0.0.1), 8 jobs of iodepth 256 run with
//! every job measured and no error; `--cpus` pins, puts 4 verifying jobs on one thread,
//! and a bad list is refused with a clear message.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use nix::sched::{sched_getaffinity, CpuSet};
use nix::unistd::Pid;
use serde_json::Value;

use nvmf_target::config::{Config, TrType};

const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000e2";
const HOSTID: &str = "00000000-0000-4000-8000-0000000000e2";
const NQN: &str = "nqn.2024-01.io.nvmf-rs:threads";
/// Entries per I/O queue on the targets here: below the jobs' iodepth.
const TARGET_QUEUE: u32 = 128;

/// A target config: I/O queues of [`TARGET_QUEUE`] entries, a null and a RAM namespace.
fn yaml() -> String {
    format!(
        "transport:\n  max_queue_size: {TARGET_QUEUE}\n  max_io_queues: 16\n\
         ports:\n  - {{ portid: 1, trtype: loopback, subsystems: [{NQN}] }}\n\
         subsystems:\n  - nqn: {NQN}\n    allow_any_host: true\n    namespaces:\n      \
         - {{ nsid: 1, device_path: \"null:1G\" }}\n      \
         - {{ nsid: 2, device_path: \"ram:64M\" }}\n"
    )
}

/// A file removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(tag: &str, text: &str) -> TempFile {
        let p =
            std::env::temp_dir().join(format!("nvmf-perf-threads-{}-{tag}", std::process::id()));
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn perf(conn: &[&str], extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvmf-initiator"))
        .arg("perf")
        .args(conn)
        .args(["-q", HOSTNQN, "-I", HOSTID])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn json_of(out: &Output) -> Value {
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{err}", out.status);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// CPUs this process may run on.
fn allowed() -> Vec<usize> {
    let set = sched_getaffinity(Pid::from_raw(0)).unwrap_or_else(|e| panic!("{e}"));
    (0..CpuSet::count())
        .filter(|&c| set.is_set(c).unwrap_or(false))
        .collect()
}

/// Every job ran, was measured and had no error; the total adds up.
fn check_jobs(j: &Value, numjobs: usize) {
    let jobs = j["jobs"].as_array().unwrap_or_else(|| panic!("{j}"));
    assert_eq!(jobs.len(), numjobs, "{j}");
    for (i, job) in jobs.iter().enumerate() {
        assert_eq!(job["jobname"], format!("job{i}"), "{job}");
        assert_eq!(job["error"], 0, "{job}");
        assert!(
            job["read"]["total_ios"].as_u64().unwrap_or(0)
                + job["write"]["total_ios"].as_u64().unwrap_or(0)
                > 0,
            "job {i} did nothing: {job}"
        );
    }
    assert_eq!(j["total"]["error"], 0, "{j}");
}

fn eight_jobs_deep(conn: &[&str]) {
    let out = perf(
        conn,
        &[
            "--numjobs=8",
            "--iodepth=256",
            "--runtime=1s",
            "--nsid=1",
            "--output-format=json",
        ],
    );
    let j = json_of(&out);
    check_jobs(&j, 8);
    assert_eq!(j["options"]["iodepth"], 256, "{j}");
    let threads = allowed().len().clamp(1, 8);
    assert_eq!(j["options"]["threads"], threads, "{j}");
    assert_eq!(
        j["options"]["cpus"],
        Value::Null,
        "unpinned by default: {j}"
    );
}

#[test]
fn eight_jobs_of_iodepth_256_on_loopback_queues_of_128() {
    let cfg = TempFile::new("loop.yaml", &yaml());
    let path = cfg.0.display().to_string();
    eight_jobs_deep(&["-t", "loopback", "--config", &path]);
}

#[test]
fn eight_jobs_of_iodepth_256_over_tcp_queues_of_128() {
    let mut cfg = Config::from_yaml_str(&yaml(), "<test>").unwrap_or_else(|e| panic!("{e}"));
    for p in &mut cfg.ports {
        p.trtype = TrType::Tcp;
        p.traddr = "127.0.0.1".into();
        // Any free port (the config validator wants a real number, so set it after).
        p.trsvcid = "0".into();
    }
    let target =
        nvmf_target::target::Target::from_config(&cfg).unwrap_or_else(|e| panic!("target: {e}"));
    let server = nvmf_target::tcp::TcpServer::start_with(
        target.clone(),
        &target.ports(),
        nvmf_target::tcp::TcpOptions::default(),
    )
    .unwrap_or_else(|e| panic!("tcp server: {e}"));
    let port = server
        .local_addrs()
        .first()
        .map(|a| a.port().to_string())
        .unwrap_or_else(|| panic!("no listening port"));
    eight_jobs_deep(&["-t", "tcp", "-a", "127.0.0.1", "-s", &port, "-n", NQN]);
}

#[test]
fn four_verifying_jobs_on_one_pinned_thread() {
    let cfg = TempFile::new("pin.yaml", &yaml());
    let path = cfg.0.display().to_string();
    let cpu = allowed()
        .first()
        .copied()
        .unwrap_or_else(|| panic!("no CPU"))
        .to_string();
    let out = perf(
        &["-t", "loopback", "--config", &path],
        &[
            "--cpus",
            &cpu,
            "--numjobs=4",
            "--iodepth=16",
            "--rw=randrw",
            "--verify=crc32c",
            "--size=32M",
            "--runtime=1s",
            "--nsid=2",
            "--output-format=json",
        ],
    );
    let j = json_of(&out);
    check_jobs(&j, 4);
    assert_eq!(j["options"]["threads"], 1, "{j}");
    assert_eq!(j["options"]["cpus"], cpu.as_str(), "{j}");
    assert_eq!(j["verify"]["failures"], 0, "{j}");
    for job in j["jobs"].as_array().into_iter().flatten() {
        assert!(
            job["verify"]["blocks_checked"].as_u64().unwrap_or(0) > 0,
            "{job}"
        );
    }
}

#[test]
fn bad_cpu_lists_are_refused_with_the_reason() {
    let cfg = TempFile::new("bad.yaml", &yaml());
    let path = cfg.0.display().to_string();
    let conn = ["-t", "loopback", "--config", path.as_str()];
    for (list, why) in [
        ("9999", "CPU 9999 is beyond the largest CPU number"),
        ("a-b", "\"a-b\" is not a CPU number"),
        ("", "empty"),
        ("2-1", "runs backwards"),
    ] {
        let out = perf(&conn, &["--cpus", list, "--runtime=100ms"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "--cpus {list:?} was taken");
        assert!(err.contains("--cpus"), "--cpus {list:?}: {err}");
        assert!(err.contains(why), "--cpus {list:?}: {err}");
    }
    // A CPU the process may not run on is only known at run time.
    let last = CpuSet::count() - 1;
    if !allowed().contains(&last) {
        let out = perf(&conn, &["--cpus", &last.to_string(), "--runtime=100ms"]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains(&format!("CPU {last} is not one this process may run on")),
            "{err}"
        );
    }
}
