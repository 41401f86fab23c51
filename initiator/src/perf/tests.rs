//! perf against the in-memory fake target.

use super::*;
use crate::controller::ConnectOptions;
use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};
use nvmf_common::types::Nqn;
use nvmf_common::wire::status::{generic, Status};

/// Held by the tests that keep several threads spinning (many jobs, pinned threads) and
/// by the one that bounds its run's length: on a 2-core machine the latter would
/// otherwise time the former's threads.
pub(super) static SPINNING: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub(super) fn spinning() -> std::sync::MutexGuard<'static, ()> {
    SPINNING.lock().unwrap_or_else(|e| e.into_inner())
}

fn setup(cfg: FakeTargetConfig, queues: u16) -> (FakeTarget, Controller, Vec<Queue>) {
    let t = FakeTarget::new(cfg);
    let mut o = ConnectOptions::new(
        Nqn::new(t.subnqn()).unwrap(),
        Nqn::new("nqn.host").unwrap(),
        [2; 16],
    );
    o.nr_io_queues = queues;
    o.kato_ms = 0;
    let mut c = Controller::connect(t.fabric(), o).unwrap();
    let q = c.take_io_queues();
    (t, c, q)
}

fn opts(rw: Rw) -> PerfOptions {
    PerfOptions {
        rw,
        iodepth: 4,
        runtime: Some(Duration::from_millis(150)),
        ..Default::default()
    }
}

#[test]
fn timed_random_read() {
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 2);
    let mut o = opts(Rw::RandRead);
    o.numjobs = 2;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert_eq!(r.jobs.len(), 2);
    assert!(r.read.ios > 0 && r.write.ios == 0);
    assert_eq!(r.read.bytes, r.read.ios * 4096);
    assert!(r.jobs.iter().all(|j| j.read.ios > 0));
    assert_eq!(r.read.hist.len(), r.read.ios);
    assert!(r.iops() > 0.0);
    assert!(!r.timeline.is_empty());
    let text = r.format_normal();
    assert!(text.contains("read: IOPS="), "{text}");
    assert!(text.contains("p99.99="), "{text}");
    let j = r.to_json();
    assert_eq!(j["jobs"].as_array().map(Vec::len), Some(2));
    assert!(j["total"]["read"]["iops"].as_f64().unwrap() > 0.0);
    assert!(j["total"]["read"]["bw_bytes"].as_u64().unwrap() > 0);
    assert!(j["total"]["read"]["lat_ns"]["percentile"]["99.990000"].is_u64());
    assert!(j["cpu"]["usec_per_io"].is_f64());
}

#[test]
fn write_then_verify_and_read_verify() {
    let (t, c, mut qs) = setup(FakeTargetConfig::default(), 1);
    // One pass over 64 KiB of namespace 1 (512-byte blocks): 16 writes of 4 KiB.
    let mut o = opts(Rw::RandWrite);
    o.runtime = None;
    o.size = Some(64 * 1024);
    o.verify = true;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert_eq!(r.write.ios, 16);
    assert_eq!(
        r.verify.blocks_checked, 128,
        "every written block read back"
    );
    assert!(r
        .format_normal()
        .contains("verify: OK (128 blocks checked)"));
    // A later read run with the same seed checks the data too.
    o.rw = Rw::Read;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert_eq!(r.verify.blocks_checked, 128);
    // Corrupt one byte of LBA 37: the read run reports exactly that block.
    t.corrupt(1, 37 * 512 + 100);
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(r.failed());
    assert_eq!(r.verify.failure_count, 1);
    assert_eq!(r.verify.failures[0].lba, 37);
    assert!(r.format_normal().contains("LBA 37"));
    // Blocks past the written span were never written: a read verify there fails.
    o.size = Some(128 * 1024);
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(r.verify.failure_count > 0);
}

#[test]
fn mixed_ranges_with_verify() {
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 2);
    let mut o = opts(Rw::RandRw);
    o.bs = "1k-8k".parse().unwrap();
    o.numjobs = 2;
    o.verify = true;
    o.rwmixread = 30;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(r.read.ios > 0 && r.write.ios > 0);
    // Sizes vary within the range and stay block multiples.
    assert!(r.read.bytes.is_multiple_of(512) && r.write.bytes.is_multiple_of(512));
    assert!(r.verify.blocks_checked > 0);
}

