//! Connect handling on a fresh queue: arbitrary Connect commands and Connect data,
//! starting from well-formed ones the fuzzer mutates. Input: one control byte (bit 0:
//! keep the opcode/FCTYPE of a Connect; bit 1: an admin queue first exists and its
//! CNTLID goes into the data; bits 2-3: transport queue id 0, 1, 2 or from the
//! command), a 4-byte SGL length, then bytes overlaid on the SQE (64) and on a valid
//! Connect data (1024). Invariants: nothing panics; a refused Connect leaves the
//! queue unconnected; a successful one leaves it bound to a live controller; every
//! queue is torn down without leaking its controller.

use nvmf_common::types::{Cntlid, Qid};
use nvmf_common::wire::fabrics::{fctype, ConnectCmd, FABRICS_OPCODE};
use nvmf_initiator::command;

use super::rig::{Done, Rig};

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some((&ctl, rest)) = input.split_first() else {
        return;
    };
    let Some(mut rig) = Rig::new() else {
        return;
    };
    let (sgl_len, rest) = match rest.split_first_chunk::<4>() {
        Some((l, r)) => (u32::from_le_bytes(*l) % 4096, r),
        None => (1024, rest),
    };
    let (admin, cntlid) = if ctl & 2 != 0 {
        match rig.admin_up(4) {
            Some((q, c)) => (Some(q), c),
            None => panic!("a well-formed admin Connect failed"),
        }
    } else {
        (None, Cntlid::DYNAMIC)
    };
    let mut sqe = command::connect(Qid(0), 31, 0);
    let mut data = rig.connect_data(cntlid).to_vec();
    for (i, b) in rest.iter().enumerate() {
        if let Some(s) = sqe.get_mut(i) {
            *s ^= b;
        } else if let Some(d) = data.get_mut(i - 64) {
            *d ^= b;
        }
    }
    if ctl & 1 != 0 {
        let mut c = ConnectCmd::new_unchecked(&mut sqe[..]);
        let cid = c.as_sqe().cid();
        c.set_header(fctype::CONNECT, cid);
    }
    let cmd_qid = ConnectCmd::new_unchecked(&sqe[..]).qid();
    let qid = match (ctl >> 2) & 3 {
        0 => 0,
        1 => 1,
        2 => 2,
        _ => cmd_qid,
    };
    let mut q = rig.queue(qid);
    let is_connect = sqe[0] == FABRICS_OPCODE && sqe[4] == fctype::CONNECT;
    match rig.exec(&mut q, &sqe, sgl_len, &data) {
        Done::Completed(st, _) => {
            if st.is_success() {
                assert!(
                    is_connect,
                    "a non-Connect succeeded on an unconnected queue"
                );
                let ctrl = q.ctrl.clone();
                assert!(
                    ctrl.is_some_and(|c| !c.is_dead()),
                    "connected to no live controller"
                );
            } else {
                assert!(q.ctrl.is_none(), "a failed Connect bound the queue");
            }
        }
        Done::Held => panic!("a command held on an unconnected queue"),
    }
    // A second Connect on the same queue never succeeds once connected.
    if q.ctrl.is_some() {
        match rig.exec(&mut q, &sqe, sgl_len, &data) {
            Done::Completed(st, _) => assert!(!st.is_success(), "second Connect succeeded"),
            Done::Held => panic!("held"),
        }
    }
    q.teardown();
    if let Some(mut a) = admin {
        a.teardown();
    }
    // Every controller is gone once its queues are.
    if let Some(sub) = rig.target.subsystem_by_name(super::rig::NQN) {
        for c in sub.controllers() {
            assert!(c.is_dead(), "controller {} outlived its queues", c.cntlid);
        }
    }
}
