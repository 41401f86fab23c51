//! The durability contract (README, "Durability"), one test per promise:
//!
//! - the Volatile Write Cache is reported truthfully per backend (file: present; RAM
//!   and null: absent) and the feature behaves accordingly;
//! - FUA reaches the backend, and with the cache disabled (WCE 0) every write does;
//! - no write is acknowledged before the backend completed it, and a backend error is
//!   never acknowledged as success;
//! - a Flush after a failed write does not report success over the lost write;
//! - data that failed its digest never reaches the backend;
//! - I/O of an association whose controller is gone never reaches the backend.
//!
//! The backend side is observed through [`FaultBackend`] wrapped around the real one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_common::transport::tcp::HostConfig;
use nvmf_common::types::Nsid;
use nvmf_common::wire::admin::fid;
use nvmf_common::wire::sgl::SglDescriptor;
use nvmf_common::wire::status::{generic, media, Sct, Status};
use nvmf_common::wire::tcp::term_fes;
use nvmf_initiator::command;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_initiator::transport::DataDir;
use nvmf_target::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use nvmf_target::backend::Backend;
use nvmf_tests::raw_tcp::{pair, status_of, with_cid, with_sgl, Rx};
use nvmf_tests::{config, connect, exec, start, start_tcp, wrap_ns1, TEST_NQN};

/// A scratch file of `size` bytes, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(tag: &str, size: u64) -> TempFile {
        let p = std::env::temp_dir().join(format!(
            "nvmf-durability-{tag}-{}-{:?}.img",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::File::create(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        f.set_len(size).unwrap_or_else(|e| panic!("{e}"));
        TempFile(p)
    }
    fn spec(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn ram(size: u64) -> Arc<dyn Backend> {
    open_backend(&NamespaceSpec::Ram { size }, &OpenOptions::default())
        .unwrap_or_else(|e| panic!("{e}"))
}

fn file(f: &TempFile) -> Arc<dyn Backend> {
    let spec = NamespaceSpec::File(f.0.clone());
    open_backend(&spec, &OpenOptions::default()).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
fn assert_status(st: Status, sct: Sct, sc: u8) {
    assert!(st.is(sct, sc), "expected {sct:?}/{sc:#x}, got {st}");
}

// ---- Volatile Write Cache --------------------------------------------------------

#[test]
fn vwc_absent_for_ram_and_null() {
    for spec in ["ram:16M", "null:16M"] {
        let env = start(&config(&[spec]));
        let ctrl = connect(&env, 1, 32);
        assert_eq!(ctrl.id_ctrl().vwc & 1, 0, "{spec}: VWC bit 0");
        assert_eq!(ctrl.id_ctrl().vwc & 0b110, 0b110, "{spec}: broadcast Flush");
        let wce = ctrl
            .get_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 0)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(wce & 1, 0, "{spec}: WCE");
        // Enabling a cache that does not exist is refused; disabling it is a no-op.
        let err = ctrl
            .set_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 1, false)
            .err()
            .unwrap_or_else(|| panic!("{spec}: enabling an absent cache succeeded"));
        let st = err.status().unwrap_or_else(|| panic!("{err}"));
        assert_status(st, Sct::Generic, generic::INVALID_FIELD);
        assert!(st.dnr);
        ctrl.set_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 0, false)
            .unwrap_or_else(|e| panic!("{e}"));
    }
}

#[test]
fn vwc_present_for_files_and_wce_is_honoured() {
    let f = TempFile::new("vwc", 8 << 20);
    let env = start(&config(&[&f.spec()]));
    let ctrl = connect(&env, 1, 32);
    assert_eq!(ctrl.id_ctrl().vwc & 1, 1, "a file sits on the page cache");
    let wce = ctrl
        .get_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 0)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wce & 1, 1, "WCE defaults to enabled");
    ctrl.set_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    let wce = ctrl
        .get_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 0)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wce & 1, 0);
    ctrl.set_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 1, false)
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn fua_reaches_the_backend_and_wce_off_writes_through() {
    let f = TempFile::new("fua", 8 << 20);
    let env = start(&config(&[&f.spec()]));
    let ctl = wrap_ns1(&env.target.target, file(&f));
    let mut ctrl = connect(&env, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    let buf = ctrl.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    buf.write_at(0, &nvmf_tests::pattern(5, 0, 4096));
    let write = |q: &mut nvmf_initiator::queue::Queue, fua: bool| {
        let c = exec(
            q,
            command::write(Nsid(1), 0, 8, fua).unwrap_or_else(|e| panic!("{e}")),
            Some(&buf),
            DataDir::ToCtrl,
        );
        assert!(c.status.is_success(), "{}", c.status);
    };
    write(&mut q, false);
    assert_eq!((ctl.writes_done(), ctl.fua_writes()), (1, 0));
    write(&mut q, true);
    assert_eq!((ctl.writes_done(), ctl.fua_writes()), (2, 1));
    // WCE 0: a plain write is written through.
    ctrl.set_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 0, false)
        .unwrap_or_else(|e| panic!("{e}"));
    write(&mut q, false);
    assert_eq!((ctl.writes_done(), ctl.fua_writes()), (3, 2));
    ctrl.set_features(fid::VOLATILE_WRITE_CACHE, Nsid(0), 1, false)
        .unwrap_or_else(|e| panic!("{e}"));
    write(&mut q, false);
    assert_eq!((ctl.writes_done(), ctl.fua_writes()), (4, 2));
}

