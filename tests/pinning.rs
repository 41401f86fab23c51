//! Poll groups pinned with `transport.cpus` (issue 15): each group thread runs only on
//! its CPU and still serves I/O. Its own test binary, so no other test's poll groups
//! (same thread names, unpinned) share the process.

use nvmf_common::cpus::{allowed_cpus, CpuList};
use nvmf_tests::{connect_to, start_tcp, write_read_verify};

/// `Cpus_allowed_list` of every thread of this process whose name starts with `prefix`.
fn affinity_of_threads(prefix: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task").expect("/proc/self/task") {
        let dir = entry.expect("task entry").path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        let comm = comm.trim().to_string();
        if !comm.starts_with(prefix) {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|v| v.trim().to_string())
            .unwrap_or_default();
        out.push((comm, list));
    }
    out.sort();
    out
}

#[test]
fn poll_groups_run_on_the_configured_cpus_and_serve_io() {
    let allowed = allowed_cpus().expect("sched_getaffinity");
    let last = *allowed.last().expect("at least one CPU");
    let mut cfg = nvmf_tests::config(&["ram:8M"]);
    cfg.transport.poll_groups = 2;
    cfg.transport.cpus = Some(last.to_string().parse::<CpuList>().expect("cpu list"));
    let env = start_tcp(&cfg, Default::default());
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 2, 32);
    write_read_verify(&mut ctrl, 4096, 8, 64);
    let threads = affinity_of_threads("nvmf-tcp-pg");
    assert_eq!(threads.len(), 2, "two poll group threads: {threads:?}");
    for (name, list) in &threads {
        assert_eq!(list, &last.to_string(), "{name} is pinned to CPU {last}");
    }
    ctrl.shutdown().expect("shutdown");
}
