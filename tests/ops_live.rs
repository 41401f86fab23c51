//! Live changes without a restart (issue 6, point 3): namespaces added, removed and
//! resized, hosts and ports added and removed, through the admin socket and through a
//! re-read configuration; connected hosts get Namespace Attribute Changed events and
//! the Changed Namespace List; an invalid configuration is refused whole.

use std::time::Duration;

use nvmf_common::types::{Nqn, Nsid};
use nvmf_common::wire::admin::{aer_notice, aer_type};
use nvmf_common::wire::log::lid;
use nvmf_common::wire::status::{cmd_specific, Sct};
use nvmf_initiator::namespace::NsIo;
use nvmf_target::live::ctl::{request, CtlServer, Request};
use nvmf_target::live::Op;
use nvmf_tests::ops_support::{
    changed_ns_list, connect_as, discovery_as, free_port, host, nsze, read_log, start_live,
    tmp_path, wait_aer, LiveTarget,
};

const SUB: &str = "nqn.2024-01.io.nvmf-rs:live";

fn yaml(port: u16, extra_ns: &str, hosts: &str) -> String {
    format!(
        r#"
ports:
  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}
subsystems:
  - nqn: {SUB}
    {hosts}
    namespaces:
      - {{ nsid: 1, device_path: "ram:8M" }}
{extra_ns}"#
    )
}

fn open_yaml(port: u16) -> String {
    yaml(port, "", "allow_any_host: true")
}

fn sub() -> Nqn {
    Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"))
}

fn assert_ns_notice(dw0: u32) {
    assert_eq!(dw0 & 0x7, u32::from(aer_type::NOTICE), "dw0 {dw0:#x}");
    assert_eq!(
        (dw0 >> 8) & 0xFF,
        u32::from(aer_notice::NS_ATTR_CHANGED),
        "dw0 {dw0:#x}"
    );
    assert_eq!(
        (dw0 >> 16) & 0xFF,
        u32::from(lid::CHANGED_NS),
        "dw0 {dw0:#x}"
    );
}

fn ctl(t: &LiveTarget, name: &str) -> CtlServer {
    CtlServer::start(t.live.clone(), &tmp_path(name)).unwrap_or_else(|e| panic!("ctl: {e}"))
}

fn ok(sock: &CtlServer, req: Request) -> Vec<String> {
    let r = request(sock.path(), &req).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.ok, "{req:?} refused: {:?}", r.error);
    r.changes
}

