//! perf against the in-memory fake target.

use super::*;
use crate::controller::ConnectOptions;
use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};
use nvmf_common::types::Nqn;
use nvmf_common::wire::status::{generic, Status};

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
