//! Replays, in the ordinary test suite, every seed of the fuzz corpora
//! (`fuzz/seeds/<target>/`) and every input a fuzzer ever failed on
//! (`fuzz/regressions/<target>/`) through the same harness the cargo-fuzz targets run
//! (`fuzz/harness/`). A fixed bug stays fixed without nightly or libFuzzer.

#[path = "../fuzz/harness/mod.rs"]
mod harness;

use std::path::PathBuf;

/// Every file under `fuzz/{seeds,regressions}/<target>/`, sorted.
fn inputs(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut out = Vec::new();
    for kind in ["seeds", "regressions"] {
        let dir = root.join(kind).join(target);
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_file() {
                let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                out.push((p, bytes));
            }
        }
    }
    out.sort();
    out
}

fn replay(target: &str, run: fn(&[u8])) {
    let all = inputs(target);
    for (path, bytes) in &all {
        let r = std::panic::catch_unwind(|| run(bytes));
        assert!(r.is_ok(), "fuzz input {} fails", path.display());
    }
    eprintln!("{target}: {} inputs replayed", all.len());
}

#[test]
fn wire_inputs() {
    replay("wire", harness::wire::run);
}

#[test]
fn tcp_framer_inputs() {
    replay("tcp_framer", harness::tcp_framer::run);
}

#[test]
fn tcp_connection_inputs() {
    replay("tcp_connection", harness::tcp_connection::run);
}

#[test]
fn tcp_pair_inputs() {
    replay("tcp_pair", harness::tcp_pair::run);
}

#[test]
fn send_queue_inputs() {
    replay("send_queue", harness::send_queue::run);
}

#[test]
fn tcp_transfer_inputs() {
    replay("tcp_transfer", harness::tcp_transfer::run);
}

#[test]
fn tls_stream_inputs() {
    replay("tls_stream", harness::tls_stream::run);
}

#[test]
fn connect_inputs() {
    replay("connect", harness::connect::run);
}

#[test]
fn dispatcher_inputs() {
    replay("dispatcher", harness::dispatcher::run);
}

#[test]
fn auth_inputs() {
    replay("auth", harness::auth::run);
}

/// The harness itself on a few fixed inputs (empty, short, all-ones).
#[test]
fn harness_smoke() {
    for input in [&[][..], &[0u8; 3][..], &[0xFF; 300][..], &[0x0B; 1100][..]] {
        harness::wire::run(input);
        harness::tcp_framer::run(input);
        harness::tcp_connection::run(input);
        harness::tcp_transfer::run(input);
        harness::tcp_pair::run(input);
        harness::connect::run(input);
        harness::dispatcher::run(input);
        harness::auth::run(input);
    }
}

/// Writes seed corpora from real traffic: our host against our TCP target through a
/// recording proxy (bring-up, Identify, writes in the capsule and through R2T, reads,
/// flush, with and without digests). The host→controller stream seeds the controller
/// framer, the controller→host stream the host framer, and every command capsule the
/// dispatcher. Run after wire format changes:
/// `cargo test --release -p nvmf-tests --test fuzz_regressions -- --ignored capture_seeds`
#[test]
#[ignore]
fn capture_seeds() {
    use nvmf_common::transport::tcp::{ControllerConfig, Pdu, PduReader};
    use nvmf_initiator::transport::tcp::{TcpFabric, TcpOptions};
    use nvmf_initiator::transport::Fabric;
    use nvmf_tests::proxy::{Plan, Proxy};
    use std::sync::Arc;

    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    let env = nvmf_tests::start_tcp(&nvmf_tests::config(&["ram:16M"]), TcpOptions::default());
    for (i, (hd, dd)) in [(false, false), (true, true)].into_iter().enumerate() {
        let proxy = Proxy::start(
            env.addr,
            Plan {
                record: true,
                ..Plan::default()
            },
        );
        let fabric: Arc<dyn Fabric> = Arc::new(TcpFabric::new(
            proxy.addr(),
            TcpOptions {
                hdr_digest: hd,
                data_digest: dd,
                ..TcpOptions::default()
            },
        ));
        // Two associations (admin + one I/O queue each): in-capsule writes, then R2T.
        for (bs, qd, count) in [(4096, 4, 8), (64 * 1024, 2, 4)] {
            let mut ctrl = nvmf_tests::connect_to(&fabric, &env.nqn, 1, 32);
            nvmf_tests::write_read_verify(&mut ctrl, bs, qd, count);
            ctrl.shutdown().unwrap_or_else(|e| panic!("{e}"));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
        let digest_bits = (u8::from(hd) << 1) | (u8::from(dd) << 2);
        for (c, rec) in proxy.recordings().iter().enumerate() {
            let write = |dir: &str, name: String, bytes: Vec<u8>| {
                let d = root.join(dir);
                std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
                std::fs::write(d.join(name), bytes).unwrap_or_else(|e| panic!("{e}"));
            };
            // Controller reader: control byte 0 (the stream starts with its ICReq).
            let mut up = vec![0u8];
            up.extend_from_slice(&rec.to_target);
            write("tcp_framer", format!("capture-{i}-{c}-h2c.bin"), up);
            // Host reader: control byte 1 with the digests the host asked for.
            let mut down = vec![1 | digest_bits];
            down.extend_from_slice(&rec.to_host);
            write("tcp_framer", format!("capture-{i}-{c}-c2h.bin"), down);
            // Dispatcher records: every capsule's SQE, on the queue its connection served
            // (even connections are admin queues), SGL length from the plan.
            let mut reader = PduReader::controller(ControllerConfig::default())
                .unwrap_or_else(|e| panic!("{e}"));
            let mut rest = &rec.to_target[..];
            let mut records = Vec::new();
            let mut sqes = Vec::new();
            while !rest.is_empty() {
                let Ok(n) = reader.feed(rest) else { break };
                rest = &rest[n..];
                if let Some(Ok(Pdu::CapsuleCmd { sqe, .. })) = reader.poll() {
                    sqes.push(*sqe);
                }
            }
            // Skip the Connect: the rig connects the queues itself.
            for sqe in sqes.iter().skip(1) {
                records.push(if c % 2 == 0 { 0x0C } else { 0x0D });
                records.extend_from_slice(sqe);
            }
            if !records.is_empty() {
                write("dispatcher", format!("capture-{i}-{c}.bin"), records);
            }
        }
    }
}
