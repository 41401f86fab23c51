//! The command dispatcher against a RAM namespace: a controller with an enabled
//! admin queue and two I/O queues runs a sequence of arbitrary commands. Input:
//! records of 1 byte (bits 0-1: admin, I/O 1, I/O 2, or tear the admin queue down
//! (the association ends); bit 2: force PSDT to SGL; bit 3: use the plan's length as
//! the SGL length, else the next 4 bytes), then 64 SQE bytes; host-to-controller data
//! is a pattern from the SQE. Invariants: nothing panics; every command completes
//! once (or is held: AER); once the association is gone nothing succeeds on an I/O
//! queue and no write reaches the backend (counted by a fault wrapper around it).

use nvmf_common::wire::sqe::{psdt, Sqe};

use super::rig::{Done, Rig};

/// Most records per input (bounds the time one input takes).
const MAX_RECORDS: usize = 64;

/// Runs one input.
pub fn run(input: &[u8]) {
    let Some(mut rig) = Rig::new() else {
        return;
    };
    let Some((mut admin, cntlid)) = rig.admin_up(2) else {
        panic!("a well-formed admin Connect failed");
    };
    let (Some(mut io1), Some(mut io2)) = (rig.io_up(cntlid, 1), rig.io_up(cntlid, 2)) else {
        panic!("well-formed I/O Connects failed");
    };
    let mut rest = input;
    let mut dead = false;
    for _ in 0..MAX_RECORDS {
        let Some((&ctl, r)) = rest.split_first() else {
            break;
        };
        rest = r;
        let sgl_len = if ctl & 8 == 0 {
            let Some((l, r)) = rest.split_first_chunk::<4>() else {
                break;
            };
            rest = r;
            Some(u32::from_le_bytes(*l) % (256 * 1024))
        } else {
            None
        };
        let Some((sqe, r)) = rest.split_first_chunk::<64>() else {
            break;
        };
        rest = r;
        let mut sqe = *sqe;
        if ctl & 4 != 0 {
            Sqe::new_unchecked(&mut sqe[..]).set_psdt(psdt::SGL_MPTR_CONTIGUOUS);
        }
        let q = match ctl & 3 {
            0 => &mut admin,
            1 => &mut io1,
            2 => &mut io2,
            _ => {
                if !dead {
                    admin.teardown();
                    dead = true;
                }
                continue;
            }
        };
        // The SGL length: as given, or what the command needs (so execution is reached).
        let len = match sgl_len {
            Some(l) => l,
            None => plan_len(&mut rig, q, &sqe),
        };
        // Parse refuses anything above MDTS: no need for more data than that.
        let data_len = len.min(rig.target.params.max_io_size) as usize;
        let data: Vec<u8> = (0..data_len).map(|i| sqe[i % 64] ^ (i as u8)).collect();
        let before = rig.faults.writes_done();
        match rig.exec(q, &sqe, len, &data) {
            Done::Completed(st, _) => {
                if dead && q.qid.0 != 0 {
                    assert!(!st.is_success(), "I/O after the association ended: {st}");
                }
            }
            Done::Held => assert_eq!(q.qid.0, 0, "only admin commands are held"),
        }
        if dead {
            assert_eq!(
                rig.faults.writes_done(),
                before,
                "a write reached the namespace after its controller was gone"
            );
        }
    }
    io1.teardown();
    io2.teardown();
    if !dead {
        admin.teardown();
    }
}

/// The length parse would want for `sqe` on `q` (0 when it refuses the command).
fn plan_len(rig: &mut Rig, q: &nvmf_target::core::QueueCtx, sqe: &[u8; 64]) -> u32 {
    let mut req = nvmf_target::core::Request::new();
    req.reset(sqe);
    for guess in [0u32, 512, 4096, 1024] {
        if nvmf_target::core::parse(q, &rig.target, &mut req, guess).is_ok() {
            return guess;
        }
    }
    // Read/Write: NLB x 512 (the rig's block size).
    let nlb = (u32::from_le_bytes([sqe[48], sqe[49], sqe[50], sqe[51]]) & 0xFFFF) + 1;
    nlb * 512
}
