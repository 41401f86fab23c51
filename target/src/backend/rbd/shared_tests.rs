//! Images on a shared client, against a private Ceph cluster (`scripts/ceph-test-cluster`,
//! as in `tests.rs`): each test starts its own cluster and FAILS (never skips) when it
//! cannot start.

use super::*;
use crate::backend::rbd::rados::{typeless_addr, ClusterParams};
use crate::backend::rbd::tests::{pattern, run};
use crate::backend::rbd::{RbdBackend, EBLOCKLISTED};
use crate::backend::{Backend, BackendError, DmaSlice, IoChannel, IoOp};
use nvmf_common::wire::status::{path, Sct, Status};
use nvmf_verbs::DmaBuffer;
use std::path::Path;
use std::time::{Duration, Instant};

// The cluster helper the other RBD tests use (`tests.rs` includes it too, privately);
// not every helper is used here.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../../tests/support/ceph_cluster.rs"]
mod ceph_cluster;
use ceph_cluster::CephCluster;

/// The pool of the test cluster.
const POOL: &str = "rbd";
/// The image the cluster script creates.
const IMAGE_SIZE: &str = "64M";
/// Bytes of one write.
const CHUNK: usize = 64 << 10;

/// A new client of cluster `c` (the group's, in a gateway), with `options`.
fn client_with(c: &CephCluster, options: &[(&str, &str)]) -> Arc<RadosPool> {
    let params = ClusterParams {
        conf: Some(c.conf()),
        options,
        ..Default::default()
    };
    Arc::new(RadosPool::connect(&params, POOL).unwrap_or_else(|e| panic!("connect: {e}")))
}

/// Opens `image` of the pool on `client`'s connection.
fn open_on(client: &RadosPool, image: &str) -> RbdBackend {
    RbdBackend::open_with(
        POOL,
        image,
        &RbdOptions::default(),
        None,
        Some(client.client()),
    )
    .unwrap_or_else(|e| panic!("open {image} on a shared client: {e}"))
}

/// A buffer of `len` bytes and a slice maker for it.
fn buffer(len: usize) -> Arc<DmaBuffer> {
    Arc::new(DmaBuffer::new(len).unwrap_or_else(|| panic!("alloc")))
}

fn slice(buf: &Arc<DmaBuffer>, off: usize, len: usize) -> DmaSlice {
    DmaSlice::new(buf.clone(), off, len).unwrap_or_else(|| panic!("slice"))
}

/// Writes `data` at `offset` through `ch` (tag `tag`).
fn write(ch: &mut dyn IoChannel, tag: u64, offset: u64, data: &[u8]) -> Result<(), BackendError> {
    let buf = buffer(data.len());
    assert!(buf.write_at(0, data));
    run(
        ch,
        tag,
        IoOp::Write {
            offset,
            buf: slice(&buf, 0, data.len()),
            fua: false,
        },
    )
}

/// Reads `len` bytes at `offset` through `ch`.
fn read(ch: &mut dyn IoChannel, tag: u64, offset: u64, len: usize) -> Vec<u8> {
    let buf = buffer(len);
    run(
        ch,
        tag,
        IoOp::Read {
            offset,
            buf: slice(&buf, 0, len),
        },
    )
    .unwrap_or_else(|e| panic!("read at {offset}: {e}"));
    let mut got = vec![0u8; len];
    assert!(buf.read_at(0, &mut got));
    got
}

/// The addresses of the clients watching `image` (librbd watches the header of every
/// open image): which client an image was opened on.
fn watchers(c: &CephCluster, image: &str) -> Vec<String> {
    let out = c.rbd(&["status", &format!("{POOL}/{image}"), "--format", "json"]);
    let status: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("rbd status: {e}: {out}"));
    status["watchers"]
        .as_array()
        .unwrap_or_else(|| panic!("no watchers in {status}"))
        .iter()
        .map(|w| {
            let a = w["address"]
                .as_str()
                .unwrap_or_else(|| panic!("watcher without address: {w}"));
            typeless_addr(a).to_string()
        })
        .collect()
}

fn addr(p: &RadosPool) -> String {
    p.client_addr()
        .unwrap_or_else(|e| panic!("client_addr: {e}"))
}

