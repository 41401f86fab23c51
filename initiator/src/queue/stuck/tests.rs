//! The stuck-command view of a [`Queue`] on the in-memory fake transport, with the
//! clock given by the test (no sleeping) except where `execute` waits for real.

use std::time::{Duration, Instant};

use nvmf_common::types::{Cid, Nsid, Qid};
use nvmf_common::wire::nvm::opcode as nvm_op;
use nvmf_common::wire::status::Status;
use tracing::Level;

use crate::command::{self, SqeBytes};
use crate::error::Error;
use crate::queue::{CommandAges, CommandPhase, Queue};
use crate::testing::{logged_at, FakeQueue};
use crate::transport::DataDir;

const TIMEOUT: Duration = Duration::from_secs(30);
const BOUND: Duration = Duration::from_secs(10);
const SEC: Duration = Duration::from_secs(1);

fn read_sqe() -> SqeBytes {
    command::read(Nsid(1), 0, 1, false).unwrap()
}

fn write_sqe() -> SqeBytes {
    command::write(Nsid(1), 8, 1, false).unwrap()
}

/// A queue on a fake that answers nothing until told, with the default-like bounds.
fn silent_queue(qid: u16) -> (Queue, crate::testing::FakeHandle) {
    let (fq, h) = FakeQueue::new(Qid(qid), 8);
    h.set_auto_reply(false);
    let mut q = Queue::new(Box::new(fq));
    q.set_timeout(TIMEOUT);
    q.set_stuck_warn(BOUND);
    (q, h)
}

#[test]
fn lists_outstanding_commands_with_age_and_phase() {
    let (mut q, h) = silent_queue(3);
    let t0 = Instant::now();
    q.submit_at(read_sqe(), None, DataDir::None, 1, t0).unwrap(); // cid 0
    q.submit_at(write_sqe(), None, DataDir::None, 2, t0 + SEC)
        .unwrap(); // cid 1
    q.flush().unwrap();
    // Submitted after the last flush: not yet handed to the fabric.
    q.submit_at(read_sqe(), None, DataDir::None, 3, t0 + 4 * SEC)
        .unwrap(); // cid 2

    let now = t0 + 5 * SEC;
    let all = q.outstanding_commands(now, Duration::ZERO);
    let seen: Vec<(u16, &str, Duration, CommandPhase)> = all
        .iter()
        .map(|c| (c.cid.0, c.name, c.age, c.phase))
        .collect();
    assert_eq!(
        seen,
        vec![
            (0, "Read", 5 * SEC, CommandPhase::Sent),
            (1, "Write", 4 * SEC, CommandPhase::Sent),
            (2, "Read", SEC, CommandPhase::Queued),
        ],
        "oldest first"
    );
    assert!(all.iter().all(|c| c.qid == Qid(3) && !c.warned));
    assert_eq!(all[1].opcode, nvm_op::WRITE);
    assert!(
        all[0].to_string().contains("queue 3 cid 0 Read"),
        "{}",
        all[0]
    );
    // Only those older than the bound asked for.
    let old = q.outstanding_commands(now, 4 * SEC);
    assert_eq!(
        old.iter().map(|c| c.cid).collect::<Vec<_>>(),
        [Cid(0), Cid(1)]
    );
    assert_eq!(q.oldest_age(now), Some(5 * SEC));

    // A completed command is no longer listed; flushing moves the queued one on.
    h.complete(0, Status::SUCCESS, 0);
    let mut out = Vec::new();
    q.poll(&mut out).unwrap();
    q.flush().unwrap();
    let left = q.outstanding_commands(now, Duration::ZERO);
    assert_eq!(
        left.iter().map(|c| (c.cid, c.phase)).collect::<Vec<_>>(),
        [(Cid(1), CommandPhase::Sent), (Cid(2), CommandPhase::Sent)]
    );
    assert_eq!(q.oldest_age(now), Some(4 * SEC));
}

