//! RBD backend tests. The error mapping is checked alone; the I/O tests start a private
//! Ceph cluster with `scripts/ceph-test-cluster` and FAIL (never skip) when it cannot
//! start: CI installs the packages through scripts/setup.

use super::*;
use crate::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use crate::backend::DmaSlice;
use nvmf_common::wire::status::{generic, media, path, Sct, Status};
use nvmf_verbs::DmaBuffer;

#[test]
fn errno_mapping_gives_precise_statuses() {
    assert_eq!(EBLOCKLISTED, 108);
    let st = |k, e| map_errno(k, e).status();
    assert_eq!(
        st(Kind::Write, EBLOCKLISTED),
        Status::retryable(Sct::PathRelated, path::INTERNAL_PATH_ERROR)
    );
    assert_eq!(
        st(Kind::Read, libc::ENOENT),
        Status::generic_dnr(generic::NS_NOT_READY)
    );
    assert_eq!(
        st(Kind::Read, libc::ETIMEDOUT),
        Status::generic_retryable(generic::NS_NOT_READY)
    );
    assert_eq!(
        st(Kind::Read, libc::EIO),
        Status::media_retryable(media::UNRECOVERED_READ_ERROR)
    );
    assert_eq!(
        st(Kind::Write, libc::EIO),
        Status::media_retryable(media::WRITE_FAULT)
    );
    assert_eq!(
        st(Kind::Flush, libc::EIO),
        Status::media_retryable(media::WRITE_FAULT)
    );
    assert_eq!(
        st(Kind::Write, libc::EROFS),
        Status::generic_dnr(generic::NS_WRITE_PROTECTED)
    );
    assert_eq!(
        st(Kind::Write, libc::ENOSPC),
        Status::generic_dnr(generic::CAPACITY_EXCEEDED)
    );
    assert_eq!(
        st(Kind::Read, libc::EACCES),
        Status::dnr(Sct::MediaError, media::ACCESS_DENIED)
    );
}

// The cluster helper the end-to-end tests use too; not every helper is used here.
#[allow(dead_code)]
#[path = "../../../tests/support/ceph_cluster.rs"]
mod ceph_cluster;
use ceph_cluster::CephCluster;

/// The image every test opens, and its size.
const IMAGE_SIZE: &str = "64M";

/// Options that open images of cluster `c`.
fn opts(c: &CephCluster) -> OpenOptions {
    OpenOptions {
        rbd: RbdOptions {
            ceph_conf: Some(c.conf().to_path_buf()),
            ..Default::default()
        },
        ..Default::default()
    }
}

fn spec(image: &str) -> NamespaceSpec {
    NamespaceSpec::Rbd {
        pool: "rbd".into(),
        image: image.into(),
    }
}