#[test]
fn an_image_on_a_shared_client_reads_writes_and_leaves_the_client_usable() {
    let c = CephCluster::start("shared-io", IMAGE_SIZE);
    let a = client_with(&c, &[]);
    let b = open_on(&a, "img");
    assert!(b.shares_client());
    assert_eq!(b.info().size_bytes, 64 << 20);
    // The image is served by the pool's client: one address for both.
    assert_eq!(watchers(&c, "img"), vec![addr(&a)]);

    let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
    let data = pattern(3, CHUNK);
    write(&mut *ch, 1, 1 << 20, &data).unwrap_or_else(|e| panic!("write: {e}"));
    run(&mut *ch, 2, IoOp::Flush).unwrap_or_else(|e| panic!("flush: {e}"));
    assert!(
        read(&mut *ch, 3, 1 << 20, CHUNK) == data,
        "read back other data"
    );
    b.sync().unwrap_or_else(|e| panic!("sync: {e}"));
    drop(ch);
    drop(b);

    // The image is closed, the client is not: its own calls work, and an image opens
    // on it again with the data written before.
    assert!(watchers(&c, "img").is_empty(), "the image is still open");
    a.write_full("after-close", b"still here")
        .unwrap_or_else(|e| panic!("the shared client after an image closed: {e}"));
    assert_eq!(
        a.read_full("after-close").unwrap_or_else(|e| panic!("{e}")),
        Some(b"still here".to_vec())
    );
    let b = open_on(&a, "img");
    let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
    assert!(read(&mut *ch, 4, 1 << 20, CHUNK) == data, "lost the data");
    drop(ch);

    // The image keeps the client alive after the pool is gone.
    drop(a);
    let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        read(&mut *ch, 5, 1 << 20, CHUNK) == data,
        "after the pool closed"
    );
    write(&mut *ch, 6, 0, &data).unwrap_or_else(|e| panic!("after the pool closed: {e}"));

    // A missing image fails on the shared client as on an own one, naming it.
    let a = client_with(&c, &[]);
    let e = RbdBackend::open_with(
        POOL,
        "missing",
        &RbdOptions::default(),
        None,
        Some(a.client()),
    )
    .err()
    .unwrap_or_else(|| panic!("opened a missing image"));
    let msg = e.to_string();
    assert!(
        msg.contains("rbd:rbd/missing") && msg.contains("rbd_open"),
        "{msg}"
    );
    let e = RbdBackend::open_with(
        "nopool",
        "img",
        &RbdOptions::default(),
        None,
        Some(a.client()),
    )
    .err()
    .unwrap_or_else(|| panic!("opened in a missing pool"));
    assert!(e.to_string().contains("rados_ioctx_create"), "{e}");
    // ...and leaves the client usable.
    assert!(a.read_full("after-close").is_ok_and(|d| d.is_some()));
}

/// Writes per image in [`many_images_on_one_client_close_in_any_order_under_io`].
const WRITES: usize = 32;
/// Images on the one client there.
const IMAGES: usize = 6;

/// Images on one client, each used by a thread that lets go of it in its own way while
/// librbd completes the others' writes: the channel with all its writes in flight, then
/// the backend; the backend first, then the channel once reaped; or the channel half
/// reaped. The pool is dropped before any of them, so the last image shuts the client
/// down.

