//! Namespace visibility per host (issue 26, item 1): two hosts, four namespaces, each
//! host seeing only its own. A namespace a host may not see is, to that host, an
//! inactive NSID everywhere: the Active Namespace ID list, Identify Namespace (zeroes),
//! the descriptor list, I/O, the ANA log, reservations and their log. Visibility
//! changes live (`ns-add-host`, `ns-remove-host`, `add-ns --no-auto-visible`, a
//! reloaded file): the host concerned gets Namespace Attribute Changed and the
//! Changed Namespace List, the other host nothing.

use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::admin::{aer_notice, aer_type};
use nvmf_common::wire::ana::decode_log;
use nvmf_common::wire::log::lid;
use nvmf_common::wire::resv::{acquire_action as acq, cptpl, register_action as reg, ResvType};
use nvmf_common::wire::status::{generic, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::queue::Queue;
use nvmf_initiator::transport::DataDir;
use nvmf_target::live::ctl::{handle, request, CtlServer, Request, Response};
use nvmf_target::live::{Op, RefusalKind};
use nvmf_tests::ops_support::{
    changed_ns_list, connect_as, free_port, host, nsze, start_live, tmp_path, wait_aer, LiveTarget,
};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:tenants";
const IO_TIMEOUT: Duration = Duration::from_secs(5);

fn h(n: u8) -> String {
    host(n).0.to_string()
}

/// Namespaces 1 and 2 are host 1's, 3 and 4 host 2's; 2 and 4 sit in ANA groups of
/// their own (2 and 3).
fn yaml(port: u16) -> String {
    let (h1, h2) = (h(1), h(2));
    format!(
        "ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: \"{port}\", subsystems: [{SUB}] }}
subsystems:
  - nqn: {SUB}
    allow_any_host: true
    namespaces:
      - {{ nsid: 1, device_path: \"ram:4M\", auto_visible: false, visible_to: [\"{h1}\"] }}
      - {{ nsid: 2, device_path: \"ram:4M\", auto_visible: false, visible_to: [\"{h1}\"], anagrpid: 2 }}
      - {{ nsid: 3, device_path: \"ram:4M\", auto_visible: false, visible_to: [\"{h2}\"] }}
      - {{ nsid: 4, device_path: \"ram:4M\", auto_visible: false, visible_to: [\"{h2}\"], anagrpid: 3 }}
"
    )
}

fn sub() -> Nqn {
    Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"))
}

/// Host `n` connected with one I/O queue.
struct Host {
    ctrl: Controller,
    q: std::cell::RefCell<Queue>,
}

impl Host {
    fn connect(t: &LiveTarget, n: u8) -> Host {
        let mut ctrl =
            connect_as(&t.fabric(1), n, &sub(), 1, 5000).unwrap_or_else(|e| panic!("{e}"));
        let q = ctrl
            .take_io_queues()
            .pop()
            .unwrap_or_else(|| panic!("no I/O queue"));
        Host { ctrl, q: q.into() }
    }

    /// One command with a 4 KiB buffer holding `data`; its status and the buffer after.
    fn exec(&self, sqe: [u8; 64], data: &[u8], dir: DataDir) -> (Status, Vec<u8>) {
        self.exec_len(sqe, data, dir, 4096)
    }

    /// [`Host::exec`] with a buffer of `len` bytes.
    fn exec_len(&self, sqe: [u8; 64], data: &[u8], dir: DataDir, len: usize) -> (Status, Vec<u8>) {
        let buf = self.ctrl.alloc(len).unwrap_or_else(|e| panic!("{e}"));
        assert!(buf.write_at(0, data));
        let c = self
            .q
            .borrow_mut()
            .execute(sqe, Some(&buf), dir, IO_TIMEOUT)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![0u8; len];
        assert!(buf.read_at(0, &mut out));
        (c.status, out)
    }

    fn read(&self, nsid: u32) -> (Status, Vec<u8>) {
        let sqe = command::read(Nsid(nsid), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
        self.exec(sqe, &[], DataDir::FromCtrl)
    }

    fn write(&self, nsid: u32, fill: u8) -> Status {
        let sqe = command::write(Nsid(nsid), 0, 8, false).unwrap_or_else(|e| panic!("{e}"));
        self.exec(sqe, &[fill; 4096], DataDir::ToCtrl).0
    }

    /// An admin command reading 4 KiB: its status and data.
    fn admin(&self, sqe: [u8; 64]) -> (Status, Vec<u8>) {
        let buf = self.ctrl.alloc(4096).unwrap_or_else(|e| panic!("{e}"));
        let c = self
            .ctrl
            .admin_execute(sqe, Some(&buf), DataDir::FromCtrl)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut out = vec![0u8; 4096];
        assert!(buf.read_at(0, &mut out));
        (c.status, out)
    }

    /// Identify CNS 02h from NSID 0.
    fn active_nsids(&self) -> Vec<u32> {
        let (st, page) = self.admin(command::identify_active_ns_list(Nsid(0)));
        assert!(st.is_success(), "active NS list: {st}");
        page.chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .take_while(|&n| n != 0)
            .collect()
    }

    /// The ANA log: (group, its NSIDs) per descriptor.
    fn ana_groups(&self) -> Vec<(u32, Vec<u32>)> {
        let sqe = command::get_log_page(lid::ANA, Nsid::NONE, 4096, 0, false)
            .unwrap_or_else(|e| panic!("{e}"));
        let (st, page) = self.admin(sqe);
        assert!(st.is_success(), "ANA log: {st}");
        let (_, groups) = decode_log(&page).unwrap_or_else(|| panic!("ANA log does not decode"));
        groups.into_iter().map(|g| (g.grpid, g.nsids)).collect()
    }

    fn resv(&self, sqe: [u8; 64], crkey: u64, other: u64) -> Status {
        let mut d = crkey.to_le_bytes().to_vec();
        d.extend_from_slice(&other.to_le_bytes());
        self.exec_len(sqe, &d, DataDir::ToCtrl, d.len()).0
    }

    /// The next Reservation Notification log page: (count, type, nsid).
    fn resv_notice(&self) -> (u64, u8, u32) {
        let p = self
            .ctrl
            .get_log_page(lid::RESERVATION_NOTIFICATION, Nsid::NONE, 64, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        let word = |r: std::ops::Range<usize>| p.get(r).unwrap_or_default().to_vec();
        let count = u64::from_le_bytes(word(0..8).try_into().unwrap_or_default());
        let nsid = u32::from_le_bytes(word(12..16).try_into().unwrap_or_default());
        (count, p[8], nsid)
    }
}

fn invalid_ns(s: Status) -> bool {
    s.is(Sct::Generic, generic::INVALID_NAMESPACE) && s.dnr
}

fn assert_ns_notice(dw0: u32) {
    assert_eq!(dw0 & 0x7, u32::from(aer_type::NOTICE), "dw0 {dw0:#x}");
    assert_eq!((dw0 >> 8) & 0xFF, u32::from(aer_notice::NS_ATTR_CHANGED));
    assert_eq!((dw0 >> 16) & 0xFF, u32::from(lid::CHANGED_NS));
}

fn change(t: &LiveTarget, op: Op) -> Response {
    handle(&t.live, &Request::Change(op))
}

fn ns_host(add: bool, nsid: u32, host: &str) -> Op {
    let (nqn, host) = (SUB.to_string(), host.to_string());
    if add {
        Op::NsAddHost { nqn, nsid, host }
    } else {
        Op::NsRemoveHost { nqn, nsid, host }
    }
}

#[test]
fn each_host_sees_only_its_own_namespaces() {
    let t = start_live(&yaml(free_port()), None);
    let (a, b) = (Host::connect(&t, 1), Host::connect(&t, 2));
    // A host with no namespace of its own sees none.
    let c = Host::connect(&t, 3);

    // Active Namespace ID list, and what the host found at connect.
    assert_eq!(a.active_nsids(), vec![1, 2]);
    assert_eq!(b.active_nsids(), vec![3, 4]);
    assert_eq!(c.active_nsids(), Vec::<u32>::new());
    let found = |h: &Host| {
        h.ctrl
            .namespaces()
            .iter()
            .map(|n| n.nsid.0)
            .collect::<Vec<_>>()
    };
    assert_eq!((found(&a), found(&b)), (vec![1, 2], vec![3, 4]));
    // From NSID 2 on: only what follows, still filtered.
    let (_, page) = a.admin(command::identify_active_ns_list(Nsid(1)));
    assert_eq!(&page[..8], &[2, 0, 0, 0, 0, 0, 0, 0]);

    for (me, mine, theirs) in [(&a, [1, 2], [3, 4]), (&b, [3, 4], [1, 2])] {
        for n in mine {
            assert_eq!(nsze(&me.ctrl, n), (4 << 20) / 512);
            let (st, _) = me.admin(command::identify_ns_descriptors(Nsid(n)));
            assert!(st.is_success(), "descriptors of {n}: {st}");
            assert!(me.write(n, n as u8).is_success());
            let (st, data) = me.read(n);
            assert!(
                st.is_success() && data.iter().all(|&x| x == n as u8),
                "{st}"
            );
        }
        for n in theirs {
            // Identify Namespace of an inactive NSID: a zeroed structure, success.
            let (st, data) = me.admin(command::identify_namespace(Nsid(n)));
            assert!(st.is_success(), "{st}");
            assert!(
                data.iter().all(|&x| x == 0),
                "Identify Namespace {n} not zeroed"
            );
            let (st, _) = me.admin(command::identify_ns_descriptors(Nsid(n)));
            assert!(invalid_ns(st), "descriptors of {n}: {st}");
            let (st, _) = me.read(n);
            assert!(invalid_ns(st), "read {n}: {st}");
            assert!(invalid_ns(me.write(n, 0xEE)), "write {n}");
        }
    }
    // The other host's writes never reached these namespaces.
    assert!(a.read(1).1.iter().all(|&x| x == 1));
    assert!(b.read(3).1.iter().all(|&x| x == 3));

    // ANA log: the groups holding namespaces the host sees, with only those.
    assert_eq!(a.ana_groups(), vec![(1, vec![1]), (2, vec![2])]);
    assert_eq!(b.ana_groups(), vec![(1, vec![3]), (3, vec![4])]);
    assert_eq!(c.ana_groups(), vec![(1, vec![])]);
}

#[test]
fn reservations_on_a_masked_namespace_are_refused_and_its_notices_withheld() {
    let t = start_live(&yaml(free_port()), None);
    let (a, b) = (Host::connect(&t, 1), Host::connect(&t, 2));
    let register =
        |nsid| command::resv_register(Nsid(nsid), reg::REGISTER, false, cptpl::NO_CHANGE);

    // Host 1 acts on host 2's namespace as on one that does not exist.
    assert!(invalid_ns(a.resv(register(3), 0, 0xA)));
    let (st, _) = a.exec(command::resv_report(Nsid(3), 4096), &[], DataDir::FromCtrl);
    assert!(invalid_ns(st), "report: {st}");
    let acquire = command::resv_acquire(Nsid(3), acq::ACQUIRE, ResvType::WriteExclusive as u8);
    assert!(invalid_ns(a.resv(acquire, 0xA, 0)));

    // Namespace 3 shared, both register, host 1 holds it; then hidden from host 1,
    // whose registration host 2 preempts: host 1 hears nothing of it.
    let r = change(&t, ns_host(true, 3, &h(1)));
    assert!(r.ok, "{:?}", r.error);
    assert_ns_notice(wait_aer(&a.ctrl));
    assert_eq!(changed_ns_list(&a.ctrl), vec![3]);
    let st = a.resv(register(3), 0, 0xA);
    assert!(st.is_success(), "{st}");
    assert!(b.resv(register(3), 0, 0xB).is_success());
    let acquire = command::resv_acquire(Nsid(3), acq::ACQUIRE, ResvType::WriteExclusive as u8);
    assert!(a.resv(acquire, 0xA, 0).is_success());
    let r = change(&t, ns_host(false, 3, &h(1)));
    assert!(r.ok, "{:?}", r.error);
    assert_ns_notice(wait_aer(&a.ctrl));
    assert_eq!(changed_ns_list(&a.ctrl), vec![3]);
    let preempt = command::resv_acquire(Nsid(3), acq::PREEMPT, ResvType::WriteExclusive as u8);
    assert!(b.resv(preempt, 0xB, 0xA).is_success());
    // The log is empty for host 1 (its notice was for a namespace it does not see)...
    assert_eq!(a.resv_notice(), (0, 0, 0));
    // ...and the next event it gets is the next change of its own namespaces.
    let r = change(&t, ns_host(true, 3, &h(1)));
    assert!(r.ok, "{:?}", r.error);
    assert_ns_notice(wait_aer(&a.ctrl));
    // Its registration was preempted while hidden: the report shows host 2 alone.
    let (st, page) = a.exec(command::resv_report(Nsid(3), 4096), &[], DataDir::FromCtrl);
    assert!(st.is_success(), "{st}");
    let (_, _, _, regs) = nvmf_common::wire::resv::decode_status_ext(&page)
        .unwrap_or_else(|| panic!("report does not decode"));
    assert_eq!(regs.len(), 1);
}

#[test]
fn a_visibility_change_is_live_and_tells_only_the_host_concerned() {
    let t = start_live(&yaml(free_port()), None);
    let sock = CtlServer::start(t.live.clone(), &tmp_path("visibility.sock"))
        .unwrap_or_else(|e| panic!("ctl: {e}"));
    let ctl = |op: Op| request(sock.path(), &Request::Change(op)).unwrap_or_else(|e| panic!("{e}"));
    let (a, b) = (Host::connect(&t, 1), Host::connect(&t, 2));
    assert!(b.write(3, 0x33).is_success());

    // Host 1 gains namespace 3: no reopen (host 2's data is there), one notice to host 1.
    let r = ctl(ns_host(true, 3, &h(1)));
    assert!(r.ok, "{:?}", r.error);
    assert_eq!(
        r.changes,
        vec![format!(
            "subsystem {SUB}: namespace 3 now visible to {}",
            h(1)
        )]
    );
    assert_ns_notice(wait_aer(&a.ctrl));
    assert_eq!(changed_ns_list(&a.ctrl), vec![3]);
    assert_eq!(a.active_nsids(), vec![1, 2, 3]);
    let (st, data) = a.read(3);
    assert!(st.is_success() && data.iter().all(|&x| x == 0x33), "{st}");
    // Host 2 (whose view did not change) heard nothing: its list is empty.
    assert_eq!(changed_ns_list(&b.ctrl), Vec::<u32>::new());

    // And loses it again.
    let r = ctl(ns_host(false, 3, &h(1)));
    assert!(r.ok, "{:?}", r.error);
    assert_ns_notice(wait_aer(&a.ctrl));
    assert_eq!(changed_ns_list(&a.ctrl), vec![3]);
    assert_eq!(a.active_nsids(), vec![1, 2]);
    assert_eq!(nsze(&a.ctrl, 3), 0);
    assert!(invalid_ns(a.read(3).0));
    assert!(b.read(3).0.is_success());

    // A namespace added with --no-auto-visible is seen by nobody, then by host 2 only.
    let mut add = Op::add_ns(SUB, Some(5), "ram:4M");
    if let Op::AddNs { auto_visible, .. } = &mut add {
        *auto_visible = false;
    }
    assert!(ctl(add).ok);
    assert_eq!(a.active_nsids(), vec![1, 2]);
    assert_eq!(b.active_nsids(), vec![3, 4]);
    assert!(ctl(ns_host(true, 5, &h(2))).ok);
    assert_ns_notice(wait_aer(&b.ctrl));
    // Host 2's list holds only 5 (nothing before told it anything).
    assert_eq!(changed_ns_list(&b.ctrl), vec![5]);
    assert_eq!(b.active_nsids(), vec![3, 4, 5]);
    // Removing a namespace tells only the hosts that saw it.
    assert!(
        ctl(Op::RemoveNs {
            nqn: SUB.into(),
            nsid: 5,
            delete_backing: false,
        })
        .ok
    );
    assert_ns_notice(wait_aer(&b.ctrl));
    assert_eq!(changed_ns_list(&b.ctrl), vec![5]);
    assert_eq!(changed_ns_list(&a.ctrl), Vec::<u32>::new());
    // So does a namespace that every host sees, once added.
    assert!(ctl(Op::add_ns(SUB, Some(6), "ram:4M")).ok);
    assert_ns_notice(wait_aer(&a.ctrl));
    assert_ns_notice(wait_aer(&b.ctrl));
    assert_eq!(changed_ns_list(&a.ctrl), vec![6]);
    assert_eq!(changed_ns_list(&b.ctrl), vec![6]);
}

#[test]
fn visibility_refusals_are_typed_and_change_nothing() {
    let t = start_live(&yaml(free_port()), None);
    let before = t.live.running();
    let cases = [
        // SPDK refuses a host list on an auto-visible namespace (EPERM).
        (
            ns_host(true, 6, &h(1)),
            RefusalKind::NotFound,
            "has no namespace 6",
        ),
        (
            ns_host(true, 1, &h(1)),
            RefusalKind::AlreadyExists,
            "already visible to",
        ),
        (
            ns_host(false, 1, &h(2)),
            RefusalKind::NotFound,
            "is not visible to",
        ),
        (
            ns_host(true, 1, "host-2"),
            RefusalKind::InvalidArgument,
            "host: \"host-2\"",
        ),
        (
            ns_host(true, 1, "nqn.example:host-2"),
            RefusalKind::InvalidArgument,
            "is not of the form",
        ),
        (
            Op::NsAddHost {
                nqn: "nqn.2024-01.io.nvmf-rs:none".into(),
                nsid: 1,
                host: h(1),
            },
            RefusalKind::NotFound,
            "no subsystem",
        ),
    ];
    for (op, kind, why) in cases {
        let r = change(&t, op.clone());
        assert!(!r.ok, "{op:?} accepted");
        assert_eq!(r.refusal, Some(kind), "{op:?}: {:?}", r.error);
        let e = r.error.unwrap_or_default();
        assert!(e.contains(why), "{op:?}: {e}");
    }
    // Hosts cannot be chosen on a namespace every host sees.
    assert!(change(&t, Op::add_ns(SUB, Some(7), "ram:4M")).ok);
    let r = change(&t, ns_host(true, 7, &h(1)));
    assert_eq!(
        r.refusal,
        Some(RefusalKind::FailedPrecondition),
        "{:?}",
        r.error
    );
    assert!(r.error.unwrap_or_default().contains("--no-auto-visible"));
    assert!(
        change(
            &t,
            Op::RemoveNs {
                nqn: SUB.into(),
                nsid: 7,
                delete_backing: false,
            }
        )
        .ok
    );
    assert_eq!(t.live.running(), before);
}

#[test]
fn a_reloaded_file_changes_visibility_live_without_reopening() {
    let path = tmp_path("visibility.yaml");
    let port = free_port();
    std::fs::write(&path, yaml(port)).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&yaml(port), Some(path.clone()));
    let (a, b) = (Host::connect(&t, 1), Host::connect(&t, 2));
    assert!(b.write(4, 0x44).is_success());
    // Namespace 4 now shared with host 1, in the file.
    let shared = yaml(port).replace(
        &format!("visible_to: [\"{}\"], anagrpid: 3", h(2)),
        &format!("visible_to: [\"{}\", \"{}\"], anagrpid: 3", h(2), h(1)),
    );
    assert_ne!(shared, yaml(port));
    std::fs::write(&path, shared).unwrap_or_else(|e| panic!("{e}"));
    let changes = t.live.reload().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        changes,
        vec![format!(
            "subsystem {SUB}: namespace 4 now visible to {}",
            h(1)
        )]
    );
    assert_ns_notice(wait_aer(&a.ctrl));
    assert_eq!(changed_ns_list(&a.ctrl), vec![4]);
    assert_eq!(changed_ns_list(&b.ctrl), Vec::<u32>::new());
    let (st, data) = a.read(4);
    assert!(st.is_success() && data.iter().all(|&x| x == 0x44), "{st}");
    assert_eq!(
        a.ana_groups(),
        vec![(1, vec![1]), (2, vec![2]), (3, vec![4])]
    );
    let _ = std::fs::remove_file(&path);
}
