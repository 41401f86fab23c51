//! Scale and long-running correctness on one node (issue 15): 128 I/O queues granted
//! by default; an empty Host NQN admitted only where any host may connect; a
//! subsystem removed with a host connected leaves no descriptor open, 100 times over;
//! a write that found its namespace before `remove-ns` returned but had not run yet
//! gets Invalid Namespace instead of reaching the backend.

use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::HostConfig;
use nvmf_common::types::{Cntlid, Nqn, Nsid, Qid};
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::status::{cmd_specific, generic, Sct};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::transport::DataDir;
use nvmf_target::config::Config;
use nvmf_tests::ops_support::{connect_as, free_port, start_live};
use nvmf_tests::raw_tcp::{status_of, with_cid, write_sqe, RawTcp, Rx};
use nvmf_tests::{config, exec, options, raw_queue, start, start_tcp, TEST_HOSTID};

/// The tests of this file run one at a time: each is heavy (1,000 namespaces, 128
/// queues, 100 subsystem cycles), and the descriptor counts they read are the process's.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn alone() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn a_host_asking_for_128_io_queues_gets_them() {
    let _alone = alone();
    let env = start(&config(&["ram:4M"]));
    let mut o = options(&env, 128, 4);
    o.queue_size = 4;
    let c = Controller::connect(env.fabric.clone(), o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.io_queue_count(), 128);
    c.shutdown().unwrap();
    let env = start_tcp(&config(&["ram:4M"]), Default::default());
    let mut o = nvmf_initiator::controller::ConnectOptions::new(
        env.nqn.clone(),
        nvmf_tests::hostnqn(),
        TEST_HOSTID,
    );
    o.nr_io_queues = 128;
    o.queue_size = 4;
    let c = Controller::connect(env.fabric.clone(), o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.io_queue_count(), 128);
    c.shutdown().unwrap();
}

/// Connects an admin queue with an empty Host NQN; returns the status.
fn connect_empty_host(cfg: &Config) -> nvmf_common::wire::status::Status {
    let env = start(cfg);
    let mut q = raw_queue(&env, 0, 32);
    let data = command::connect_data(TEST_HOSTID, Cntlid::DYNAMIC, &env.nqn, &Nqn::empty_host());
    let buf = env.fabric.alloc(data.len()).unwrap();
    assert!(buf.write_at(0, &data));
    exec(
        &mut q,
        command::connect(Qid::ADMIN, 31, 0),
        Some(&buf),
        DataDir::ToCtrl,
    )
    .status
}

