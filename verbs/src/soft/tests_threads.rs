//! Soft-provider behaviour across threads: posting and polling from different threads,
//! and two QPs sending to each other at once without deadlock.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use super::tests::{connect_pair, recv, reg, send, sge, End, T};
use super::*;
use crate::{Access, MemoryRegion, WcOpcode, WcStatus, WorkCompletion};

#[test]
fn cross_thread_post_and_poll() {
    const N: u64 = 20_000;
    let dev = SoftDevice::new();
    dev.set_rnr_timeout(T);
    let p = connect_pair(&dev, "xthread");
    let dst = reg(&p.b.pd, 16 * 64, Access::LOCAL_WRITE);
    for i in 0..16u64 {
        recv(&p.b.qp, i, &[sge(&dst, i * 64, 64)]);
    }
    let src = reg(&p.a.pd, 16 * 64, Access::empty());
    let a_qp = Arc::clone(&p.a.qp);
    let a_cq = Arc::clone(&p.a.cq);
    let sender = thread::spawn(move || {
        let mut out = [WorkCompletion::EMPTY; 16];
        let mut completed = 0u64;
        for seq in 0..N {
            let slot = seq % 16;
            let off = (slot * 64) as usize;
            assert!(src.buffer().write_at(off, &seq.to_le_bytes()));
            let sgl = [sge(&src, slot * 64, 8)];
            loop {
                match a_qp.post_send(&[send(seq, &sgl)]) {
                    Ok(()) => break,
                    Err(VerbsError::QueueFull(_)) => {
                        completed += a_cq.poll(&mut out) as u64;
                    }
                    Err(e) => panic!("post_send: {e}"),
                }
            }
            completed += a_cq.poll(&mut out) as u64;
            assert!(out.iter().all(|w| w.status == WcStatus::Success));
        }
        while completed < N {
            completed += a_cq.poll(&mut out) as u64;
        }
    });
    let mut out = [WorkCompletion::EMPTY; 16];
    let mut next = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while next < N {
        assert!(Instant::now() < deadline);
        let n = p.b.cq.poll(&mut out);
        for w in &out[..n] {
            assert_eq!(w.status, WcStatus::Success);
            assert_eq!(w.byte_len, 8);
            assert_eq!(w.qp_num, p.b.qp.qp_num());
            let mut v = [0u8; 8];
            assert!(dst.buffer().read_at((w.wr_id * 64) as usize, &mut v));
            assert_eq!(u64::from_le_bytes(v), next, "in order, intact");
            next += 1;
            recv(&p.b.qp, w.wr_id, &[sge(&dst, w.wr_id * 64, 64)]);
        }
    }
    sender.join().unwrap();
    let c = dev.counters();
    assert!(c.send_wrs >= N && c.completions >= 2 * N);
    assert!(!p.a.qp.is_dead() && !p.b.qp.is_dead());
}

#[test]
fn bidirectional_traffic_does_not_deadlock() {
    const N: u64 = 5_000;
    let dev = SoftDevice::new();
    dev.set_rnr_timeout(T);
    let p = connect_pair(&dev, "bidi");
    let run = |end: End| {
        thread::spawn(move || {
            let rx = reg(&end.pd, 16 * 64, Access::LOCAL_WRITE);
            let tx = reg(&end.pd, 64, Access::empty());
            for i in 0..16u64 {
                recv(&end.qp, i, &[sge(&rx, i * 64, 64)]);
            }
            // Both sides have their receives up before either sends.
            (end, rx, tx)
        })
    };
    let (a, b) = (run(p.a).join().unwrap(), run(p.b).join().unwrap());
    let worker = |(end, rx, tx): (End, Arc<dyn MemoryRegion>, Arc<dyn MemoryRegion>)| {
        thread::spawn(move || {
            let mut out = [WorkCompletion::EMPTY; 16];
            let (mut sent, mut send_done, mut received) = (0u64, 0u64, 0u64);
            let deadline = Instant::now() + Duration::from_secs(60);
            while send_done < N || received < N {
                assert!(Instant::now() < deadline, "stuck");
                if sent < N && sent - send_done < 8 {
                    end.qp.post_send(&[send(sent, &[sge(&tx, 0, 8)])]).unwrap();
                    sent += 1;
                }
                let n = end.cq.poll(&mut out);
                for w in &out[..n] {
                    assert_eq!(w.status, WcStatus::Success);
                    match w.opcode {
                        WcOpcode::Send => send_done += 1,
                        WcOpcode::Recv => {
                            received += 1;
                            recv(&end.qp, w.wr_id, &[sge(&rx, w.wr_id * 64, 64)]);
                        }
                        other => panic!("unexpected {other:?}"),
                    }
                }
            }
            end
        })
    };
    let (ta, tb) = (worker(a), worker(b));
    let (a, b) = (ta.join().unwrap(), tb.join().unwrap());
    assert!(!a.qp.is_dead() && !b.qp.is_dead());
}