/// Submits `op` and waits for its completion.
pub(super) fn run(ch: &mut dyn IoChannel, tag: u64, op: IoOp) -> Result<(), BackendError> {
    ch.submit(tag, op)?;
    ch.flush();
    assert!(
        ch.event_fd().is_some(),
        "interrupt-mode poll groups need a wait handle"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut out = Vec::new();
    loop {
        ch.poll(&mut out);
        if let Some((t, r)) = out.pop() {
            assert_eq!(t, tag);
            return r.map(|_| ());
        }
        assert!(
            Instant::now() < deadline,
            "operation {tag} did not complete"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

pub(super) fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn io_against_a_private_cluster() {
    let c = CephCluster::start("io", IMAGE_SIZE);
    let b = open_backend(&spec("img"), &opts(&c)).unwrap_or_else(|e| panic!("open: {e}"));
    let info = b.info().clone();
    assert_eq!(info.size_bytes, 64 << 20);
    assert_eq!(info.block_size, 512);
    assert!(info.volatile_write_cache, "rbd_cache defaults to true");
    assert!(info.supports_write_zeroes && info.supports_deallocate);
    let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
    let buf = Arc::new(DmaBuffer::new(1 << 20).unwrap_or_else(|| panic!("alloc")));
    let sl = |off, len| DmaSlice::new(buf.clone(), off, len).unwrap_or_else(|| panic!("slice"));

    // Write, FUA write, read back.
    let data = pattern(7, 64 << 10);
    assert!(buf.write_at(0, &data));
    run(
        &mut *ch,
        1,
        IoOp::Write {
            offset: 1 << 20,
            buf: sl(0, data.len()),
            fua: false,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run(
        &mut *ch,
        2,
        IoOp::Write {
            offset: 3 << 20,
            buf: sl(0, data.len()),
            fua: true,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run(&mut *ch, 3, IoOp::Flush).unwrap_or_else(|e| panic!("{e}"));
    for (tag, off) in [(4, 1u64 << 20), (5, 3 << 20)] {
        assert!(buf.fill(0, data.len(), 0));
        run(
            &mut *ch,
            tag,
            IoOp::Read {
                offset: off,
                buf: sl(0, data.len()),
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut got = vec![0u8; data.len()];
        assert!(buf.read_at(0, &mut got));
        assert!(got == data, "read back other data at {off}");
    }

    // Write Zeroes zeroes.
    run(
        &mut *ch,
        6,
        IoOp::WriteZeroes {
            offset: (1 << 20) + 4096,
            len: 8192,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run(
        &mut *ch,
        7,
        IoOp::Read {
            offset: 1 << 20,
            buf: sl(0, 16384),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut got = vec![0u8; 16384];
    assert!(buf.read_at(0, &mut got));
    assert!(got[..4096] == data[..4096]);
    assert!(
        got[4096..12288].iter().all(|&b| b == 0),
        "write zeroes left data"
    );
    assert!(got[12288..] == data[12288..16384]);

    // Deallocate of a whole object succeeds (and then reads zero on RBD).
    run(
        &mut *ch,
        8,
        IoOp::Deallocate {
            offset: 0,
            len: 4 << 20,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    run(
        &mut *ch,
        9,
        IoOp::Read {
            offset: 1 << 20,
            buf: sl(0, 4096),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut got = vec![1u8; 4096];
    assert!(buf.read_at(0, &mut got));
    assert!(
        got.iter().all(|&b| b == 0),
        "a discarded object read back data"
    );

    // Zero-length transfers complete without librbd; out of range is refused.
    run(
        &mut *ch,
        10,
        IoOp::Read {
            offset: 0,
            buf: sl(0, 0),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        ch.submit(
            11,
            IoOp::Read {
                offset: (64 << 20) - 512,
                buf: sl(0, 1024)
            }
        ),
        Err(BackendError::OutOfRange)
    );

    // Many in flight at once, reaped in any order.
    for i in 0..64u64 {
        ch.submit(
            100 + i,
            IoOp::Write {
                offset: i * 16384,
                buf: sl(0, 16384),
                fua: i % 8 == 0,
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    }
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while out.len() < 64 {
        ch.poll(&mut out);
        assert!(
            Instant::now() < deadline,
            "only {} of 64 completed",
            out.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(out.iter().all(|(_, r)| r.is_ok()), "{out:?}");
    assert_eq!(ch.in_flight(), 0);
    b.sync().unwrap_or_else(|e| panic!("sync: {e}"));

    // A grown image is noticed through backing_size.
    assert_eq!(b.backing_size(), Some(64 << 20));
    c.rbd(&["resize", "rbd/img", "--size", "96M"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while b.backing_size() != Some(96 << 20) {
        assert!(
            Instant::now() < deadline,
            "resize not seen: {:?}",
            b.backing_size()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Dropping a channel with I/O in flight waits for it.
    ch.submit(
        200,
        IoOp::Write {
            offset: 0,
            buf: sl(0, 4096),
            fua: false,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    drop(ch);
}

#[test]
fn open_errors_name_the_image() {
    let c = CephCluster::start("errors", IMAGE_SIZE);
    let e = open_backend(&spec("missing"), &opts(&c))
        .err()
        .unwrap_or_else(|| panic!("opened"));
    let msg = e.to_string();
    assert!(
        msg.contains("rbd:rbd/missing") && msg.contains("rbd_open"),
        "{msg}"
    );
    let e = open_backend(
        &NamespaceSpec::Rbd {
            pool: "nopool".into(),
            image: "img".into(),
        },
        &opts(&c),
    )
    .err()
    .unwrap_or_else(|| panic!("opened"));
    assert!(e.to_string().contains("rados_ioctx_create"), "{e}");
    let e = open_backend(
        &spec("img"),
        &OpenOptions {
            block_size: Some(1000),
            ..opts(&c)
        },
    )
    .err()
    .unwrap_or_else(|| panic!("opened"));
    assert!(matches!(e, OpenError::BadBlockSize { .. }), "{e}");
    // 4 KiB blocks work too.
    let b = open_backend(
        &spec("img"),
        &OpenOptions {
            block_size: Some(4096),
            ..opts(&c)
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(b.info().block_size, 4096);
    drop(b);

    // ceph_options: an unknown name or a bad value fails the open, naming the option
    // and the image but not the value.
    for (key, value, why) in [
        ("rados_osd_op_timout", "2", "not a Ceph option"),
        ("rados_osd_op_timeout", "soon", "librados refused the value"),
    ] {
        let e = open_backend(&spec("img"), &with_options(opts(&c), &[(key, value)]))
            .err()
            .unwrap_or_else(|| panic!("opened with {key}={value}"));
        let msg = e.to_string();
        assert!(
            msg.contains("rbd:rbd/img") && msg.contains(&format!("ceph_options: {key}: {why}")),
            "{msg}"
        );
        assert!(!msg.contains(value), "the value is shown: {msg}");
    }

    // They are set after the configuration file is read: they override it.
    let conf = std::env::temp_dir().join(format!("nvmf-rbd-unit-{}.conf", std::process::id()));
    let text = std::fs::read_to_string(c.conf()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&conf, format!("{text}\n[client]\nrbd cache = false\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    let from_file = OpenOptions {
        rbd: RbdOptions {
            ceph_conf: Some(conf.clone()),
            ..Default::default()
        },
        ..Default::default()
    };
    let vwc = |o: &OpenOptions| {
        open_backend(&spec("img"), o)
            .unwrap_or_else(|e| panic!("{e}"))
            .info()
            .volatile_write_cache
    };
    assert!(
        !vwc(&from_file),
        "the file's rbd cache = false was not read"
    );
    assert!(
        vwc(&with_options(from_file, &[("rbd_cache", "true")])),
        "ceph_options did not override the file"
    );
    let _ = std::fs::remove_file(conf);
}

/// `o` with `options` as its `ceph_options`.
fn with_options(mut o: OpenOptions, options: &[(&str, &str)]) -> OpenOptions {
    o.rbd.ceph_options = options
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    o
}

#[test]
fn ceph_options_are_checked_without_a_cluster() {
    let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    };
    assert_eq!(
        check_ceph_options(&map(&[
            ("rados_osd_op_timeout", "30"),
            ("rbd_cache", "false"),
            // librados' own spelling with spaces works as in ceph.conf.
            ("rados mon op timeout", "5"),
        ])),
        Ok(())
    );
    assert_eq!(
        check_ceph_options(&map(&[("rbd_cache", "false"), ("rbd_cahce", "true")])),
        Err("ceph_options: rbd_cahce: not a Ceph option".into())
    );
    assert_eq!(
        check_ceph_options(&map(&[("rados_osd_op_timeout", "-5")])),
        Err(
            "ceph_options: rados_osd_op_timeout: librados refused the value (not valid for \
             this option)"
                .into()
        )
    );
}

#[test]
fn blocklisted_client_gets_a_retryable_path_error() {
    let c = CephCluster::start("blocklist", IMAGE_SIZE);
    let b = open_backend(&spec("img"), &opts(&c)).unwrap_or_else(|e| panic!("open: {e}"));
    let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
    let buf = Arc::new(DmaBuffer::new(4096).unwrap_or_else(|| panic!("alloc")));
    let sl = || DmaSlice::new(buf.clone(), 0, 4096).unwrap_or_else(|| panic!("slice"));
    run(
        &mut *ch,
        1,
        IoOp::Write {
            offset: 0,
            buf: sl(),
            fua: true,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    // Our client is the image's only watcher: fence it as a lock breaker would.
    let out = c.rbd(&["status", "rbd/img", "--format", "json"]);
    let status: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("rbd status: {e}"));
    let addr = status["watchers"][0]["address"]
        .as_str()
        .unwrap_or_else(|| panic!("no watcher: {status}"))
        .to_string();
    c.ceph(&["osd", "blocklist", "add", &addr]);
    let e = run(
        &mut *ch,
        2,
        IoOp::Write {
            offset: 0,
            buf: sl(),
            fua: true,
        },
    )
    .err()
    .unwrap_or_else(|| panic!("a blocklisted client's write succeeded"));
    assert_eq!(e, BackendError::Fenced, "{e}");
    assert_eq!(
        e.status(),
        Status::retryable(Sct::PathRelated, path::INTERNAL_PATH_ERROR)
    );
}