#[test]
fn an_empty_host_nqn_is_admitted_only_where_any_host_may_connect() {
    let _alone = alone();
    let cfg = config(&["ram:4M"]);
    assert!(cfg.subsystems[0].allow_any_host);
    let st = connect_empty_host(&cfg);
    assert!(st.is_success(), "allow_any_host: {st}");
    let mut listed = cfg.clone();
    listed.subsystems[0].allow_any_host = false;
    listed.subsystems[0].allowed_hosts = vec![nvmf_tests::hostnqn()];
    let st = connect_empty_host(&listed);
    assert!(
        st.is(Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST),
        "allow-list: {st}"
    );
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .map(|d| d.count())
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Waits (at most 5 s) until the descriptor count is back to at most `want`.
fn settle(want: usize) -> usize {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let n = open_fds();
        if n <= want || Instant::now() > end {
            return n;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// RSS growth (KiB) allowed in 50 add/remove cycles.
const HALF_RSS_GROWTH_KIB: u64 = 16 * 1024;

/// Set in the child process that runs [`removed_subsystems_churn`].
const CHURN_CHILD: &str = "NVMF_SCALE_CHURN_CHILD";

/// The descriptor and RSS check runs in a process of its own: RSS is the whole
/// process's, and what the other tests of this binary allocated and freed before it
/// (glibc keeps and trims arenas on its own schedule) moved it by more than the bound
/// (CI: +35 MiB with the tests serialized; +0.4 MiB alone).
#[test]
fn removed_subsystems_leave_no_descriptor_open() {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "removed_subsystems_churn",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHURN_CHILD, "1")
        .output()
        .unwrap_or_else(|e| panic!("child test process: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran no test: {text}");
    eprintln!("{text}");
}

/// The body of [`removed_subsystems_leave_no_descriptor_open`], run by it in a child
/// process (ignored otherwise; without the child's environment it refuses to run).
#[test]
#[ignore = "run in a process of its own by removed_subsystems_leave_no_descriptor_open"]
fn removed_subsystems_churn() {
    assert!(
        std::env::var_os(CHURN_CHILD).is_some(),
        "run by removed_subsystems_leave_no_descriptor_open in a process of its own"
    );
    let dir = std::env::temp_dir().join(format!("nvmf-scale-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let img = dir.join("ns.img");
    std::fs::write(&img, vec![0u8; 1 << 20]).unwrap();
    let port = free_port();
    let base = format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [SUBS] }}\nsubsystems:\n"
    );
    let sub = "nqn.2024-01.io.nvmf-rs:churn";
    let without = Config::from_yaml_str(&base.replace("SUBS", ""), "t").unwrap();
    let with = Config::from_yaml_str(
        &format!(
            "{}  - nqn: {sub}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: {} }}\n",
            base.replace("SUBS", sub),
            img.display()
        ),
        "t",
    )
    .unwrap();
    let t = start_live(&without.to_yaml().unwrap(), None);
    let cycle = |i: usize| {
        t.live
            .apply(with.clone())
            .unwrap_or_else(|e| panic!("add {i}: {e}"));
        let mut c = connect_as(&t.fabric(1), 1, &Nqn::new(sub).unwrap(), 1, 5000).unwrap();
        let buf = c.alloc(4096).unwrap();
        let mut qs = c.take_io_queues();
        let sqe = command::write(Nsid(1), 0, 8, false).unwrap();
        let r = qs[0]
            .execute(sqe, Some(&buf), DataDir::ToCtrl, Duration::from_secs(5))
            .unwrap();
        assert!(r.status.is_success());
        // Removed while the host is connected.
        t.live
            .apply(without.clone())
            .unwrap_or_else(|e| panic!("remove {i}: {e}"));
        drop(qs);
        drop(c);
    };
    // Warm up (threads, buffers, the listener's first connections), then measure.
    for i in 0..3 {
        cycle(i);
    }
    let (fds, rss) = (settle(0), rss_kib());
    for i in 0..50 {
        cycle(i);
    }
    let rss_mid = rss_kib();
    for i in 50..100 {
        cycle(i);
    }
    let after = settle(fds);
    let rss_after = rss_kib();
    assert!(
        after <= fds,
        "descriptors: {fds} before, {after} after 100 add/remove cycles"
    );
    // A leak grows RSS in both halves; a one-time growth (a malloc arena, pages of the
    // data arena first touched late when the machine is busy: seen once in CI, +32 MiB
    // in the first half and nothing after) in one only. Either half over the bound at a
    // steady rate of ~330 KiB per cycle fails.
    let halves = (
        rss_mid.saturating_sub(rss),
        rss_after.saturating_sub(rss_mid),
    );
    assert!(
        halves.0.min(halves.1) < HALF_RSS_GROWTH_KIB,
        "RSS grew from {rss} KiB to {rss_mid} KiB over 50 cycles and to {rss_after} KiB over 50 more"
    );
    eprintln!(
        "100 cycles: descriptors {fds} -> {after}, RSS {rss} -> {rss_mid} -> {rss_after} KiB"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_write_waiting_for_its_data_when_the_namespace_goes_gets_invalid_namespace() {
    let _alone = alone();
    let env = start_tcp(&config(&["ram:4M"]), Default::default());
    let mut admin = RawTcp::connect(env.addr, HostConfig::default());
    admin.init();
    let cntlid = admin.admin_up(&env.nqn);
    let mut io = RawTcp::connect(env.addr, HostConfig::default());
    io.init();
    assert!(status_of(&io.io_connect(&env.nqn, cntlid, 1, 31)).is_success());
    // 64 KiB: more than the in-capsule limit, so the target asks for it with an R2T.
    let cid = io.next_cid();
    io.cmd(
        &with_cid(write_sqe(0, 128, SglDescriptor::transport(64 * 1024)), cid),
        &[],
    );
    let (ttag, len) = match io.recv() {
        Rx::R2T { ttag, length, .. } => (ttag, length),
        other => panic!("expected an R2T, got {other:?}"),
    };
    // The namespace goes while the write waits for its data.
    let removed = env
        .target
        .find_subsystem(&env.nqn)
        .unwrap()
        .remove_namespace(Nsid(1));
    assert!(removed.is_some());
    io.h2c(cid, ttag, 0, &vec![0xAB; len as usize], true);
    let mut st = None;
    while st.is_none() {
        match io.recv() {
            Rx::R2T {
                ttag,
                offset,
                length,
                ..
            } => io.h2c(cid, ttag, offset, &vec![0xAB; length as usize], true),
            Rx::Resp(c) => st = Some(status_of(&c)),
            other => panic!("{other:?}"),
        }
    }
    let st = st.unwrap();
    assert!(
        st.is(Sct::Generic, generic::INVALID_NAMESPACE) && st.dnr,
        "{st}"
    );
}

/// 1,000 file-backed namespaces in one subsystem (2,000+ descriptors once they have
/// seen I/O: more than the default soft limit, which the target raises at start as
/// this test does) and 1,000 subsystems: all start, the last ones serve.
#[test]
fn a_thousand_namespaces_and_a_thousand_subsystems_start_and_serve() {
    let _alone = alone();
    let (soft, _) = nvmf_target::limits::raise_nofile().unwrap();
    assert!(
        soft > 2 * 1000,
        "the hard open-file limit is too low for this test: {soft}"
    );
    let dir = std::env::temp_dir().join(format!("nvmf-1000-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut cfg = config(&[]);
    for i in 1..=1000u32 {
        let p = dir.join(format!("{i}.img"));
        std::fs::write(&p, vec![0u8; 64 * 1024]).unwrap();
        cfg.subsystems[0]
            .namespaces
            .push(nvmf_target::config::NamespaceConfig::new(
                Nsid(i),
                p.display().to_string(),
            ));
    }
    cfg.validate().unwrap();
    assert!(nvmf_target::limits::descriptors_needed(&cfg) > 2000);
    let env = start_tcp(&cfg, Default::default());
    let mut c = nvmf_tests::connect_to(&env.fabric, &env.nqn, 1, 8);
    assert_eq!(c.namespaces().len(), 1000);
    let buf = c.alloc(4096).unwrap();
    let mut qs = c.take_io_queues();
    for nsid in [1, 500, 1000] {
        let r = qs[0]
            .execute(
                command::write(Nsid(nsid), 0, 8, false).unwrap(),
                Some(&buf),
                DataDir::ToCtrl,
                Duration::from_secs(5),
            )
            .unwrap();
        assert!(r.status.is_success(), "namespace {nsid}: {}", r.status);
    }
    drop(qs);
    c.shutdown().unwrap();
    let _ = std::fs::remove_dir_all(&dir);

    let mut many = config(&["ram:64K"]);
    let first = many.subsystems[0].clone();
    for i in 1..1000 {
        let mut s = first.clone();
        s.nqn = Nqn::new(format!("nqn.2024-01.io.nvmf-rs:many-{i}")).unwrap();
        many.ports[0].subsystems.push(s.nqn.clone());
        many.subsystems.push(s);
    }
    many.validate().unwrap();
    let env = start_tcp(&many, Default::default());
    let last = Nqn::new("nqn.2024-01.io.nvmf-rs:many-999").unwrap();
    let c = nvmf_tests::connect_to(&env.fabric, &last, 1, 8);
    assert_eq!(c.namespaces().len(), 1);
    c.shutdown().unwrap();
}
