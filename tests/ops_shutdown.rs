//! Teardown (issue 6, point 4): a host vanishing mid-I/O leaves no connection, pool
//! buffer or controller behind; CC.SHN reports shutdown complete once the backends are
//! synced; a removed namespace's backend channels are closed once drained.

use nvmf_target::runtime::PortServer;
use std::time::{Duration, Instant};

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::namespace::NsIo;
use nvmf_tests::ops_support::{connect_as, start_yaml, tmp_path};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:teardown";

fn yaml(device: &str) -> String {
    format!(
        r#"
ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: 4420, subsystems: [{SUB}] }}
subsystems:
  - nqn: {SUB}
    allow_any_host: true
    namespaces: [{{ nsid: 1, device_path: "{device}" }}]
"#
    )
}

fn sub() -> Nqn {
    Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn host_disconnecting_mid_io_leaks_no_request_buffer_or_controller() {
    let t = start_yaml(&yaml("ram:64M"));
    for round in 0..3 {
        let mut c = connect_as(&t.fabric(0), 1, &sub(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
        let mut queues = c.take_io_queues();
        {
            let mut io = NsIo::new(&c, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
            let bs = 128 * 1024;
            let bufs: Vec<_> = (0..16)
                .map(|_| c.alloc(bs).unwrap_or_else(|e| panic!("{e}")))
                .collect();
            for (i, b) in bufs.iter().enumerate() {
                let lba = (i * bs / 512) as u64;
                if i % 2 == 0 {
                    io.submit_write(i as u64, lba, (bs / 512) as u32, b, false)
                } else {
                    io.submit_read(i as u64, lba, (bs / 512) as u32, b)
                }
                .unwrap_or_else(|e| panic!("submit: {e}"));
            }
            io.queue().flush().unwrap_or_else(|e| panic!("{e}"));
        }
        // Gone without waiting for anything: sockets close under the target.
        drop(queues);
        drop(c);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let k = t.server.counters();
            let ctrls = t
                .target
                .subsystem_by_name(SUB)
                .map(|s| s.controllers().len())
                .unwrap_or(0);
            if k.queues == 0 && k.buffers_in_use == 0 && ctrls == 0 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: leaked: {} connection(s), {} buffer(s), {ctrls} controller(s)",
                k.queues,
                k.buffers_in_use
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    // And the target still serves.
    connect_as(&t.fabric(0), 2, &sub(), 1, 0)
        .unwrap_or_else(|e| panic!("{e}"))
        .shutdown()
        .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn cc_shn_reports_shutdown_complete_with_the_data_on_the_backend() {
    let img = tmp_path("shn.img");
    std::fs::File::create(&img)
        .and_then(|f| f.set_len(4 << 20))
        .unwrap_or_else(|e| panic!("{e}"));
    let t = start_yaml(&yaml(&img.display().to_string()));
    let mut c = connect_as(&t.fabric(0), 1, &sub(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    {
        let mut queues = c.take_io_queues();
        let mut io = NsIo::new(&c, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        io.write(8, &[0xa5; 4096]).unwrap_or_else(|e| panic!("{e}"));
    }
    // Property Set CC.SHN = normal, then CSTS.SHST must read shutdown complete.
    c.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));
    let bytes = std::fs::read(&img).unwrap_or_else(|e| panic!("{e}"));
    assert!(bytes[8 * 512..8 * 512 + 4096].iter().all(|&b| b == 0xa5));
    let _ = std::fs::remove_file(&img);
}
