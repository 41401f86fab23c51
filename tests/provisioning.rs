//! Provisioning (issue 26, item 3) with files, in process: `add-ns --size` creates a
//! sparse file and exports it (refused on an existing path unless --reuse; a size of
//! 0, one larger than the file system, a missing directory, each refused with the
//! reason and nothing changed), `resize-ns --size` grows it and the connected host
//! sees the new size (a shrink refused), `remove-ns` keeps the data unless
//! `--delete-backing`, which deletes only what the target created. The RBD case is in
//! tests/rbd.rs (`provisioning_creates_grows_and_deletes_images`).

use std::path::Path;

use nvmf_common::types::Nqn;
use nvmf_target::live::{Create, Op, RefusalKind};
use nvmf_tests::ops_support::{
    changed_ns_list, connect_as, free_port, nsze, start_live, tmp_path, wait_aer,
};

const SUB: &str = "nqn.2026-11.io.example:provisioned";
const BLOCK: u64 = 512;

fn yaml(port: u16) -> String {
    format!(
        "ports:\n  - {{ portid: 1, trtype: tcp, traddr: 127.0.0.1, trsvcid: {port}, subsystems: [{SUB}] }}\n\
         subsystems:\n  - nqn: {SUB}\n    allow_any_host: true\n    namespaces:\n      - {{ nsid: 1, device_path: \"ram:8M\" }}\n"
    )
}

fn add(nsid: u32, path: &Path, size: u64, reuse: bool) -> Op {
    match Op::add_ns(SUB, Some(nsid), &path.display().to_string()) {
        Op::AddNs {
            nqn,
            device_path,
            nsid,
            ceph_conf,
            client_id,
            keyring,
            ceph_options,
            auto_visible,
            ..
        } => Op::AddNs {
            nqn,
            device_path,
            nsid,
            ceph_conf,
            client_id,
            keyring,
            ceph_options,
            auto_visible,
            create: Create {
                size: Some(size),
                reuse,
                ..Create::default()
            },
        },
        other => other,
    }
}

fn remove(nsid: u32, delete_backing: bool) -> Op {
    Op::RemoveNs {
        nqn: SUB.into(),
        nsid,
        delete_backing,
    }
}

