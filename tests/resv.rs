//! Reservations end to end, with two and three hosts (distinct 128-bit host
//! identifiers) over NVMe/TCP: every type against the spec's access table for the
//! holder, a registrant and a non-registrant; keys and conflicts; preempt and
//! preempt-and-abort with their notifications; the report; Persist Through Power Loss
//! across a target restart; a host without an identifier refused.

use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::resv::{
    acquire_action as acq, cptpl, decode_status_ext, log_type, register_action as reg,
    release_action as rel, Access, ResvType,
};
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::queue::Queue;
use nvmf_initiator::transport::DataDir;
use nvmf_tests::ops_support::{options_as, start_yaml, OpsTarget};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:resv";
const NS: Nsid = Nsid(1);

fn yaml(extra: &str) -> String {
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"4420\", subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:4M\"{extra} }}\n"
    )
}

/// A connected host with one I/O queue.
struct Host {
    ctrl: Controller,
    q: Queue,
}

impl Host {
    fn new(t: &OpsTarget, n: u8) -> Host {
        Host::with_id(t, n, [n; 16])
    }

    fn with_id(t: &OpsTarget, n: u8, hostid: [u8; 16]) -> Host {
        let mut o = options_as(n, &Nqn::new(SUB).unwrap(), 1, 5000);
        o.hostid = hostid;
        let mut ctrl = Controller::connect(t.fabric(0), o).unwrap_or_else(|e| panic!("{e}"));
        let q = ctrl.take_io_queues().pop().unwrap();
        Host { ctrl, q }
    }

    fn exec(&mut self, sqe: [u8; 64], data: &[u8], dir: DataDir, len: usize) -> (Status, Vec<u8>) {
        let buf = self.ctrl.alloc(len.max(1)).unwrap();
        assert!(buf.write_at(0, data));
        let c = self
            .q
            .execute(sqe, Some(&buf), dir, Duration::from_secs(5))
            .unwrap();
        let mut out = vec![0u8; len];
        assert!(buf.read_at(0, &mut out));
        (c.status, out)
    }

    fn keys(&mut self, sqe: [u8; 64], a: u64, b: u64) -> Status {
        let mut d = a.to_le_bytes().to_vec();
        d.extend_from_slice(&b.to_le_bytes());
        self.exec(sqe, &d, DataDir::ToCtrl, 16).0
    }

    fn register(&mut self, key: u64) -> Status {
        self.keys(
            command::resv_register(NS, reg::REGISTER, false, cptpl::NO_CHANGE),
            0,
            key,
        )
    }

    fn acquire(&mut self, action: u8, t: ResvType, crkey: u64, prkey: u64) -> Status {
        self.keys(command::resv_acquire(NS, action, t as u8), crkey, prkey)
    }

    fn release(&mut self, action: u8, t: u8, crkey: u64) -> Status {
        self.exec(
            command::resv_release(NS, action, t),
            &crkey.to_le_bytes(),
            DataDir::ToCtrl,
            8,
        )
        .0
    }

    fn io(&mut self, a: Access) -> Status {
        let (sqe, dir) = match a {
            Access::Read => (command::read(NS, 0, 8, false).unwrap(), DataDir::FromCtrl),
            Access::Write => (command::write(NS, 0, 8, false).unwrap(), DataDir::ToCtrl),
        };
        self.exec(sqe, &[0x5A; 4096], dir, 4096).0
    }

    fn report(&mut self) -> (u32, u8, bool, Vec<nvmf_common::wire::resv::Registrant>) {
        let (st, page) = self.exec(command::resv_report(NS, 4096), &[], DataDir::FromCtrl, 4096);
        assert!(st.is_success(), "report: {st}");
        decode_status_ext(&page).unwrap()
    }

    /// The next Reservation Notification log page: (type, nsid).
    fn notice(&self) -> (u8, u32) {
        let p = self
            .ctrl
            .get_log_page(lid::RESERVATION_NOTIFICATION, Nsid::NONE, 64, 0)
            .unwrap();
        (p[8], u32::from_le_bytes(p[12..16].try_into().unwrap()))
    }
}

fn conflict(s: Status) -> bool {
    s.is(Sct::Generic, generic::RESERVATION_CONFLICT) && s.dnr
}