#[test]
fn warns_once_when_a_command_passes_the_bound() {
    let (mut q, h) = silent_queue(2);
    let t0 = Instant::now();
    q.submit_at(write_sqe(), None, DataDir::None, 7, t0)
        .unwrap();
    q.flush().unwrap();

    let early = logged_at(Level::WARN, || {
        assert!(q.expire(t0 + 9 * SEC).is_empty());
    });
    assert!(!early.contains("stuck command"), "{early}");

    let log = logged_at(Level::WARN, || {
        assert!(q.expire(t0 + 11 * SEC).is_empty());
    });
    assert!(log.contains("stuck command"), "{log}");
    for field in [
        "qid=2",
        "cid=0",
        "opcode=0x01",
        "command=\"Write\"",
        "age_ms=11000",
        "phase=sent",
        "timeout_ms=30000",
    ] {
        assert!(log.contains(field), "{field} missing: {log}");
    }
    let listed = q.outstanding_commands(t0 + 11 * SEC, BOUND);
    assert_eq!(listed.len(), 1);
    assert!(listed[0].warned);

    // Once per command: later scans say nothing more, but keep the ages.
    let again = logged_at(Level::WARN, || {
        q.expire(t0 + 12 * SEC);
    });
    assert!(!again.contains("stuck command"), "{again}");
    assert_eq!(
        q.command_ages(),
        CommandAges {
            stuck: 1,
            longest: 12 * SEC
        }
    );

    // It completes after all: said at INFO, and the cid is free again.
    h.complete(0, Status::SUCCESS, 0);
    let done = logged_at(Level::INFO, || {
        let mut out = Vec::new();
        assert_eq!(q.poll(&mut out).unwrap(), 1);
    });
    assert!(done.contains("stuck command completed"), "{done}");
    assert_eq!(q.outstanding(), 0);
    // A new command in the same cid is a new command: it may be reported again.
    q.submit_at(write_sqe(), None, DataDir::None, 8, t0 + 20 * SEC)
        .unwrap();
    let second = logged_at(Level::WARN, || {
        q.expire(t0 + 31 * SEC);
    });
    assert!(second.contains("stuck command"), "{second}");
    assert_eq!(q.command_ages().stuck, 2);
}

#[test]
fn the_timeout_still_fires_after_the_warning() {
    let (mut q, _h) = silent_queue(1);
    let t0 = Instant::now();
    q.submit_at(read_sqe(), None, DataDir::None, 5, t0).unwrap();
    q.flush().unwrap();
    q.expire(t0 + BOUND);
    assert_eq!(q.command_ages().stuck, 1);
    assert_eq!(q.expire(t0 + TIMEOUT + SEC), vec![5]);
    assert!(q.is_broken());
    // Timed out: completed host-side, so no longer an outstanding command.
    assert!(q
        .outstanding_commands(t0 + TIMEOUT + SEC, Duration::ZERO)
        .is_empty());
    assert_eq!(q.oldest_age(t0 + TIMEOUT + SEC), None);
}

#[test]
fn no_warning_when_off_or_for_an_async_event_request() {
    let (mut q, _h) = silent_queue(1);
    q.set_stuck_warn(Duration::ZERO);
    let t0 = Instant::now();
    q.submit_at(read_sqe(), None, DataDir::None, 1, t0).unwrap();
    q.flush().unwrap();
    let log = logged_at(Level::WARN, || {
        q.expire(t0 + 20 * SEC);
    });
    assert!(!log.contains("stuck command"), "{log}");
    // The ages are still recorded.
    assert_eq!(q.command_ages().longest, 20 * SEC);
    assert_eq!(q.command_ages().stuck, 0);

    // An AER waits for an event by design, however long that takes.
    let (mut admin, _h) = silent_queue(0);
    admin.set_timeout(Duration::ZERO);
    admin
        .submit_at(command::async_event_request(), None, DataDir::None, 1, t0)
        .unwrap();
    admin.flush().unwrap();
    let log = logged_at(Level::WARN, || {
        admin.expire(t0 + 3600 * SEC);
    });
    assert!(!log.contains("stuck command"), "{log}");
    assert_eq!(admin.oldest_age(t0 + 3600 * SEC), None);
    // It is outstanding all the same.
    let listed = admin.outstanding_commands(t0 + 3600 * SEC, Duration::ZERO);
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].name, "Asynchronous Event Request");
}

#[test]
fn execute_reports_a_stuck_command_while_it_waits() {
    let (fq, h) = FakeQueue::new(Qid(0), 4);
    h.set_auto_reply(false);
    let mut q = Queue::new(Box::new(fq));
    q.set_stuck_warn(Duration::from_millis(20));
    let log = logged_at(Level::WARN, || {
        let r = q.execute(
            command::keep_alive(),
            None,
            DataDir::None,
            Duration::from_millis(400),
        );
        assert!(matches!(r, Err(Error::Timeout(_))));
    });
    assert!(log.contains("stuck command"), "{log}");
    assert!(log.contains("command=\"Keep Alive\""), "{log}");
    assert_eq!(q.command_ages().stuck, 1);
}