#[test]
fn io_errors_are_reported() {
    let (_t, c, mut qs) = setup(
        FakeTargetConfig {
            io_error: Some(Status::generic_dnr(generic::INTERNAL_ERROR)),
            ..Default::default()
        },
        1,
    );
    let r = run(&c, &mut qs, &opts(Rw::Read)).unwrap();
    assert!(r.failed());
    assert!(r.errors() >= 1);
    let e = r.jobs[0].first_error.clone().unwrap();
    assert!(e.contains("Internal Error"), "{e}");
    assert_eq!(r.read.ios, 0);
}

/// An iodepth above the queue's size (64 entries, 63 commands): the excess waits in the
/// job, as with fio and SPDK's perf; the queue stays full and the run completes.
#[test]
fn iodepth_beyond_the_queue_size_is_queued_in_the_job() {
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 1);
    let mut o = opts(Rw::RandRead);
    o.iodepth = 256;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(r.read.ios > 256, "{}", r.read.ios);
    let mut o = opts(Rw::RandWrite);
    o.iodepth = 200;
    o.verify = true;
    o.size = Some(1 << 20);
    o.runtime = None;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(
        !r.failed() && r.verify.failure_count == 0 && r.verify.blocks_checked > 0,
        "{}",
        r.format_normal()
    );
}

#[test]
fn rejects_impossible_options() {
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 1);
    let bad = |f: &dyn Fn(&mut PerfOptions)| {
        let mut o = opts(Rw::Read);
        f(&mut o);
        o
    };
    let cases = [
        bad(&|o| o.numjobs = 2),
        bad(&|o| o.numjobs = 0),
        bad(&|o| o.iodepth = 0),
        bad(&|o| o.bs = BsSpec::fixed(1 << 20)), // MDTS 128 KiB
        bad(&|o| o.bs = BsSpec::fixed(1000)),
        bad(&|o| o.size = Some(1 << 30)),
        bad(&|o| o.nsid = Nsid(2)),
        bad(&|o| o.rwmixread = 101),
        bad(&|o| {
            o.verify = true;
            o.size = Some(8 * 4096);
            o.iodepth = 8;
        }),
    ];
    for o in cases {
        assert!(
            matches!(
                run(&c, &mut qs, &o),
                Err(Error::InvalidArgument(_)) | Err(Error::NotFound(_))
            ),
            "{o:?}"
        );
    }
}

#[test]
fn svg_plot_written() {
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 1);
    let r = run(&c, &mut qs, &opts(Rw::RandRead)).unwrap();
    let path = std::env::temp_dir().join(format!("nvmf-perf-{}.svg", std::process::id()));
    svg::write(&r, &path).unwrap();
    let s = std::fs::read_to_string(&path).unwrap();
    assert!(s.starts_with("<svg") && s.contains("IOPS over time"));
    let _ = std::fs::remove_file(&path);
}

#[test]
fn ramp_is_not_measured_and_each_job_has_its_own_queue() {
    let _serial = spinning();
    let (t, c, mut qs) = setup(FakeTargetConfig::default(), 2);
    let mut o = opts(Rw::RandRead);
    o.numjobs = 2;
    o.ramp_time = Duration::from_millis(100);
    let before = t.ios();
    let r = run(&c, &mut qs, &o).unwrap();
    let sent = t.ios() - before;
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(
        r.total_ios() > 0 && r.total_ios() < sent,
        "I/O of the ramp is excluded: measured {} of {sent}",
        r.total_ios()
    );
    assert!(r.elapsed <= o.runtime.unwrap() + Duration::from_millis(50));
    let mut qids: Vec<u16> = r.jobs.iter().map(|j| j.qid).collect();
    qids.sort_unstable();
    qids.dedup();
    assert_eq!(qids.len(), 2, "two jobs on two I/O queues");
}

