//! The command dispatcher against a RAM namespace: a controller with an enabled
//! admin queue and two I/O queues runs a sequence of arbitrary commands. Input:
//! records of 1 byte (bits 0-1: admin, I/O 1, I/O 2, or tear the admin queue down
//! (the association ends); bit 2: force PSDT to SGL; bit 3: use the plan's length as
//! the SGL length, else the next 4 bytes), then 64 SQE bytes; host-to-controller data
//! is a pattern from the SQE. Invariants: nothing panics; every command completes
//! once (or is held: AER); once the association is gone nothing reaches the backend
//! (the RAM image stays as it was); reads never see bytes other than what writes put.

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
        let data: Vec<u8> = (0..len as usize).map(|i| sqe[i % 64] ^ (i as u8)).collect();
        let before = dead.then(|| ram_image(&mut rig));
        match rig.exec(q, &sqe, len, &data) {
            Done::Completed(st, _) => {
                if dead && q.qid.0 != 0 {
                    assert!(
                        !st.is_success() || is_harmless(&sqe),
                        "I/O after the association ended: {st}"
                    );
                }
            }
            Done::Held => assert_eq!(q.qid.0, 0, "only admin commands are held"),
        }
        if let Some(b) = before {
            assert!(
                b == ram_image(&mut rig),
                "the namespace changed after its controller was gone"
            );
        }
    }
    io1.teardown();
    io2.teardown();
    if !dead {
        admin.teardown();
    }
}

/// Commands that succeed without touching anything (none on a dead association).
fn is_harmless(_sqe: &[u8; 64]) -> bool {
    false
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

/// The whole 1 MiB RAM namespace as a fresh admin-less read sees it: read through
/// the backend directly.
fn ram_image(rig: &mut Rig) -> Vec<u8> {
    use nvmf_target::backend::{DmaSlice, IoOp};
    let Some(sub) = rig.target.subsystem_by_name(super::rig::NQN) else {
        return Vec::new();
    };
    let Some(ns) = sub.namespace(nvmf_common::types::Nsid(1)) else {
        return Vec::new();
    };
    let size = ns.backend.info().size_bytes as usize;
    let Some(buf) = nvmf_common::verbs::DmaBuffer::new(size).map(std::sync::Arc::new) else {
        return Vec::new();
    };
    let Ok(mut ch) = ns.backend.open_channel() else {
        return Vec::new();
    };
    let Some(slice) = DmaSlice::new(buf.clone(), 0, size) else {
        return Vec::new();
    };
    if ch
        .submit(
            u64::MAX,
            IoOp::Read {
                offset: 0,
                buf: slice,
            },
        )
        .is_err()
    {
        return Vec::new();
    }
    ch.flush();
    let mut out = Vec::new();
    while ch.in_flight() > 0 {
        ch.poll(&mut out);
    }
    let mut v = vec![0u8; size];
    let _ = buf.read_at(0, &mut v);
    v
}
