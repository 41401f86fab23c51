//! Durable live changes (issue 25, item 2) in process: a namespace added live keeps
//! its NSID, UUID and NGUID in the target started again from the file, a connected
//! host's I/O on it continues across a reload, and a change that cannot be saved (the
//! file system is full) is refused whole with the reason while the running state and
//! the file stay as they were. Needs root for the full file system (a small tmpfs),
//! as CI runs.

use nvmf_common::types::{Nqn, Nsid};
use nvmf_initiator::namespace::NsIo;
use nvmf_target::config::Config;
use nvmf_target::live::Op;
use nvmf_tests::ops_support::{connect_as, free_port, start_live, tmp_path};
use nvmf_tests::pattern;

#[path = "../target/tests/support/tmpfs.rs"]
mod tmpfs;
use tmpfs::{fill, Tmpfs};

const SUB: &str = "nqn.2026-11.io.example:durable";
const NS_BYTES: usize = 4 << 20;

fn yaml(port: u16) -> String {
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:8M\" }}\n"
    )
}

fn add_ns(nsid: u32, device_path: &str) -> Op {
    Op::add_ns(SUB, Some(nsid), device_path)
}

fn ids(t: &nvmf_target::target::Target, nsid: u32) -> ([u8; 16], [u8; 16]) {
    let ns = t
        .subsystem_by_name(SUB)
        .and_then(|s| s.namespace(Nsid(nsid)))
        .unwrap_or_else(|| panic!("namespace {nsid} missing"));
    (ns.uuid, ns.nguid)
}

#[test]
fn a_live_namespace_keeps_identity_and_host_io_across_reload_and_restart() {
    let port = free_port();
    let path = tmp_path("durable-live.yaml");
    let img = tmp_path("durable-live-ns2.img");
    std::fs::write(&path, yaml(port)).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&img, vec![0u8; NS_BYTES]).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&yaml(port), Some(path.clone()));
    let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    let changes = t
        .live
        .execute(&add_ns(2, &img.display().to_string()))
        .unwrap_or_else(|e| panic!("add-ns: {e}"));
    assert!(!changes.is_empty());
    let running_ids = ids(&t.target, 2);

    // A host on the namespace added live (our host reads the namespace list at connect).
    let mut ctrl = connect_as(&t.fabric(1), 1, &sub, 1, 0).unwrap_or_else(|e| panic!("{e}"));
    let mut qs = ctrl.take_io_queues();
    let mut io = NsIo::new(&ctrl, &mut qs[0], Nsid(2)).unwrap_or_else(|e| panic!("{e}"));
    let before = pattern(25, 0, 64 * 1024);
    io.write(0, &before)
        .unwrap_or_else(|e| panic!("write: {e}"));
    // The file says so: a reload changes nothing, and the host's I/O goes on.
    let changes = t.live.reload().unwrap_or_else(|e| panic!("reload: {e}"));
    assert!(
        changes.is_empty(),
        "a reload after a saved change: {changes:?}"
    );
    let after = pattern(26, 128, 64 * 1024);
    io.write(128, &after)
        .unwrap_or_else(|e| panic!("write after reload: {e}"));
    let mut back = vec![0u8; before.len()];
    io.read(0, &mut back)
        .unwrap_or_else(|e| panic!("read after reload: {e}"));
    assert!(back == before, "data written before the reload");
    assert_eq!(
        ids(&t.target, 2),
        running_ids,
        "identity changed by the reload"
    );
    drop(io);
    drop(qs);
    ctrl.shutdown().unwrap_or_else(|e| panic!("shutdown: {e}"));

    // Started again from the file: the same namespace with the same identity.
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("the saved file: {e}"));
    let again =
        nvmf_target::target::Target::from_config(&cfg).unwrap_or_else(|e| panic!("restart: {e}"));
    assert_eq!(ids(&again, 2), running_ids, "identity after a restart");
    assert_eq!(ids(&again, 1), ids(&t.target, 1));
    // And `export` is the file.
    let exported = t.live.export().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        exported,
        std::fs::read_to_string(&path).unwrap_or_default(),
        "export and the file differ"
    );
    for p in [&path, &img] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn a_change_that_cannot_be_saved_is_refused_and_changes_nothing() {
    let fs = Tmpfs::new(tmp_path("durable-tmpfs"), 256 * 1024);
    let port = free_port();
    let path = fs.path("target.yaml");
    std::fs::write(&path, yaml(port)).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&yaml(port), Some(path.clone()));
    let filler = fill(&fs.0);

    let before = std::fs::read(&path).unwrap_or_else(|e| panic!("{e}"));
    let e = t
        .live
        .execute(&add_ns(2, "ram:1M"))
        .expect_err("a change on a full file system");
    assert!(
        e.message.contains("cannot save the change") && e.message.contains("nothing changed"),
        "{e}"
    );
    assert_eq!(e.kind, nvmf_target::live::RefusalKind::Unavailable, "{e}");
    let sub = t
        .target
        .subsystem_by_name(SUB)
        .unwrap_or_else(|| panic!("subsystem"));
    assert!(
        sub.namespace(Nsid(2)).is_none(),
        "applied although not saved"
    );
    assert!(t.live.running().subsystems[0].namespaces.len() == 1);
    assert_eq!(
        std::fs::read(&path).unwrap_or_default(),
        before,
        "file touched"
    );
    let leftovers: Vec<_> = std::fs::read_dir(&fs.0)
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.file_name())
        .filter(|n| n.to_string_lossy().contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left: {leftovers:?}");

    // Room again: the same change goes through and is saved.
    std::fs::remove_file(&filler).unwrap_or_else(|e| panic!("{e}"));
    t.live
        .execute(&add_ns(2, "ram:1M"))
        .unwrap_or_else(|e| panic!("add-ns with room: {e}"));
    assert!(sub.namespace(Nsid(2)).is_some());
    let cfg = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cfg.subsystems[0].namespaces.len(), 2);
    drop(t);
}

/// Two clients changing one subsystem at once: both changes are serialized, applied
/// and in the file.
#[test]
fn concurrent_changes_are_serialized_and_both_saved() {
    let port = free_port();
    let path = tmp_path("durable-concurrent.yaml");
    std::fs::write(&path, yaml(port)).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&yaml(port), Some(path.clone()));
    let live = t.live.clone();
    let threads: Vec<_> = (2..=9u32)
        .map(|nsid| {
            let live = live.clone();
            std::thread::spawn(move || live.execute(&add_ns(nsid, "ram:1M")))
        })
        .collect();
    for th in threads {
        th.join()
            .unwrap_or_else(|_| panic!("a client thread panicked"))
            .unwrap_or_else(|e| panic!("a concurrent add-ns: {e}"));
    }
    let saved = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let mut nsids: Vec<u32> = saved.subsystems[0]
        .namespaces
        .iter()
        .map(|n| n.nsid.0)
        .collect();
    nsids.sort_unstable();
    assert_eq!(nsids, (1..=9).collect::<Vec<_>>(), "every change saved");
    assert_eq!(saved, t.live.running(), "the file is the running state");
    let _ = std::fs::remove_file(&path);
}
