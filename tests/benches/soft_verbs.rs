//! The software verbs provider on its own: the NVMe-like exchange on one thread, host
//! SEND (command) → target RDMA WRITE (unsignaled, 4 KiB) + SEND (response), with the
//! receives posted one by one.
//!
//!     cargo bench -p nvmf-tests --bench soft_verbs          # BENCH_IOS (1000000)
//!
//! Prints the time per I/O, I/Os per second and the device's counters.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nvmf_verbs::soft::SoftDevice;
use nvmf_verbs::{
    Access, CompletionQueue, Device, DmaBuffer, MemoryRegion, ProtectionDomain, QpCaps, QpInit,
    QueuePair, RecvWr, SendOp, SendWr, Sge, WorkCompletion,
};

const T: Duration = Duration::from_secs(5);

struct End {
    pd: Arc<dyn ProtectionDomain>,
    cq: Arc<dyn CompletionQueue>,
    qp: Arc<dyn QueuePair>,
}

fn init(pd: &Arc<dyn ProtectionDomain>, cq: &Arc<dyn CompletionQueue>) -> QpInit {
    QpInit {
        pd: Arc::clone(pd),
        send_cq: Arc::clone(cq),
        recv_cq: Arc::clone(cq),
        caps: QpCaps {
            max_send_wr: 16,
            max_recv_wr: 16,
            max_send_sge: 4,
            max_recv_sge: 4,
        },
        srq: None,
    }
}

/// A connected pair of RC queue pairs: (active side, passive side).
fn connect_pair(dev: &Arc<SoftDevice>, addr: &str) -> (End, End) {
    let listener = dev.listen(addr).unwrap_or_else(|e| panic!("listen: {e}"));
    let dev2 = Arc::clone(dev);
    let server = thread::spawn(move || {
        let req = listener
            .next_request(T)
            .unwrap_or_else(|| panic!("no connect request"));
        let pd = dev2.alloc_pd().unwrap_or_else(|e| panic!("{e}"));
        let cq = dev2.create_cq(64).unwrap_or_else(|e| panic!("{e}"));
        let qp = req
            .accept(init(&pd, &cq), b"", b"", &mut |_| Ok(()))
            .unwrap_or_else(|e| panic!("accept: {e}"));
        End { pd, cq, qp }
    });
    let pd = dev.alloc_pd().unwrap_or_else(|e| panic!("{e}"));
    let cq = dev.create_cq(64).unwrap_or_else(|e| panic!("{e}"));
    let (qp, _) = dev
        .connect(addr, init(&pd, &cq), b"", &mut |_| Ok(()), T)
        .unwrap_or_else(|e| panic!("connect: {e}"));
    let b = server.join().unwrap_or_else(|_| panic!("accept thread"));
    (End { pd, cq, qp }, b)
}

fn reg(pd: &Arc<dyn ProtectionDomain>, len: usize, access: Access) -> Arc<dyn MemoryRegion> {
    let buf = Arc::new(DmaBuffer::new(len).unwrap_or_else(|| panic!("{len}-byte buffer")));
    pd.register(buf, access)
        .unwrap_or_else(|e| panic!("register: {e}"))
}

fn sge(mr: &Arc<dyn MemoryRegion>, len: u32) -> Sge {
    Sge {
        addr: mr.addr(),
        length: len,
        lkey: mr.lkey(),
    }
}

fn send(wr_id: u64, sgl: &[Sge]) -> SendWr<'_> {
    SendWr {
        wr_id,
        op: SendOp::Send,
        sg_list: sgl,
        signaled: true,
    }
}

fn main() {
    let n: u64 = std::env::var("BENCH_IOS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let dev = SoftDevice::new();
    let (a, b) = connect_pair(&dev, "soft-verbs-bench");
    let host_cmd = reg(&a.pd, 64, Access::empty());
    let host_rsp = reg(&a.pd, 64, Access::LOCAL_WRITE);
    let host_data = reg(&a.pd, 4096, Access::LOCAL_WRITE | Access::REMOTE_WRITE);
    let tgt_cmd = reg(&b.pd, 64, Access::LOCAL_WRITE);
    let tgt_rsp = reg(&b.pd, 64, Access::empty());
    let tgt_data = reg(&b.pd, 4096, Access::empty());
    let cmd_sgl = [sge(&host_cmd, 64)];
    let rsp_sgl = [sge(&tgt_rsp, 16)];
    let data_sgl = [sge(&tgt_data, 4096)];
    let host_rsp_sgl = [sge(&host_rsp, 64)];
    let tgt_cmd_sgl = [sge(&tgt_cmd, 64)];
    let mut out = [WorkCompletion::EMPTY; 8];
    dev.reset_counters();
    let start = Instant::now();
    for i in 0..n {
        b.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &tgt_cmd_sgl,
        }])
        .unwrap_or_else(|e| panic!("{e}"));
        a.qp.post_recv(&[RecvWr {
            wr_id: i,
            sg_list: &host_rsp_sgl,
        }])
        .unwrap_or_else(|e| panic!("{e}"));
        a.qp.post_send(&[send(i, &cmd_sgl)])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.cq.poll(&mut out), 1);
        b.qp.post_send(&[
            SendWr {
                wr_id: i,
                op: SendOp::RdmaWrite {
                    remote_addr: host_data.addr(),
                    rkey: host_data.rkey(),
                },
                sg_list: &data_sgl,
                signaled: false,
            },
            send(i, &rsp_sgl),
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(b.cq.poll(&mut out), 1);
        assert_eq!(a.cq.poll(&mut out), 2);
    }
    let el = start.elapsed();
    println!(
        "{n} I/Os in {el:?}: {:.0} ns/I/O, {:.2} M I/O/s; {:?}",
        el.as_nanos() as f64 / n as f64,
        n as f64 / el.as_secs_f64() / 1e6,
        dev.counters()
    );
}