#[test]
fn many_images_on_one_client_close_in_any_order_under_io() {
    let c = CephCluster::start("shared-many", IMAGE_SIZE);
    let names: Vec<String> = (0..IMAGES)
        .map(|i| {
            let n = format!("s{i}");
            c.rbd(&["create", &format!("{POOL}/{n}"), "--size", "16M"]);
            n
        })
        .collect();
    let a = client_with(&c, &[]);
    let backends: Vec<RbdBackend> = names.iter().map(|n| open_on(&a, n)).collect();
    // Only the images hold the client from here on.
    drop(a);

    let seed = |i: usize, k: usize| u8::try_from((i * WRITES + k) % 251).unwrap_or(0);
    std::thread::scope(|s| {
        for (i, b) in backends.into_iter().enumerate() {
            s.spawn(move || {
                // Stagger the threads so closes interleave with the others' completions.
                std::thread::sleep(Duration::from_millis(3 * i as u64));
                let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
                let buf = buffer(WRITES * CHUNK);
                for k in 0..WRITES {
                    assert!(buf.write_at(k * CHUNK, &pattern(seed(i, k), CHUNK)));
                    let offset = (k * CHUNK) as u64;
                    ch.submit(
                        k as u64,
                        IoOp::Write {
                            offset,
                            buf: slice(&buf, k * CHUNK, CHUNK),
                            fua: k % 8 == 7,
                        },
                    )
                    .unwrap_or_else(|e| panic!("submit: {e}"));
                }
                let reap = |ch: &mut Box<dyn IoChannel>, want: usize| {
                    let mut out = Vec::new();
                    let deadline = Instant::now() + Duration::from_secs(30);
                    while out.len() < want {
                        ch.poll(&mut out);
                        assert!(Instant::now() < deadline, "{} of {want}", out.len());
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    assert!(out.iter().all(|(_, r)| r.is_ok()), "{out:?}");
                };
                match i % 3 {
                    0 => {
                        // The channel's drop waits for what librbd holds.
                        drop(ch);
                        drop(b);
                    }
                    1 => {
                        drop(b);
                        reap(&mut ch, WRITES);
                        assert_eq!(ch.in_flight(), 0);
                        drop(ch);
                    }
                    _ => {
                        reap(&mut ch, WRITES / 2);
                        drop(ch);
                        drop(b);
                    }
                }
            });
        }
    });

    // Every image was closed and the client shut down: a new client reads back every
    // write (the dropped channels waited for theirs).
    for n in &names {
        assert!(watchers(&c, n).is_empty(), "{n} is still open");
    }
    let a = client_with(&c, &[]);
    for (i, n) in names.iter().enumerate() {
        let b = open_on(&a, n);
        let mut ch = b.open_channel().unwrap_or_else(|e| panic!("{e}"));
        for k in 0..WRITES {
            let got = read(&mut *ch, k as u64, (k * CHUNK) as u64, CHUNK);
            assert!(got == pattern(seed(i, k), CHUNK), "{n}: write {k} lost");
        }
    }
}

#[test]
fn fencing_the_shared_client_stops_its_image_writes() {
    let c = CephCluster::start("shared-fence", IMAGE_SIZE);
    // The gateway's client, without librbd's cache so that a write is the OSD write
    // (with the cache a write can complete in memory; then the flush fails, as
    // `tests.rs` shows).
    let a = client_with(&c, &[("rbd_cache", "false")]);
    let x = open_on(&a, "img");
    assert!(!x.info().volatile_write_cache);
    let mut ch = x.open_channel().unwrap_or_else(|e| panic!("{e}"));
    let old = pattern(11, CHUNK);
    write(&mut *ch, 1, 0, &old).unwrap_or_else(|e| panic!("write: {e}"));
    assert_eq!(watchers(&c, "img"), vec![addr(&a)]);

    // Another gateway fences A's address, as a lease takeover does.
    let b = client_with(&c, &[]);
    b.blocklist_add(&addr(&a), Duration::from_secs(600))
        .unwrap_or_else(|e| panic!("blocklist_add: {e}"));

    // A's image write is refused, answered with a retryable path error...
    let e = write(&mut *ch, 2, 0, &pattern(22, CHUNK))
        .err()
        .unwrap_or_else(|| panic!("a fenced client's image write succeeded"));
    assert_eq!(e, BackendError::Fenced, "{e}");
    assert_eq!(
        e.status(),
        Status::retryable(Sct::PathRelated, path::INTERNAL_PATH_ERROR)
    );
    // ...and so is A's own (the group's) write: one address fenced both.
    let e = a
        .write_full("beat", b"1")
        .err()
        .unwrap_or_else(|| panic!("a fenced client's object write succeeded"));
    assert_eq!(e.errno, EBLOCKLISTED, "{e}");

    // B reads the data A wrote before it was fenced.
    let y = open_on(&b, "img");
    let mut by = y.open_channel().unwrap_or_else(|e| panic!("{e}"));
    assert!(
        read(&mut *by, 3, 0, CHUNK) == old,
        "the fenced client's write landed"
    );
    // B can write: librbd takes the exclusive lock from the fenced client.
    let t = Instant::now();
    let new = pattern(33, CHUNK);
    write(&mut *by, 4, 0, &new).unwrap_or_else(|e| panic!("B's write: {e}"));
    let took = t.elapsed();
    println!(
        "B took the image's exclusive lock from the fenced client in {} ms",
        took.as_millis()
    );
    // Not after the fenced client's watch timed out (`osd_client_watch_timeout`, 30 s):
    // the OSDs dropped its watch when it was blocklisted.
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert!(read(&mut *by, 5, 0, CHUNK) == new);
    // A still cannot.
    assert_eq!(
        write(&mut *ch, 6, 0, &old).err(),
        Some(BackendError::Fenced)
    );
    assert!(read(&mut *by, 7, 0, CHUNK) == new, "A overwrote B");
    // Closing the fenced image and client does not hang.
    drop(ch);
    drop(x);
    drop(a);
}

/// Removes the registration when the test ends, even by a panic, so no client of a
/// stopped cluster stays registered.
struct Unshare;

impl Drop for Unshare {
    fn drop(&mut self) {
        unshare_client();
    }
}

fn warned(spec: &str) -> bool {
    registration()
        .as_ref()
        .is_some_and(|r| r.warned.contains(spec))
}

#[test]
fn a_registered_client_serves_matching_namespaces_only() {
    let c = CephCluster::start("shared-registry", IMAGE_SIZE);
    c.rbd(&["create", &format!("{POOL}/other"), "--size", "16M"]);
    let conf: &Path = c.conf();
    let a = client_with(&c, &[]);
    // This cluster's configuration path is this test's own: no other test's namespace
    // matches the registration while it lasts.
    share_client(a.clone(), Some(conf.to_path_buf()), None);
    let _unshare = Unshare;
    let same = RbdOptions {
        ceph_conf: Some(conf.to_path_buf()),
        ..Default::default()
    };

    // The group's settings: the group's client.
    let b = RbdBackend::open(POOL, "img", &same, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(b.shares_client());
    assert_eq!(watchers(&c, "img"), vec![addr(&a)]);
    assert!(!warned("rbd:rbd/img"));

    // Options of its own: a client of its own, and one warning for the image.
    let own = RbdOptions {
        ceph_options: [("rbd_cache".to_string(), "false".to_string())].into(),
        ..same.clone()
    };
    let o = RbdBackend::open(POOL, "other", &own, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(!o.shares_client());
    let w = watchers(&c, "other");
    assert!(w.len() == 1 && w[0] != addr(&a), "{w:?}");
    assert!(warned("rbd:rbd/other"));
    drop(o);
    // Another client id (the default's name, spelled out) is another client too.
    let named = RbdOptions {
        client_id: Some("admin".into()),
        ..same.clone()
    };
    let o = RbdBackend::open(POOL, "other", &named, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(!o.shares_client());
    drop(o);

    // A second image on the group's client: one client, one address, for both.
    let b2 = RbdBackend::open(POOL, "other", &same, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(b2.shares_client());
    assert_eq!(watchers(&c, "other"), vec![addr(&a)]);
    drop((b, b2));

    // Without a registration every namespace has its own client again.
    unshare_client();
    let b = RbdBackend::open(POOL, "img", &same, None).unwrap_or_else(|e| panic!("{e}"));
    assert!(!b.shares_client());
    let w = watchers(&c, "img");
    assert!(w.len() == 1 && w[0] != addr(&a), "{w:?}");
}

#[test]
fn only_the_registered_settings_match() {
    let conf = PathBuf::from("/etc/ceph/ceph.conf");
    let opts = |conf: Option<&str>, id: Option<&str>| RbdOptions {
        ceph_conf: conf.map(PathBuf::from),
        client_id: id.map(String::from),
        ..Default::default()
    };
    let d = |o: &RbdOptions| differences(Some(&conf), Some("admin"), o);
    assert!(d(&opts(Some("/etc/ceph/ceph.conf"), Some("admin"))).is_empty());
    assert_eq!(d(&opts(None, Some("admin"))), ["ceph_conf"]);
    assert_eq!(
        d(&opts(Some("/etc/ceph/../ceph/ceph.conf"), Some("admin"))),
        ["ceph_conf"]
    );
    assert_eq!(d(&opts(Some("/etc/ceph/ceph.conf"), None)), ["client_id"]);
    assert_eq!(
        d(&RbdOptions {
            keyring: Some("/etc/ceph/k".into()),
            ceph_options: [("rbd_cache".to_string(), "false".to_string())].into(),
            ..opts(Some("/etc/ceph/ceph.conf"), Some("admin"))
        }),
        ["keyring", "ceph_options"]
    );
    // None matches None.
    assert!(differences(None, None, &RbdOptions::default()).is_empty());
    assert_eq!(
        differences(None, None, &opts(None, Some("admin"))),
        ["client_id"]
    );
}
