//! A quick local IOPS figure for the NVMe/TCP controller: reads or writes from the
//! scripted host ([`nvmf_tests::raw_tcp`]: one thread, blocking reads, or busy polling
//! when the target polls; the new commands of a batch of completions leave in one
//! `write`) against a `TcpServer` on 127.0.0.1 with a RAM namespace.
//!
//!     cargo bench -p nvmf-tests --bench tcp_iops                  # every point, 2 s each
//!     NVMF_TCP_IOPS="poll:32:4096[:write]" cargo bench -p nvmf-tests --bench tcp_iops
//!     BENCH_SECS=5 cargo bench -p nvmf-tests --bench tcp_iops
//!
//! Prints IOPS, bandwidth and mean latency per point, and what each I/O cost the
//! target: CPU time of its poll-group threads, socket reads and writes, sleeps.

use std::time::Instant;

use nvmf_common::transport::tcp::HostConfig;
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_initiator::transport::tcp::TcpOptions as HostOptions;
use nvmf_target::config::PollMode;
use nvmf_target::tcp::TcpOptions;
use nvmf_tests::raw_tcp::{pair_with, read_sqe, status_of, with_cid, write_sqe, RawTcp, Rx, BS};
use nvmf_tests::{config, start_tcp_with};

/// CPU time (user + system) of this process's NVMe/TCP poll-group threads
/// (`nvmf-tcp-pg*`), in clock ticks.
fn group_cpu_ticks() -> u64 {
    let mut total = 0;
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    for e in tasks.flatten() {
        let comm = std::fs::read_to_string(e.path().join("comm")).unwrap_or_default();
        if comm.trim().starts_with("nvmf-tcp-pg") {
            let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
            let after = stat.rsplit_once(')').map(|x| x.1).unwrap_or("");
            let f: Vec<&str> = after.split_whitespace().collect();
            // Fields 14 and 15 (utime, stime) are at 11 and 12 after the comm.
            let field = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            total += field(11) + field(12);
        }
    }
    total
}

fn mode_of(s: &str) -> PollMode {
    match s {
        "poll" => PollMode::Poll,
        "interrupt" => PollMode::Interrupt,
        _ => PollMode::Adaptive,
    }
}

/// One point: `qd` commands of `bs` bytes in flight for `secs`.
fn point(mode: PollMode, qd: usize, bs: usize, write: bool, secs: f64) {
    let mut cfg = config(&["ram:16M"]);
    cfg.transport.poll_mode = mode;
    cfg.transport.poll_groups = 1;
    let env = start_tcp_with(&cfg, HostOptions::default(), TcpOptions::default());
    let (_a, mut io, _) = pair_with(env.addr, &env.nqn, HostConfig::default(), 127, 0);
    // The host busy-polls its socket too when the target does.
    if mode == PollMode::Poll {
        io.set_spin();
    }
    let nlb = (bs as u32) / BS;
    let payload = nvmf_tests::pattern(1, 0, bs);
    // Writes up to the in-capsule size go in the capsule, larger ones by R2T.
    let icd = write && bs <= 8192;
    let mut out = Vec::new();
    let issue = |io: &mut RawTcp, out: &mut Vec<u8>, n: usize| {
        for _ in 0..n {
            let cid = io.next_cid();
            let slba = u64::from(cid % 64) * u64::from(nlb);
            let (sqe, data): ([u8; 64], &[u8]) = match (write, icd) {
                (false, _) => (
                    read_sqe(slba, nlb, SglDescriptor::transport(bs as u32)),
                    &[],
                ),
                (true, true) => (
                    write_sqe(slba, nlb, SglDescriptor::in_capsule(0, bs as u32)),
                    &payload,
                ),
                (true, false) => (
                    write_sqe(slba, nlb, SglDescriptor::transport(bs as u32)),
                    &[],
                ),
            };
            io.writer()
                .capsule_cmd(&with_cid(sqe, cid), data, out)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        if !out.is_empty() {
            io.send(out);
        }
        out.clear();
    };
    let c0 = env.counters();
    let cpu0 = group_cpu_ticks();
    let t0 = Instant::now();
    let mut done = 0u64;
    issue(&mut io, &mut out, qd);
    while t0.elapsed().as_secs_f64() < secs {
        let mut first = Some(io.recv());
        let mut finished = 0;
        while let Some(rx) = first.take().or_else(|| io.try_buffered()) {
            match rx {
                Rx::C2H { .. } => {}
                Rx::R2T {
                    cid,
                    ttag,
                    offset,
                    length,
                } => {
                    let d = payload
                        .get(offset as usize..(offset + length) as usize)
                        .unwrap_or_else(|| panic!("R2T past the data"));
                    io.writer()
                        .h2c_data(cid, ttag, offset, d, true, &mut out)
                        .unwrap_or_else(|e| panic!("{e}"));
                }
                Rx::Resp(c) => {
                    assert!(status_of(&c).is_success(), "{}", status_of(&c));
                    finished += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        done += finished as u64;
        issue(&mut io, &mut out, finished);
    }
    let el = t0.elapsed().as_secs_f64();
    let cpu = group_cpu_ticks().saturating_sub(cpu0) as f64 / 100.0;
    let c = env.counters();
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / done.max(1) as f64;
    println!(
        "{mode:?} QD{qd} {}k {}: {:.0} IOPS ({:.0} MB/s, mean {:.1} us); target: {:.1} us CPU/IO, reads/IO {:.2}, writes/IO {:.2}, sleeps {}",
        bs / 1024,
        if write { "writes" } else { "reads" },
        done as f64 / el,
        done as f64 * bs as f64 / el / 1e6,
        el * 1e6 * qd as f64 / done.max(1) as f64,
        cpu * 1e6 / done.max(1) as f64,
        per(c.socket_reads, c0.socket_reads),
        per(c.socket_writes, c0.socket_writes),
        c.sleeps.saturating_sub(c0.sleeps)
    );
    drop(io);
    env.server.shutdown();
}

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2.0);
    // NVMF_TCP_IOPS="poll:32:4096[:write]" runs one point.
    let one = std::env::var("NVMF_TCP_IOPS").ok().map(|v| {
        let f: Vec<&str> = v.split(':').collect();
        let num = |i: usize| {
            f.get(i)
                .and_then(|s| s.parse::<usize>().ok())
                .unwrap_or_else(|| panic!("NVMF_TCP_IOPS={v}: mode:qd:bs[:write]"))
        };
        (
            mode_of(f.first().copied().unwrap_or("")),
            num(1),
            num(2),
            f.get(3) == Some(&"write"),
        )
    });
    let all = [
        (PollMode::Poll, 1usize, 4096usize, false),
        (PollMode::Adaptive, 1, 4096, false),
        (PollMode::Interrupt, 1, 4096, false),
        (PollMode::Poll, 32, 4096, false),
        (PollMode::Adaptive, 32, 4096, false),
        (PollMode::Interrupt, 32, 4096, false),
        (PollMode::Poll, 32, 128 * 1024, false),
        (PollMode::Poll, 8, 128 * 1024, false),
        (PollMode::Poll, 32, 4096, true),
        (PollMode::Poll, 8, 128 * 1024, true),
    ];
    let points: Vec<_> = match one {
        Some(p) => vec![p],
        None => all.to_vec(),
    };
    for (mode, qd, bs, write) in points {
        point(mode, qd, bs, write, secs);
    }
}
