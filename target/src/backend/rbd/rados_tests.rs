//! The RADOS primitives against a private Ceph cluster (`scripts/ceph-test-cluster`,
//! as in `tests.rs`): each test starts its own cluster and FAILS (never skips) when it
//! cannot start. Each test is one scenario of gateway groups.

use super::*;
use std::sync::mpsc;
use std::time::Instant;

// The cluster helper the other RBD tests use (`tests.rs` includes it too, privately);
// not every helper is used here.
#[allow(dead_code, clippy::duplicate_mod)]
#[path = "../../../tests/support/ceph_cluster.rs"]
mod ceph_cluster;
use ceph_cluster::CephCluster;

/// The pool the test cluster creates.
const POOL: &str = "rbd";
/// The image the cluster script creates (unused here: keep it small).
const IMAGE_SIZE: &str = "8M";
/// The omap key every compare-and-write compares.
const V: &str = "version";

/// A new client of cluster `c` (`options`: client options, e.g. an op timeout).
fn client_with(c: &CephCluster, options: &[(&str, &str)]) -> RadosPool {
    let params = ClusterParams {
        conf: Some(c.conf()),
        options,
        ..Default::default()
    };
    RadosPool::connect(&params, POOL).unwrap_or_else(|e| panic!("connect: {e}"))
}

fn client(c: &CephCluster) -> RadosPool {
    client_with(c, &[])
}

fn map(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_vec()))
        .collect()
}

#[test]
fn addresses_compare_without_their_messenger_type() {
    for a in [
        "127.0.0.1:0/42",
        "v1:127.0.0.1:0/42",
        "v2:127.0.0.1:0/42",
        "any:127.0.0.1:0/42",
        "[v2:127.0.0.1:0/42,v1:127.0.0.1:0/42]",
        "[127.0.0.1:0/42]",
    ] {
        assert_eq!(typeless_addr(a), "127.0.0.1:0/42", "{a}");
    }
    assert_eq!(typeless_addr("v1:[::1]:0/7"), "[::1]:0/7");
    assert_eq!(typeless_addr("[v2:[::1]:0/7]"), "[::1]:0/7");
    assert_eq!(typeless_addr(""), "");
    assert_eq!(typeless_addr("[]"), "");
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RadosPool>();
    check::<Watch>();
}