/// The first CPU this process may run on.
fn first_cpu() -> usize {
    cpus::allowed().unwrap().cpus().first().copied().unwrap()
}

/// `--cpus N` with 4 jobs: one thread pinned to N runs all four, each on its own queue
/// with its own verify state, and every block checks out.
#[test]
fn four_verifying_jobs_share_one_pinned_thread() {
    let _serial = spinning();
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 4);
    let cpu = first_cpu();
    let mut o = opts(Rw::RandRw);
    o.numjobs = 4;
    o.iodepth = 8;
    o.verify = true;
    // The fake namespace is 1 MiB: 64 units of 4 KiB per job.
    o.size = Some(1 << 20);
    o.cpus = Some(cpu.to_string().parse().unwrap());
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert_eq!(
        (r.threads, r.thread_cpus.clone()),
        (1, Some(cpu.to_string()))
    );
    assert_eq!(r.jobs.len(), 4);
    for (i, j) in r.jobs.iter().enumerate() {
        assert_eq!(j.index as usize, i, "jobs listed in order");
        assert!(j.read.ios + j.write.ios > 0, "job {i} did nothing");
        assert!(j.verify.blocks_checked > 0, "job {i} checked nothing");
    }
    let mut qids: Vec<u16> = r.jobs.iter().map(|j| j.qid).collect();
    qids.sort_unstable();
    qids.dedup();
    assert_eq!(qids.len(), 4, "each job keeps its own queue");
    let text = r.format_normal();
    assert!(
        text.contains(&format!("numjobs=4 threads=1 cpus={cpu} ")),
        "{text}"
    );
    let j = r.to_json();
    assert_eq!(j["options"]["threads"], 1);
    assert_eq!(j["options"]["cpus"], cpu.to_string());
}

/// More jobs than CPUs, each deeper than its queue (64 entries): every job runs, none
/// waits on another, and the default is one unpinned thread per allowed CPU.
#[test]
fn eight_deep_jobs_on_the_default_threads() {
    let _serial = spinning();
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 8);
    let mut o = opts(Rw::RandRead);
    o.numjobs = 8;
    o.iodepth = 256;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    let allowed = cpus::allowed().unwrap().cpus().len();
    assert_eq!((r.threads, r.thread_cpus.clone()), (allowed.min(8), None));
    assert!(
        r.jobs.iter().all(|j| j.read.ios > 0),
        "{}",
        r.format_normal()
    );
    assert!(r.format_normal().contains("cpus=unpinned"));
    assert_eq!(r.to_json()["options"]["cpus"], serde_json::Value::Null);
}

#[test]
fn a_cpu_outside_the_affinity_mask_is_refused() {
    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 1);
    let allowed = cpus::allowed().unwrap();
    let Some(outside) = (0..nix::sched::CpuSet::count()).find(|c| !allowed.cpus().contains(c))
    else {
        return;
    };
    let mut o = opts(Rw::RandRead);
    o.cpus = Some(outside.to_string().parse().unwrap());
    match run(&c, &mut qs, &o) {
        Err(Error::InvalidArgument(m)) => {
            assert!(m.contains("not one this process may run on"), "{m}")
        }
        other => panic!("{:?}", other.map(|r| r.format_normal())),
    }
}

/// `--idle-spin 0`: the loop blocks at the first idle pass (and still completes every
/// command, verified); the default spins first.
#[test]
fn a_zero_idle_spin_blocks_at_once_and_loses_nothing() {
    let mut zero = super::idle::IdleSpin::new(Duration::ZERO);
    assert!(zero.idle(), "zero spin blocks at the first idle pass");
    let mut spin = super::idle::IdleSpin::new(super::idle::SPIN_TIME);
    assert!(!spin.idle(), "the default spins before it blocks");

    let (_t, c, mut qs) = setup(FakeTargetConfig::default(), 1);
    let mut o = opts(Rw::RandWrite);
    o.verify = true;
    o.idle_spin = Duration::ZERO;
    let r = run(&c, &mut qs, &o).unwrap();
    assert!(!r.failed(), "{}", r.format_normal());
    assert!(r.write.ios > 0, "{}", r.format_normal());
}