// ---- acknowledgement ---------------------------------------------------------------

#[test]
fn no_write_is_acknowledged_before_the_backend_completed_it() {
    let env = start(&config(&["ram:16M"]));
    let ctl = wrap_ns1(&env.target.target, ram(16 << 20));
    let mut ctrl = connect(&env, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    let buf = ctrl.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let delay = Duration::from_millis(300);
    ctl.delay(delay);
    let t0 = Instant::now();
    let c = exec(
        &mut q,
        command::write(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}")),
        Some(&buf),
        DataDir::ToCtrl,
    );
    assert!(c.status.is_success());
    assert!(
        t0.elapsed() >= delay,
        "acknowledged after {:?}",
        t0.elapsed()
    );
    assert_eq!(ctl.writes_done(), 1);
}

#[test]
fn backend_eio_surfaces_as_media_errors() {
    let env = start(&config(&["ram:16M"]));
    let ctl = wrap_ns1(&env.target.target, ram(16 << 20));
    let mut ctrl = connect(&env, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    let buf = ctrl.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let w = command::write(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    let r = command::read(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    ctl.fail_writes(true);
    let c = exec(&mut q, w, Some(&buf), DataDir::ToCtrl);
    assert_status(c.status, Sct::MediaError, media::WRITE_FAULT);
    ctl.clear();
    ctl.fail_reads(true);
    let c = exec(&mut q, r, Some(&buf), DataDir::FromCtrl);
    assert_status(c.status, Sct::MediaError, media::UNRECOVERED_READ_ERROR);
    ctl.clear();
    // A torn write (512 of 4096 bytes landed) is a write fault, not a success.
    ctl.tear_writes(512);
    let c = exec(&mut q, w, Some(&buf), DataDir::ToCtrl);
    assert_status(c.status, Sct::MediaError, media::WRITE_FAULT);
    ctl.clear();
    // Write Zeroes fails the same way.
    ctl.fail_writes(true);
    let c = exec(
        &mut q,
        command::write_zeroes(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}")),
        None,
        DataDir::None,
    );
    assert_status(c.status, Sct::MediaError, media::WRITE_FAULT);
    ctl.clear();
    // Errors are logged in the Error Information log.
    let log = ctrl
        .get_log_page(nvmf_common::wire::log::lid::ERROR_INFO, Nsid(0), 64, 0)
        .unwrap_or_else(|e| panic!("{e}"));
    let e = nvmf_common::wire::log::ErrorInfoEntry::new_unchecked(&log[..]);
    assert!(e.error_count() >= 4);
}

#[test]
fn flush_after_a_failed_write_does_not_pretend_success() {
    let env = start(&config(&["ram:16M"]));
    let ctl = wrap_ns1(&env.target.target, ram(16 << 20));
    let mut ctrl = connect(&env, 1, 32);
    let mut q = ctrl.take_io_queues().remove(0);
    let buf = ctrl.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
    let w = command::write(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    let c = exec(&mut q, w, Some(&buf), DataDir::ToCtrl);
    assert!(c.status.is_success());
    ctl.fail_writes(true);
    let c = exec(&mut q, w, Some(&buf), DataDir::ToCtrl);
    assert_status(c.status, Sct::MediaError, media::WRITE_FAULT);
    ctl.clear();
    // The lost write is reported by the next Flush...
    let c = exec(&mut q, command::flush(Nsid(1)), None, DataDir::None);
    assert!(
        !c.status.is_success(),
        "Flush succeeded over a lost write: {}",
        c.status
    );
    assert_status(c.status, Sct::MediaError, media::WRITE_FAULT);
    // ...and a broadcast Flush reports a failing flush too.
    ctl.fail_flushes(true);
    let c = exec(&mut q, command::flush(Nsid::BROADCAST), None, DataDir::None);
    assert!(!c.status.is_success(), "broadcast Flush: {}", c.status);
    ctl.clear();
    let c = exec(&mut q, command::flush(Nsid(1)), None, DataDir::None);
    assert!(c.status.is_success(), "{}", c.status);
}

// ---- what never reaches the backend ----------------------------------------------

fn tcp_with_fault() -> (
    nvmf_tests::TcpEnv,
    Arc<nvmf_target::backend::fault::FaultControl>,
) {
    let env = start_tcp(&config(&["ram:16M"]), TcpOptions::default());
    let ctl = wrap_ns1(&env.target, ram(16 << 20));
    (env, ctl)
}

#[test]
fn data_that_failed_its_digest_never_reaches_the_backend() {
    let (env, ctl) = tcp_with_fault();
    let cfg = HostConfig {
        data_digest: true,
        ..HostConfig::default()
    };
    let (_a, mut io, _) = pair(&env, cfg);
    // In-capsule.
    let cid = io.next_cid();
    let w = command::write(Nsid(1), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
    let mut pdu = Vec::new();
    io.writer()
        .capsule_cmd(
            &with_cid(with_sgl(w, SglDescriptor::in_capsule(0, 4096)), cid),
            &[0x77; 4096],
            &mut pdu,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let n = pdu.len();
    pdu[n - 10] ^= 1;
    io.send(&pdu);
    let c = io.expect_resp(cid);
    assert_status(
        status_of(&c),
        Sct::Generic,
        generic::TRANSIENT_TRANSPORT_ERROR,
    );
    // Through R2T, in two H2CData PDUs of which the second is corrupt.
    let cid = io.next_cid();
    let w = command::write(Nsid(1), 0, 16, false).unwrap_or_else(|e| panic!("{e}"));
    io.cmd(
        &with_cid(with_sgl(w, SglDescriptor::transport(8192)), cid),
        &[],
    );
    let ttag = match io.recv() {
        Rx::R2T { ttag, .. } => ttag,
        other => panic!("{other:?}"),
    };
    io.h2c(cid, ttag, 0, &[0x78; 4096], false);
    let mut pdu = Vec::new();
    io.writer()
        .h2c_data(cid, ttag, 4096, &[0x79; 4096], true, &mut pdu)
        .unwrap_or_else(|e| panic!("{e}"));
    let n = pdu.len();
    pdu[n - 10] ^= 1;
    io.send(&pdu);
    let c = io.expect_resp(cid);
    assert_status(
        status_of(&c),
        Sct::Generic,
        generic::TRANSIENT_TRANSPORT_ERROR,
    );
    assert_eq!(
        ctl.writes_done(),
        0,
        "digest-failed data reached the backend"
    );
}

#[test]
fn io_of_a_dead_association_never_reaches_the_backend() {
    let (env, ctl) = tcp_with_fault();
    let (admin, mut io, _) = pair(&env, HostConfig::default());
    // A write waits for its data...
    let cid = io.next_cid();
    let w = command::write(Nsid(1), 0, 16, false).unwrap_or_else(|e| panic!("{e}"));
    io.cmd(
        &with_cid(with_sgl(w, SglDescriptor::transport(8192)), cid),
        &[],
    );
    let ttag = match io.recv() {
        Rx::R2T { ttag, .. } => ttag,
        other => panic!("{other:?}"),
    };
    // ...the admin queue goes away and with it the controller...
    drop(admin);
    let sub = env
        .target
        .subsystem_by_name(TEST_NQN)
        .unwrap_or_else(|| panic!("subsystem"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sub.controllers().is_empty() {
        assert!(Instant::now() < deadline, "controller never released");
        std::thread::sleep(Duration::from_millis(5));
    }
    // ...then the data arrives: the write is aborted, nothing is written.
    io.h2c(cid, ttag, 0, &[0x5A; 8192], true);
    match io.recv() {
        Rx::Resp(c) => {
            let st = status_of(&c);
            assert!(!st.is_success(), "a write of a dead association succeeded");
            assert_status(st, Sct::Generic, generic::ABORTED_SQ_DELETION);
        }
        Rx::Closed => {}
        Rx::Term { fes, .. } => assert_ne!(fes, term_fes::DATA_OUT_OF_RANGE),
        other => panic!("{other:?}"),
    }
    // New commands on the orphaned queue fail too.
    let cid = io.next_cid();
    let w = command::write(Nsid(1), 0, 1, false).unwrap_or_else(|e| panic!("{e}"));
    io.send_lossy(&{
        let mut pdu = Vec::new();
        io.writer()
            .capsule_cmd(
                &with_cid(with_sgl(w, SglDescriptor::in_capsule(0, 512)), cid),
                &[1; 512],
                &mut pdu,
            )
            .unwrap_or_else(|e| panic!("{e}"));
        pdu
    });
    match io.recv() {
        Rx::Resp(c) => assert!(!status_of(&c).is_success()),
        Rx::Closed => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(
        ctl.writes_done(),
        0,
        "I/O of a dead association reached the backend"
    );
}