/// A version-keyed omap object as a group's shared configuration: creation, updates
/// that compare the version, stale writers refused, and two racing writers that lose
/// no update. Whole-object writes and reads too.
#[test]
fn omap_compare_and_write_loses_no_update() {
    let c = CephCluster::start("rados-omap", IMAGE_SIZE);
    let p = client(&c);

    // Whole objects, larger than read_full's first buffer.
    assert_eq!(p.read_full("blob").unwrap(), None);
    let big: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
    p.write_full("blob", &big).unwrap();
    assert_eq!(p.read_full("blob").unwrap().as_deref(), Some(&big[..]));
    p.write_full("blob", b"short").unwrap();
    assert_eq!(p.read_full("blob").unwrap().as_deref(), Some(&b"short"[..]));
    p.write_full("blob", b"").unwrap();
    assert_eq!(p.read_full("blob").unwrap(), Some(Vec::new()));
    p.remove("blob").unwrap();
    p.remove("blob").unwrap();
    assert_eq!(p.read_full("blob").unwrap(), None);

    // Creation: only the first of two creators wins.
    assert_eq!(p.omap_get_all("cfg").unwrap(), None);
    let cas = |expect: Option<&[u8]>, set: &[(&str, &[u8])], remove: &[&str]| {
        p.omap_cas("cfg", V, expect, set, remove)
            .unwrap_or_else(|e| panic!("omap_cas: {e}"))
    };
    assert_eq!(cas(None, &[(V, b"1"), ("a", b"x")], &[]), Cas::Done);
    assert_eq!(cas(None, &[(V, b"9"), ("z", b"z")], &[]), Cas::Conflict);
    let v1 = map(&[(V, b"1"), ("a", b"x")]);
    assert_eq!(p.omap_get_all("cfg").unwrap().as_ref(), Some(&v1));

    // An update with the current version: set and remove in one step.
    let bin: &[u8] = &[0, 0xff, 0, 7];
    assert_eq!(
        cas(Some(b"1"), &[(V, b"2"), ("b", b"y"), ("bin", bin)], &["a"]),
        Cas::Done
    );
    let v2 = map(&[(V, b"2"), ("b", b"y"), ("bin", bin)]);
    assert_eq!(p.omap_get_all("cfg").unwrap().as_ref(), Some(&v2));

    // A stale writer changes nothing.
    assert_eq!(
        cas(Some(b"1"), &[(V, b"3"), ("c", b"z")], &["b"]),
        Cas::Conflict
    );
    assert_eq!(p.omap_get_all("cfg").unwrap().as_ref(), Some(&v2));

    // Removing keys only.
    assert_eq!(cas(Some(b"2"), &[(V, b"3")], &["b", "bin"]), Cas::Done);
    assert_eq!(p.omap_get_all("cfg").unwrap(), Some(map(&[(V, b"3")])));

    // Expecting a version of an object that does not exist is a conflict too.
    assert_eq!(
        p.omap_cas("nothing", V, Some(b"1"), &[(V, b"2")], &[])
            .unwrap(),
        Cas::Conflict
    );
    assert_eq!(p.omap_get_all("nothing").unwrap(), None);

    // librados compares a missing key as the empty value.
    assert_eq!(
        p.omap_cas("cfg", "absent", Some(b"x"), &[("n", b"1")], &[])
            .unwrap(),
        Cas::Conflict
    );
    assert_eq!(
        p.omap_cas("cfg", "absent", Some(b""), &[("n", b"1")], &[])
            .unwrap(),
        Cas::Done
    );

    // More keys than a page: every page is read.
    let keys: Vec<String> = (0..10).map(|i| format!("k{i:02}")).collect();
    let set: Vec<(&str, &[u8])> = keys.iter().map(|k| (k.as_str(), k.as_bytes())).collect();
    assert_eq!(p.omap_cas("paged", V, None, &set, &[]).unwrap(), Cas::Done);
    let all = p.omap_get_paged("paged", 3).unwrap().unwrap();
    assert_eq!(all.len(), 10);
    assert_eq!(all, p.omap_get_all("paged").unwrap().unwrap());
    assert_eq!(all.get("k09").map(Vec::as_slice), Some(&b"k09"[..]));

    // Two gateways (two clients) racing read-then-compare-and-write increments.
    assert_eq!(
        p.omap_cas("counter", V, None, &[(V, b"0")], &[]).unwrap(),
        Cas::Done
    );
    let (a, b) = (client(&c), client(&c));
    let written: Vec<(Vec<u64>, usize)> = std::thread::scope(|s| {
        let racers: Vec<_> = [&a, &b]
            .into_iter()
            .map(|pool| {
                s.spawn(move || {
                    let (mut mine, mut conflicts) = (Vec::new(), 0usize);
                    for _ in 0..50 {
                        loop {
                            let m = pool.omap_get_all("counter").unwrap().unwrap();
                            let cur = m.get(V).unwrap();
                            let v: u64 = std::str::from_utf8(cur).unwrap().parse().unwrap();
                            let next = (v + 1).to_string();
                            let set: &[(&str, &[u8])] = &[(V, next.as_bytes())];
                            match pool.omap_cas("counter", V, Some(cur), set, &[]).unwrap() {
                                Cas::Done => {
                                    mine.push(v + 1);
                                    break;
                                }
                                Cas::Conflict => conflicts += 1,
                            }
                        }
                    }
                    (mine, conflicts)
                })
            })
            .collect();
        racers.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let end = p.omap_get_all("counter").unwrap().unwrap();
    assert_eq!(end.get(V).map(Vec::as_slice), Some(&b"100"[..]));
    // Every successful write made its own increment: together they are 1..=100.
    let mut all: Vec<u64> = written.iter().flat_map(|(m, _)| m.clone()).collect();
    all.sort_unstable();
    assert_eq!(all, (1..=100).collect::<Vec<u64>>());
    let conflicts: usize = written.iter().map(|(_, c)| c).sum();
    eprintln!("racing increments: 100 done, {conflicts} conflicts retried");
}

/// A group member watching the configuration object: a notify from another client
/// arrives with its payload, in order, without the notifier waiting for its timeout,
/// and nothing arrives once the watch is dropped.
#[test]
fn notifies_reach_a_watcher_until_its_watch_is_dropped() {
    let c = CephCluster::start("rados-watch", IMAGE_SIZE);
    let (a, b) = (client(&c), client(&c));

    let e = a.watch("missing", Box::new(|_| {})).err().unwrap();
    assert_eq!(e.errno, libc::ENOENT, "{e}");
    let e = b
        .notify("missing", b"x", Duration::from_secs(1))
        .unwrap_err();
    assert_eq!(e.errno, libc::ENOENT, "{e}");

    b.write_full("gw.cfg", b"").unwrap();
    let (tx, rx) = mpsc::channel();
    let w = a
        .watch(
            "gw.cfg",
            Box::new(move |ev| {
                let _ = tx.send(ev);
            }),
        )
        .unwrap();
    a.watch_check(&w).unwrap();

    let timeout = Duration::from_secs(10);
    let t = Instant::now();
    b.notify("gw.cfg", b"epoch 7", timeout).unwrap();
    let took = t.elapsed();
    assert!(took < Duration::from_secs(2), "notify waited {took:?}");
    let ev = rx.recv_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(ev, WatchEvent::Notify(b"epoch 7".to_vec()));

    // Several notifies arrive in order; an empty payload is fine.
    for i in 0..5 {
        b.notify("gw.cfg", format!("n{i}").as_bytes(), timeout)
            .unwrap();
    }
    b.notify("gw.cfg", b"", timeout).unwrap();
    for i in 0..5 {
        let ev = rx.recv_timeout(Duration::from_secs(1)).unwrap();
        assert_eq!(ev, WatchEvent::Notify(format!("n{i}").into_bytes()));
    }
    let ev = rx.recv_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(ev, WatchEvent::Notify(Vec::new()));
    a.watch_check(&w).unwrap();

    // The watcher's own client may notify too.
    a.notify("gw.cfg", b"self", timeout).unwrap();
    let ev = rx.recv_timeout(Duration::from_secs(1)).unwrap();
    assert_eq!(ev, WatchEvent::Notify(b"self".to_vec()));

    drop(w);
    let t = Instant::now();
    b.notify("gw.cfg", b"after", timeout).unwrap();
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // Nothing arrives, and the callback context (holding the sender) was freed.
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(1)),
        Err(mpsc::RecvTimeoutError::Disconnected)
    );

    // A watcher that does not acknowledge in time (its callback blocks, against the
    // rules): the notifier gets ETIMEDOUT once the timeout, rounded up to a whole
    // second, passed.
    let slow = client(&c);
    let stall = Duration::from_secs(3);
    let w = slow
        .watch("gw.cfg", Box::new(move |_| std::thread::sleep(stall)))
        .unwrap();
    let t = Instant::now();
    let e = b
        .notify("gw.cfg", b"slow", Duration::from_millis(300))
        .unwrap_err();
    let took = t.elapsed();
    eprintln!("notify to a stalled watcher: {e} after {took:?}");
    assert_eq!(e.errno, libc::ETIMEDOUT, "{e}");
    assert!(
        took >= Duration::from_millis(900) && took < stall,
        "{took:?}"
    );
    // Dropping the watch waits for the callback that still runs.
    let t = Instant::now();
    drop(w);
    eprintln!("dropping the stalled watch took {:?}", t.elapsed());
}