#[test]
fn add_and_remove_namespace_over_the_socket_notify_connected_hosts() {
    let t = start_live(&open_yaml(free_port()), None);
    let sock = ctl(&t, "addrm.sock");
    let c = connect_as(&t.fabric(1), 1, &sub(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nsze(&c, 2), 0);

    let changes = ok(
        &sock,
        Request::Change(Op::AddNs {
            nqn: SUB.into(),
            device_path: "ram:4M".into(),
            nsid: None,
            ceph_conf: None,
            client_id: None,
            keyring: None,
            ceph_options: Default::default(),
            create: Default::default(),
            auto_visible: true,
        }),
    );
    assert!(
        changes.iter().any(|c| c.contains("namespace 2 added")),
        "{changes:?}"
    );
    assert_ns_notice(wait_aer(&c));
    assert_eq!(changed_ns_list(&c), vec![2]);
    assert_eq!(nsze(&c, 2), (4 << 20) / 512);

    ok(
        &sock,
        Request::Change(Op::RemoveNs {
            nqn: SUB.into(),
            nsid: 2,
            delete_backing: false,
        }),
    );
    // Reading the log above unmasked the notice: a second event arrives.
    assert_ns_notice(wait_aer(&c));
    assert_eq!(changed_ns_list(&c), vec![2]);
    assert_eq!(nsze(&c, 2), 0, "removed namespace reads back inactive");

    // Refusals carry the reason and change nothing.
    let r = request(
        sock.path(),
        &Request::Change(Op::RemoveNs {
            nqn: SUB.into(),
            nsid: 9,
            delete_backing: false,
        }),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!r.ok);
    assert!(r.error.unwrap_or_default().contains("no namespace 9"));
    let r = request(
        sock.path(),
        &Request::Change(Op::AddNs {
            nqn: SUB.into(),
            device_path: "/nonexistent/disk.img".into(),
            nsid: Some(3),
            ceph_conf: None,
            client_id: None,
            keyring: None,
            ceph_options: Default::default(),
            create: Default::default(),
            auto_visible: true,
        }),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(!r.ok);
    assert!(r
        .error
        .unwrap_or_default()
        .contains("/nonexistent/disk.img"));
    assert_eq!(
        t.target.subsystem_by_name(SUB).map(|s| s.active_nsids()),
        Some(vec![1])
    );
    c.shutdown().unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn resize_after_the_backing_file_grew() {
    let img = tmp_path("grow.img");
    let f = std::fs::File::create(&img).unwrap_or_else(|e| panic!("{e}"));
    f.set_len(8 << 20).unwrap_or_else(|e| panic!("{e}"));
    let extra = format!(
        "      - {{ nsid: 2, device_path: \"{}\" }}\n",
        img.display()
    );
    let t = start_live(&yaml(free_port(), &extra, "allow_any_host: true"), None);
    let sock = ctl(&t, "resize.sock");
    let mut c = connect_as(&t.fabric(1), 1, &sub(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(nsze(&c, 2), (8 << 20) / 512);

    // Not grown yet: nothing to do.
    let same = ok(
        &sock,
        Request::Change(Op::ResizeNs {
            nqn: SUB.into(),
            nsid: 2,
            size: None,
        }),
    );
    assert!(same.iter().any(|c| c.contains("unchanged")), "{same:?}");

    f.set_len(16 << 20).unwrap_or_else(|e| panic!("{e}"));
    let changes = ok(
        &sock,
        Request::Change(Op::ResizeNs {
            nqn: SUB.into(),
            nsid: 2,
            size: None,
        }),
    );
    assert!(changes.iter().any(|c| c.contains("resized")), "{changes:?}");
    assert_ns_notice(wait_aer(&c));
    assert_eq!(changed_ns_list(&c), vec![2]);
    assert_eq!(nsze(&c, 2), (16 << 20) / 512);

    // I/O beyond the old end works without reconnecting (the host re-identifies).
    let raw = c
        .identify_namespace(Nsid(2))
        .unwrap_or_else(|e| panic!("{e}"));
    let info = nvmf_initiator::controller::NamespaceInfo::parse(Nsid(2), &raw)
        .unwrap_or_else(|e| panic!("{e}"))
        .unwrap_or_else(|| panic!("namespace 2 inactive"));
    let (fabric, mdts, tmo) = (
        c.fabric().clone(),
        c.max_transfer(),
        c.options().command_timeout,
    );
    let mut queues = c.take_io_queues();
    let mut io = NsIo::from_parts(&mut queues[0], info, fabric, mdts, tmo);
    let lba = (12 << 20) / 512;
    io.write(lba, &[0x5a; 4096])
        .unwrap_or_else(|e| panic!("write past the old end: {e}"));
    let mut back = vec![0u8; 4096];
    io.read(lba, &mut back).unwrap_or_else(|e| panic!("{e}"));
    assert!(back.iter().all(|&b| b == 0x5a));
    let _ = std::fs::remove_file(&img);
}

#[test]
fn hosts_added_and_removed_control_connect_and_discovery() {
    let (h1, _) = host(1);
    let t = start_live(&yaml(free_port(), "", "allowed_hosts: []"), None);
    let sock = ctl(&t, "hosts.sock");
    let err = connect_as(&t.fabric(1), 1, &sub(), 1, 0)
        .err()
        .unwrap_or_else(|| panic!("refused"));
    let st = err.status().unwrap_or_else(|| panic!("{err}"));
    assert_eq!(
        (st.sct, st.sc),
        (Sct::CommandSpecific, cmd_specific::CONNECT_INVALID_HOST)
    );
    let d = discovery_as(&t.fabric(1), 1, 0);
    let g0 = read_log(&d);
    assert!(g0.entries.iter().all(|e| !e.is_nvm_subsystem()));

    ok(
        &sock,
        Request::Change(Op::AddHost {
            nqn: SUB.into(),
            host: h1.to_string(),
        }),
    );
    let c = connect_as(&t.fabric(1), 1, &sub(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    let g1 = read_log(&d);
    assert_ne!(g1.genctr, g0.genctr);
    assert!(g1.entries.iter().any(|e| e.subnqn == SUB));

    ok(
        &sock,
        Request::Change(Op::RemoveHost {
            nqn: SUB.into(),
            host: h1.to_string(),
        }),
    );
    assert!(connect_as(&t.fabric(1), 1, &sub(), 1, 0).is_err());
    assert!(read_log(&d).entries.iter().all(|e| e.subnqn != SUB));
    // Like nvmet, a host already connected stays connected.
    assert!(c.is_alive());
}

#[test]
fn reload_adds_and_removes_a_port_and_refuses_a_bad_config_whole() {
    let (p1, p2) = (free_port(), free_port());
    let path = tmp_path("reload.yaml");
    std::fs::write(&path, open_yaml(p1)).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&open_yaml(p1), Some(path.clone()));
    let d = discovery_as(&t.fabric(1), 1, 0);
    let g0 = read_log(&d).genctr;

    // A second port exporting the subsystem.
    let two = open_yaml(p1).replace(
        "subsystems:\n  - nqn",
        &format!(
            "  - {{ portid: 2, trtype: tcp, traddr: 127.0.0.1, trsvcid: {p2}, subsystems: [{SUB}] }}\nsubsystems:\n  - nqn"
        ),
    );
    std::fs::write(&path, &two).unwrap_or_else(|e| panic!("{e}"));
    let changes = t.live.reload().unwrap_or_else(|e| panic!("reload: {e}"));
    assert!(
        changes.iter().any(|c| c.contains("port 2 added")),
        "{changes:?}"
    );
    let c2 = connect_as(&t.fabric(2), 1, &sub(), 1, 0).unwrap_or_else(|e| panic!("{e}"));
    assert_ne!(read_log(&d).genctr, g0);

    // Invalid: a namespace whose file is missing, plus a host. Nothing may change.
    // Counters move on their own; the configuration must not.
    let config_of = |mut s: nvmf_target::live::status::StatusView| {
        s.transports.clear();
        s
    };
    let before = config_of(t.live.status());
    let bad = two.replace(
        "      - { nsid: 1, device_path: \"ram:8M\" }",
        "      - { nsid: 1, device_path: \"ram:8M\" }\n      - { nsid: 5, device_path: \"/nonexistent/x.img\" }",
    );
    std::fs::write(
        &path,
        bad.replace(
            "allow_any_host: true",
            "allowed_hosts: [nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-000000000009]",
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let err = t
        .live
        .reload()
        .err()
        .unwrap_or_else(|| panic!("bad config accepted"));
    assert!(err.message.contains("/nonexistent/x.img"), "{err}");
    assert_eq!(
        config_of(t.live.status()),
        before,
        "a refused config changes nothing"
    );
    // Transport tuning needs a restart.
    let tuned = format!("transport: {{ max_queue_size: 64 }}\n{two}");
    let err = t
        .live
        .apply(
            nvmf_target::config::Config::from_yaml_str(&tuned, "<t>")
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .err();
    assert!(err.is_some_and(|e| e.message.contains("restart")));

    // Port 2 removed: its listener closes and its controller ends.
    std::fs::write(&path, open_yaml(p1)).unwrap_or_else(|e| panic!("{e}"));
    let changes = t.live.reload().unwrap_or_else(|e| panic!("reload: {e}"));
    assert!(
        changes.iter().any(|c| c.contains("port 2 removed")),
        "{changes:?}"
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", p2)).is_err(),
        "port 2 still listening"
    );
    // The target first fails commands of the dead controller, then closes its queues.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while c2.is_alive() && std::time::Instant::now() < deadline {
        let _ = c2.keep_alive_timeout_ms();
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        !c2.is_alive(),
        "the controller through the removed port must end (queue closed, host sees it)"
    );
    assert!(c2.keep_alive_timeout_ms().is_err());
    let _ = std::fs::remove_file(&path);
}

#[test]
fn status_lists_ports_subsystems_namespaces_hosts_and_queues() {
    let t = start_live(&open_yaml(free_port()), None);
    let sock = ctl(&t, "status.sock");
    let c = connect_as(&t.fabric(1), 4, &sub(), 2, 0).unwrap_or_else(|e| panic!("{e}"));
    let r = request(sock.path(), &Request::Status).unwrap_or_else(|e| panic!("{e}"));
    let s = r.status.unwrap_or_else(|| panic!("no status"));
    assert_eq!(s.ports.len(), 1);
    assert!(s.ports[0].listening.is_some());
    assert_eq!(s.subsystems[0].nqn, SUB);
    assert_eq!(s.subsystems[0].namespaces[0].size_bytes, 8 << 20);
    let ctrl = &s.subsystems[0].controllers[0];
    assert_eq!(ctrl.hostnqn, host(4).0.to_string());
    assert_eq!(ctrl.io_queues, 2);
    // Poll-group counters, under the names every transport uses.
    assert_eq!(s.transports.len(), 1, "{:?}", s.transports);
    let tcp = &s.transports[0];
    assert_eq!(tcp.trtype, "tcp");
    assert!(tcp.counters.queues >= 3, "admin + 2 I/O queues: {tcp:?}");
    assert!(
        tcp.counters.commands >= 3 && tcp.counters.responses >= 3,
        "{tcp:?}"
    );
    let text = s.to_string();
    assert!(text.contains("2 I/O queue(s)"), "{text}");
    assert!(text.contains("transport tcp: accepted "), "{text}");
    // A malformed request gets a reason, not a dropped connection.
    let raw =
        std::os::unix::net::UnixStream::connect(sock.path()).unwrap_or_else(|e| panic!("{e}"));
    use std::io::{BufRead, Write};
    (&raw)
        .write_all(b"{\"op\":\"explode\"}\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut line = String::new();
    std::io::BufReader::new(&raw)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(
        line.contains("\"ok\":false") && line.contains("malformed request"),
        "{line}"
    );
    drop(c);
}

/// Subsystems and listeners are operations too: a subsystem added, given a namespace and
/// a host, a new port added and linked, a host doing I/O through it; then unlinked,
/// removed; every step that names something missing or already there is refused and
/// changes nothing.
#[test]
fn subsystems_and_ports_are_added_linked_and_removed_over_the_socket() {
    let t = start_live(&open_yaml(free_port()), None);
    let sock = ctl(&t, "topology.sock");
    let new = "nqn.2024-01.io.nvmf-rs:added";
    let port2 = free_port();
    let change = |op: Op| ok(&sock, Request::Change(op));
    let refused = |op: Op, why: &str| {
        let r =
            request(sock.path(), &Request::Change(op.clone())).unwrap_or_else(|e| panic!("{e}"));
        assert!(!r.ok, "{op:?} was accepted");
        let e = r.error.unwrap_or_default();
        assert!(e.contains(why), "{op:?}: {e}");
    };
    change(Op::AddSubsystem {
        nqn: new.into(),
        allow_any_host: false,
        serial: Some("SN-ADDED".into()),
        model: None,
        passthru_device: None,
        clear_ids: false,
    });
    refused(
        Op::AddSubsystem {
            nqn: new.into(),
            allow_any_host: true,
            serial: None,
            model: None,
            passthru_device: None,
            clear_ids: false,
        },
        "already exists",
    );
    change(Op::add_ns(new, Some(1), "ram:4M"));
    change(Op::AddHost {
        nqn: new.into(),
        host: host(3).0.to_string(),
    });
    change(Op::AddPort {
        portid: 2,
        trtype: nvmf_target::config::TrType::Tcp,
        traddr: "127.0.0.1".into(),
        trsvcid: port2.to_string(),
    });
    refused(
        Op::LinkSubsystem {
            portid: 9,
            nqn: new.into(),
        },
        "no port 9",
    );
    change(Op::LinkSubsystem {
        portid: 2,
        nqn: new.into(),
    });
    let nqn = Nqn::new(new).unwrap_or_else(|e| panic!("{e}"));
    let mut c = connect_as(&t.fabric(2), 3, &nqn, 1, 0).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.id_ctrl().sn.trim(), "SN-ADDED");
    {
        let mut qs = c.take_io_queues();
        let mut io = NsIo::new(&c, &mut qs[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let d = nvmf_tests::pattern(7, 0, 8192);
        io.write(0, &d).unwrap_or_else(|e| panic!("write: {e}"));
        let mut back = vec![0u8; d.len()];
        io.read(0, &mut back)
            .unwrap_or_else(|e| panic!("read: {e}"));
        assert!(back == d);
    }
    // Not allowed on the first port, allowed on the second only once linked.
    assert!(connect_as(&t.fabric(1), 3, &nqn, 1, 0).is_err());
    change(Op::UnlinkSubsystem {
        portid: 2,
        nqn: new.into(),
    });
    refused(
        Op::UnlinkSubsystem {
            portid: 2,
            nqn: new.into(),
        },
        "does not export",
    );
    change(Op::RemoveSubsystem { nqn: new.into() });
    refused(Op::RemoveSubsystem { nqn: new.into() }, "no subsystem");
    change(Op::RemovePort { portid: 2 });
    refused(Op::RemovePort { portid: 2 }, "no port 2");
    let running = t.live.running();
    assert_eq!(running.subsystems.len(), 1);
    assert_eq!(running.ports.len(), 1);
    drop(c);
}