#[test]
fn every_type_against_the_access_table() {
    let t = start_yaml(&yaml(""));
    let (mut a, mut b, mut c) = (Host::new(&t, 1), Host::new(&t, 2), Host::new(&t, 3));
    assert!(a.register(0xA).is_success());
    assert!(b.register(0xB).is_success());
    for ty in ResvType::ALL {
        assert!(a.acquire(acq::ACQUIRE, ty, 0xA, 0).is_success(), "{ty:?}");
        for access in [Access::Read, Access::Write] {
            assert!(a.io(access).is_success(), "{ty:?} holder {access:?}");
            for (h, registrant) in [(&mut b, true), (&mut c, false)] {
                let want = ty.allows(access, false, registrant);
                let st = h.io(access);
                assert_eq!(
                    st.is_success(),
                    want,
                    "{ty:?} registrant={registrant} {access:?}: {st}"
                );
                if !want {
                    assert!(conflict(st), "{st}");
                }
            }
        }
        // Only the holder's type releases it; another type is refused.
        let other = if ty == ResvType::WriteExclusive { 2 } else { 1 };
        assert!(!a.release(rel::RELEASE, other, 0xA).is_success());
        assert!(
            a.release(rel::RELEASE, ty as u8, 0xA).is_success(),
            "{ty:?}"
        );
    }
}

#[test]
fn keys_and_conflicts() {
    let t = start_yaml(&yaml(""));
    let (mut a, mut b) = (Host::new(&t, 1), Host::new(&t, 2));
    assert!(a.register(0xA).is_success());
    assert!(a.register(0xA).is_success(), "same key again is fine");
    assert!(conflict(a.register(0xAA)), "another key while registered");
    assert!(
        conflict(b.acquire(acq::ACQUIRE, ResvType::WriteExclusive, 0xB, 0)),
        "not registered"
    );
    assert!(
        conflict(a.acquire(acq::ACQUIRE, ResvType::WriteExclusive, 0xB, 0)),
        "wrong key"
    );
    assert!(a
        .acquire(acq::ACQUIRE, ResvType::WriteExclusive, 0xA, 0)
        .is_success());
    assert!(b.register(0xB).is_success());
    assert!(
        conflict(b.acquire(acq::ACQUIRE, ResvType::WriteExclusive, 0xB, 0)),
        "held by another"
    );
    // Replace with the wrong current key conflicts; with IEKEY it does not.
    assert!(conflict(b.keys(
        command::resv_register(NS, reg::REPLACE, false, cptpl::NO_CHANGE),
        0x1,
        0xBB
    )));
    assert!(b
        .keys(
            command::resv_register(NS, reg::REPLACE, true, cptpl::NO_CHANGE),
            0x1,
            0xBB
        )
        .is_success());
    // IEKEY is not defined for Acquire.
    let mut sqe = command::resv_acquire(NS, acq::ACQUIRE, 1);
    sqe[40] |= nvmf_common::wire::resv::cdw10::IEKEY as u8;
    let st = b.keys(sqe, 0xBB, 0);
    assert!(st.is(Sct::Generic, generic::INVALID_FIELD), "{st}");
    let (gen, rtype, _, regs) = a.report();
    assert_eq!((rtype, regs.len()), (1, 2));
    assert!(gen >= 3, "generation counts registrations: {gen}");
    assert!(regs
        .iter()
        .any(|r| r.hostid == [1; 16] && r.holds && r.rkey == 0xA));
    assert!(regs
        .iter()
        .any(|r| r.hostid == [2; 16] && !r.holds && r.rkey == 0xBB));
}

#[test]
fn preempt_moves_the_reservation_and_tells_the_preempted() {
    for action in [acq::PREEMPT, acq::PREEMPT_AND_ABORT] {
        let t = start_yaml(&yaml(""));
        let (mut a, mut b, mut c) = (Host::new(&t, 1), Host::new(&t, 2), Host::new(&t, 3));
        assert!(a.register(0xA).is_success());
        assert!(b.register(0xB).is_success());
        assert!(c.register(0xC).is_success());
        assert!(a
            .acquire(
                acq::ACQUIRE,
                ResvType::WriteExclusiveRegistrantsOnly,
                0xA,
                0
            )
            .is_success());
        assert!(b
            .acquire(action, ResvType::WriteExclusive, 0xB, 0xA)
            .is_success());
        assert_eq!(a.notice(), (log_type::REGISTRATION_PREEMPTED, 1));
        // The type changed: the remaining registrant hears the old one was released.
        assert_eq!(c.notice(), (log_type::RESERVATION_RELEASED, 1));
        assert!(
            conflict(a.io(Access::Write)),
            "preempted host may not write"
        );
        assert!(
            conflict(c.io(Access::Write)),
            "Write Exclusive: registrants may not write"
        );
        assert!(b.io(Access::Write).is_success());
        let (_, rtype, _, regs) = b.report();
        assert_eq!((rtype, regs.len()), (ResvType::WriteExclusive as u8, 2));
        // Clear drops everything and tells the others.
        assert!(b.release(rel::CLEAR, 0, 0xB).is_success());
        assert_eq!(c.notice(), (log_type::RESERVATION_PREEMPTED, 1));
        assert!(a.io(Access::Write).is_success());
    }
}