/// A lease (cls_lock with a duration) held by gateway A moves to B once A stops
/// renewing it; B fences A (blocklist), after which A's writes are refused while B's
/// go through.
#[test]
fn an_expired_lease_moves_and_the_old_holder_is_fenced() {
    const OID: &str = "gw.lease";
    const NAME: &str = "ana-group-1";
    let lease = Duration::from_secs(2);
    let c = CephCluster::start("rados-lock", IMAGE_SIZE);
    // A's operations give up after 10 s rather than hang the test if fencing failed.
    let a = client_with(&c, &[("rados_osd_op_timeout", "10")]);
    let b = client(&c);

    assert_eq!(a.lockers(OID, NAME).unwrap(), Vec::new());
    let take = |p: &RadosPool, cookie: &str, renew: bool| {
        p.lock_exclusive(OID, NAME, cookie, "nvmf-target gateway", lease, renew)
            .unwrap_or_else(|e| panic!("lock_exclusive: {e}"))
    };
    assert_eq!(take(&a, "gw-a", false), Lock::Acquired);
    // Taking it again without renewing is refused even to its holder.
    assert_eq!(take(&a, "gw-a", false), Lock::Busy);
    assert_eq!(take(&b, "gw-b", false), Lock::Busy);
    assert_eq!(take(&b, "gw-b", true), Lock::Busy);
    // The same cookie on another client is another locker.
    assert_eq!(take(&b, "gw-a", true), Lock::Busy);

    let a_addr = a.client_addr().unwrap();
    let l = b.lockers(OID, NAME).unwrap();
    eprintln!("client_addr {a_addr:?}; lockers {l:?}");
    assert_eq!(
        l,
        vec![Locker {
            client: format!("client.{}", a.instance_id()),
            cookie: "gw-a".into(),
            addr: a_addr.clone(),
        }]
    );

    // A renews within the lease: it stays A's.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(take(&a, "gw-a", true), Lock::Acquired);
    let renewed = Instant::now();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(take(&b, "gw-b", true), Lock::Busy);

    // A stops renewing: B takes the lease once it expired, not before.
    let moved = loop {
        if take(&b, "gw-b", true) == Lock::Acquired {
            break renewed.elapsed();
        }
        assert!(
            renewed.elapsed() < Duration::from_secs(10),
            "the lease never expired"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    eprintln!("lease moved {moved:?} after A's last renewal");
    assert!(moved >= lease - Duration::from_millis(200), "{moved:?}");
    assert_eq!(take(&a, "gw-a", true), Lock::Busy);
    let l = a.lockers(OID, NAME).unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(l[0].client, format!("client.{}", b.instance_id()));
    assert_eq!(l[0].addr, b.client_addr().unwrap());

    // A lock without expiry is only broken.
    let forever = Duration::ZERO;
    assert_eq!(
        a.lock_exclusive(OID, "other", "gw-a", "", forever, false)
            .unwrap(),
        Lock::Acquired
    );
    let held = b.lockers(OID, "other").unwrap();
    assert_eq!(held.len(), 1);
    b.break_lock(OID, "other", &held[0].client, &held[0].cookie)
        .unwrap();
    b.break_lock(OID, "other", &held[0].client, &held[0].cookie)
        .unwrap();
    assert_eq!(b.lockers(OID, "other").unwrap(), Vec::new());
    assert_eq!(
        b.lock_exclusive(OID, "other", "gw-b", "", forever, false)
            .unwrap(),
        Lock::Acquired
    );
    b.unlock(OID, "other", "gw-b").unwrap();
    b.unlock(OID, "other", "gw-b").unwrap();
    assert_eq!(b.lockers(OID, "other").unwrap(), Vec::new());

    // A watches the configuration when it is fenced.
    a.write_full("gw.data", b"from a").unwrap();
    let (tx, rx) = mpsc::channel();
    let w = a
        .watch(
            "gw.data",
            Box::new(move |ev| {
                let _ = tx.send(ev);
            }),
        )
        .unwrap();

    // B fences A by the address the lock listed.
    let t = Instant::now();
    b.blocklist_add(&a_addr, Duration::from_secs(600)).unwrap();
    eprintln!("blocklist_add took {:?}", t.elapsed());
    let t = Instant::now();
    let e = loop {
        match a.write_full("gw.data", b"from a, fenced") {
            Err(e) => break e,
            Ok(()) => {
                assert!(t.elapsed() < Duration::from_secs(10), "A still writes");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    eprintln!("A's write refused after {:?}: {e}", t.elapsed());
    assert_eq!(e.errno, super::super::EBLOCKLISTED, "{e}");
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    b.write_full("gw.data", b"from b").unwrap();
    assert_eq!(
        b.read_full("gw.data").unwrap().as_deref(),
        Some(&b"from b"[..])
    );

    // A's watch reports the fence (librados says ENOTCONN), and so does watch_check.
    let ev = rx.recv_timeout(Duration::from_secs(30));
    eprintln!("A's watch after the fence: {ev:?} ({:?})", t.elapsed());
    assert!(matches!(ev, Ok(WatchEvent::Error(_))), "{ev:?}");
    let e = a.watch_check(&w).unwrap_err();
    eprintln!("watch_check: {e}");
    // Dropping the lost watch of a fenced client neither hangs nor fails.
    drop(w);
}