#[test]
fn add_ns_creates_resize_grows_and_only_what_was_created_is_deleted() {
    let dir = tmp_path("provision");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let cfg = dir.join("target.yaml");
    let port = free_port();
    std::fs::write(&cfg, yaml(port)).unwrap_or_else(|e| panic!("{e}"));
    let t = start_live(&yaml(port), Some(cfg.clone()));
    let sub = Nqn::new(SUB).unwrap_or_else(|e| panic!("{e}"));
    let c = connect_as(&t.fabric(1), 1, &sub, 1, 0).unwrap_or_else(|e| panic!("{e}"));

    // Created: sparse, the size asked, marked created in the saved file.
    let img = dir.join("vol2.img");
    t.live
        .execute(&add(2, &img, 64 << 20, false))
        .unwrap_or_else(|e| panic!("add-ns --size: {e}"));
    let meta = std::fs::metadata(&img).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(meta.len(), 64 << 20);
    use std::os::unix::fs::MetadataExt;
    assert!(meta.blocks() * 512 < 1 << 20, "not sparse");
    let saved = std::fs::read_to_string(&cfg).unwrap_or_default();
    assert!(saved.contains("created: true"), "{saved}");
    let _ = wait_aer(&c);
    assert_eq!(changed_ns_list(&c), vec![2]);
    assert_eq!(nsze(&c, 2) * BLOCK, 64 << 20);

    // Bad input, each refused with the reason and nothing changed.
    let before = std::fs::read(&cfg).unwrap_or_default();
    let e = t
        .live
        .execute(&add(3, &img, 8 << 20, false))
        .expect_err("an existing path");
    assert_eq!(e.kind, RefusalKind::AlreadyExists, "{e}");
    assert!(e.message.contains("--reuse"), "{e}");
    assert_eq!(
        std::fs::metadata(&img).map(|m| m.len()).ok(),
        Some(64 << 20)
    );
    let e = t
        .live
        .execute(&add(3, &dir.join("zero.img"), 0, false))
        .expect_err("size 0");
    assert_eq!(e.kind, RefusalKind::InvalidArgument, "{e}");
    assert!(!dir.join("zero.img").exists());
    let e = t
        .live
        .execute(&add(3, &dir.join("huge.img"), 1 << 60, false))
        .expect_err("larger than the file system");
    assert_eq!(e.kind, RefusalKind::InvalidArgument, "{e}");
    assert!(e.message.contains("file system"), "{e}");
    assert!(!dir.join("huge.img").exists());
    let e = t
        .live
        .execute(&add(3, &dir.join("no-such-dir/x.img"), 1 << 20, false))
        .expect_err("a missing directory");
    assert_eq!(e.kind, RefusalKind::NotFound, "{e}");
    // Created, then the change refused by the planner (too small for one block): the
    // file the change created is gone again.
    let tiny = dir.join("tiny.img");
    let e = t
        .live
        .execute(&add(3, &tiny, 100, false))
        .expect_err("smaller than a block");
    assert!(
        !tiny.exists(),
        "a refused change left its file behind ({e})"
    );
    assert_eq!(
        std::fs::read(&cfg).unwrap_or_default(),
        before,
        "the file changed"
    );

    // --reuse exports an existing file as it is, and never deletes it.
    let theirs = dir.join("theirs.img");
    std::fs::write(&theirs, vec![7u8; 1 << 20]).unwrap_or_else(|e| panic!("{e}"));
    t.live
        .execute(&add(3, &theirs, 4 << 20, true))
        .unwrap_or_else(|e| panic!("--reuse: {e}"));
    assert_eq!(
        std::fs::metadata(&theirs).map(|m| m.len()).ok(),
        Some(1 << 20)
    );
    let e = t
        .live
        .execute(&remove(3, true))
        .expect_err("deleting what the target did not create");
    assert_eq!(e.kind, RefusalKind::FailedPrecondition, "{e}");
    assert!(theirs.exists());
    t.live
        .execute(&remove(3, false))
        .unwrap_or_else(|e| panic!("remove-ns: {e}"));
    assert!(theirs.exists(), "remove-ns deleted data");

    // Grown: the host sees the new size; a shrink is refused, the file unchanged.
    let _ = wait_aer(&c);
    let _ = changed_ns_list(&c);
    t.live
        .execute(&Op::ResizeNs {
            nqn: SUB.into(),
            nsid: 2,
            size: Some(96 << 20),
        })
        .unwrap_or_else(|e| panic!("resize-ns --size: {e}"));
    assert_eq!(
        std::fs::metadata(&img).map(|m| m.len()).ok(),
        Some(96 << 20)
    );
    let _ = wait_aer(&c);
    assert_eq!(changed_ns_list(&c), vec![2]);
    assert_eq!(nsze(&c, 2) * BLOCK, 96 << 20);
    let e = t
        .live
        .execute(&Op::ResizeNs {
            nqn: SUB.into(),
            nsid: 2,
            size: Some(32 << 20),
        })
        .expect_err("a shrink");
    assert_eq!(e.kind, RefusalKind::InvalidArgument, "{e}");
    assert!(e.message.contains("shrinking is refused"), "{e}");
    assert_eq!(
        std::fs::metadata(&img).map(|m| m.len()).ok(),
        Some(96 << 20)
    );

    // Deleted on request, because the target created it.
    let changes = t
        .live
        .execute(&remove(2, true))
        .unwrap_or_else(|e| panic!("remove-ns --delete-backing: {e}"));
    assert!(changes.iter().any(|c| c.contains("deleted")), "{changes:?}");
    assert!(!img.exists(), "the created file is still there");
    c.shutdown().unwrap_or_else(|e| panic!("{e}"));
    let _ = std::fs::remove_dir_all(&dir);
}