/// The holder preempting another registrant's key removes that registrant and keeps
/// its reservation as it is; preempting its own key changes the type (nvmet's
/// nvmet_pr_preempt, NVMe Base 2.0 "Preempting a Reservation").
#[test]
fn the_holder_preempting_another_key_unregisters_it_and_keeps_the_reservation() {
    let t = start_yaml(&yaml(""));
    let (mut a, mut b) = (Host::new(&t, 1), Host::new(&t, 2));
    assert!(a.register(0xA).is_success());
    assert!(b.register(0xB).is_success());
    let ro = ResvType::WriteExclusiveRegistrantsOnly;
    assert!(a.acquire(acq::ACQUIRE, ro, 0xA, 0).is_success());
    assert!(a
        .acquire(acq::PREEMPT, ResvType::ExclusiveAccess, 0xA, 0xB)
        .is_success());
    assert_eq!(b.notice(), (log_type::REGISTRATION_PREEMPTED, 1));
    let (_, rtype, _, regs) = a.report();
    assert_eq!(rtype, ro as u8, "the reservation's type changed");
    assert_eq!(
        regs.len(),
        1,
        "the preempted registrant is still registered"
    );
    assert!(conflict(b.io(Access::Write)), "an unregistered host wrote");
    // Its own key: the holder changes the type of its reservation.
    assert!(a
        .acquire(acq::PREEMPT, ResvType::ExclusiveAccess, 0xA, 0xA)
        .is_success());
    let (_, rtype, _, regs) = a.report();
    assert_eq!((rtype, regs.len()), (ResvType::ExclusiveAccess as u8, 1));
}

#[test]
fn notification_mask_suppresses_a_type() {
    let t = start_yaml(&yaml(""));
    let (mut a, mut b) = (Host::new(&t, 1), Host::new(&t, 2));
    assert!(a.register(0xA).is_success());
    assert!(b.register(0xB).is_success());
    assert!(b
        .ctrl
        .set_features(
            0x82,
            NS,
            nvmf_common::wire::resv::notify_mask::REGISTRATION_PREEMPTED,
            false
        )
        .is_ok());
    assert!(a
        .acquire(acq::ACQUIRE, ResvType::WriteExclusive, 0xA, 0)
        .is_success());
    assert!(b
        .acquire(acq::PREEMPT, ResvType::WriteExclusive, 0xB, 0xA)
        .is_success());
    assert_eq!(a.notice(), (log_type::EMPTY, 0), "masked");
    assert_eq!(b.ctrl.get_features(0x82, NS, 0).unwrap(), 2);
}

#[test]
fn ptpl_survives_a_restart() {
    let path = std::env::temp_dir().join(format!("nvmf-resv-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let cfg = yaml(&format!(", ptpl_file: {}", path.display()));
    {
        let t = start_yaml(&cfg);
        let mut a = Host::new(&t, 1);
        let st = a.keys(
            command::resv_register(NS, reg::REGISTER, false, cptpl::SET),
            0,
            0xA,
        );
        assert!(st.is_success(), "{st}");
        assert!(a
            .acquire(acq::ACQUIRE, ResvType::ExclusiveAccess, 0xA, 0)
            .is_success());
        assert_eq!(a.ctrl.get_features(0x83, NS, 0).unwrap(), 1);
        drop(a);
        t.server.shutdown();
    }
    let t = start_yaml(&cfg);
    let mut b = Host::new(&t, 2);
    let (_, rtype, ptpls, regs) = b.report();
    assert_eq!(
        (rtype, ptpls, regs.len()),
        (ResvType::ExclusiveAccess as u8, true, 1)
    );
    assert!(
        conflict(b.io(Access::Read)),
        "the restored reservation still excludes others"
    );
    let mut a = Host::new(&t, 1);
    assert!(
        a.io(Access::Write).is_success(),
        "the restored holder writes"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn ptpl_without_a_state_file_is_refused() {
    let t = start_yaml(&yaml(""));
    let mut a = Host::new(&t, 1);
    let st = a.keys(
        command::resv_register(NS, reg::REGISTER, false, cptpl::SET),
        0,
        0xA,
    );
    assert!(
        st.is(Sct::Generic, generic::INVALID_FIELD) && st.dnr,
        "{st}"
    );
}

#[test]
fn a_host_without_a_host_identifier_is_refused() {
    let t = start_yaml(&yaml(""));
    let mut z = Host::with_id(&t, 9, [0; 16]);
    let st = z.register(0x1);
    assert!(
        st.is(Sct::Generic, generic::HOST_ID_INCONSISTENT_FORMAT) && st.dnr,
        "{st}"
    );
}
