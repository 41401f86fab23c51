//! The librados primitives of gateway groups: small objects, omap compare-and-write,
//! watch/notify, `cls_lock` leases and blocklisting (fencing), declared by hand like
//! the RBD backend's calls in `ffi`, whose connection code they reuse
//! (`Image::pool`: the same client options, configuration file and keyring).
//!
//! # Ownership
//!
//! * [`RadosPool`] owns one librados client (cluster handle) and one pool context,
//!   shared through an `Arc` with every [`Watch`] it made and every RBD image opened on
//!   it (`super::shared`): the client is shut down when the pool, all its watches and
//!   all those images are gone, never under one of them.
//! * A [`Watch`] owns its librados watch (the cookie) and the callback context that
//!   librados calls with (the object name and the caller's `on_event`). Dropping it
//!   unwatches (`rados_unwatch2`, which also cancels the watch locally when the OSD
//!   cannot be told), waits until librados has run every callback already queued
//!   (`rados_watch_flush`), and only then frees the context. The callback context
//!   holds no reference to the client, so the last reference is never dropped on
//!   librados' own thread.
//! * Buffers librados allocates (`rados_mon_command`'s output, `rados_notify2`'s reply,
//!   `rados_getaddrs`' string) are copied and freed before the call returns; omap
//!   iterators and read/write operations are released by guards on every path.
//!
//! # Threading
//!
//! librados handles are thread-safe: a [`RadosPool`] is `Send + Sync` and its methods
//! take `&self`, so one client may serve several threads. Every method except
//! [`RadosPool::instance_id`] is a blocking network round trip (to the OSDs or the
//! monitors; an unreachable cluster blocks as long as librados retries, see
//! `rados_osd_op_timeout` in [`super`]): call them from a thread that may block (a
//! dedicated thread or `spawn_blocking`), never from a poll group or an async task.
//!
//! A watch's `on_event` runs on librados' callback (finisher) thread, one event at a
//! time, after which the notify is acknowledged. It must only signal (push to a
//! channel, write an eventfd) and return: it must not block, call a blocking
//! [`RadosPool`] method, or drop a [`Watch`] (whose `rados_watch_flush` would wait for
//! the very callback that runs it). A panic in `on_event` is caught and logged.
//!
//! # What librados does (Ceph 16: seen in `rados_tests.rs` or read in its source)
//!
//! * `omap_cmp` on an existing object compares a missing key as the empty value, so
//!   [`RadosPool::omap_cas`] with `expect == Some(b"")` matches an absent version key.
//!   On a missing object the comparison fails with `ENOENT`.
//! * `cls_lock` lockers are identified by (client instance, cookie): the instance is
//!   `client.<global id>`, new for every connection, so a restarted process cannot
//!   renew the lock its previous incarnation took; it waits for the expiry or breaks
//!   it. Expiry is checked on the OSD, against the OSD's clock, when the lock is next
//!   taken or listed: an expired holder simply disappears.
//! * `rados_notify2`'s timeout is applied in whole seconds (librados divides the
//!   milliseconds by 1000, and 0 means the OSD's `osd_default_notify_timeout`, 30 s),
//!   so [`RadosPool::notify`] rounds its timeout up to whole seconds.
//! * Fencing is immediate once [`RadosPool::blocklist_add`] returned (on the test
//!   cluster): the fenced client's next write fails with `EBLOCKLISTED`, and its
//!   watches report `ENOTCONN` ([`WatchEvent::Error`], `rados_watch_check`).

#![allow(non_camel_case_types)]

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_uchar, c_void, CStr, CString};
use std::sync::Arc;
use std::time::Duration;

use super::ffi::{check, cstring, rados_buffer_free, rados_ioctx_t, rados_t, Image};
use crate::backend::options::RbdOptions;

pub use super::ffi::{CephError, ClusterError, ClusterParams};

type rados_read_op_t = *mut c_void;
type rados_write_op_t = *mut c_void;
type rados_omap_iter_t = *mut c_void;
type rados_watchcb2_t = extern "C" fn(*mut c_void, u64, u64, u64, *mut c_void, usize);
type rados_watcherrcb_t = extern "C" fn(*mut c_void, u64, c_int);

/// `rados_write_op_create`: fail with `EEXIST` when the object exists.
const LIBRADOS_CREATE_EXCLUSIVE: c_int = 1;
/// `rados_write_op_omap_cmp2`: the stored value must equal the given one.
const LIBRADOS_CMPXATTR_OP_EQ: u8 = 1;
/// `rados_lock_exclusive`: take the lock, or extend it if this client and cookie hold
/// it (`LIBRADOS_LOCK_FLAG_MAY_RENEW`, the same bit as `LIBRADOS_LOCK_FLAG_RENEW`).
const LIBRADOS_LOCK_FLAG_MAY_RENEW: u8 = 1;

/// Keys asked for per omap read (the OSD may return fewer: `osd_max_omap_entries_per_request`).
const OMAP_PAGE: u64 = 1024;
/// First buffer size of [`RadosPool::read_full`].
const FIRST_READ: usize = 4096;
/// Largest object [`RadosPool::read_full`] reads.
const MAX_READ: usize = 64 << 20;
/// Attempts of [`RadosPool::lockers`] when the lockers change between sizing and copying.
const LOCKERS_ATTEMPTS: usize = 8;
/// First size of each [`RadosPool::lockers`] buffer.
const FIRST_LOCKERS_BUF: usize = 256;

/// `const char *`: NUL-terminated, unless a length goes with it.
type cstr = *const c_char;
type ioctx = rados_ioctx_t;

// The signatures of librados.h, parameter names included.
#[rustfmt::skip]
#[link(name = "rados")]
extern "C" {
    fn rados_getaddrs(cluster: rados_t, addrs: *mut *mut c_char) -> c_int;
    fn rados_get_instance_id(cluster: rados_t) -> u64;
    fn rados_wait_for_latest_osdmap(cluster: rados_t) -> c_int;

    fn rados_write_full(io: ioctx, oid: cstr, buf: cstr, len: usize) -> c_int;
    fn rados_read(io: ioctx, oid: cstr, buf: *mut c_char, len: usize, off: u64) -> c_int;
    fn rados_remove(io: ioctx, oid: cstr) -> c_int;

    fn rados_create_read_op() -> rados_read_op_t;
    fn rados_release_read_op(read_op: rados_read_op_t);
    fn rados_read_op_omap_get_vals2(read_op: rados_read_op_t, start_after: cstr,
        filter_prefix: cstr, max_return: u64, iter: *mut rados_omap_iter_t,
        pmore: *mut c_uchar, prval: *mut c_int);
    fn rados_read_op_operate(read_op: rados_read_op_t, io: ioctx, oid: cstr, flags: c_int)
        -> c_int;
    fn rados_omap_get_next2(iter: rados_omap_iter_t, key: *mut *mut c_char,
        val: *mut *mut c_char, key_len: *mut usize, val_len: *mut usize) -> c_int;
    fn rados_omap_get_end(iter: rados_omap_iter_t);

    fn rados_create_write_op() -> rados_write_op_t;
    fn rados_release_write_op(write_op: rados_write_op_t);
    fn rados_write_op_create(write_op: rados_write_op_t, exclusive: c_int, category: cstr);
    fn rados_write_op_omap_cmp2(write_op: rados_write_op_t, key: cstr, comparison_operator: u8,
        val: cstr, key_len: usize, val_len: usize, prval: *mut c_int);
    fn rados_write_op_omap_set2(write_op: rados_write_op_t, keys: *const cstr,
        vals: *const cstr, key_lens: *const usize, val_lens: *const usize, num: usize);
    fn rados_write_op_omap_rm_keys2(write_op: rados_write_op_t, keys: *const cstr,
        key_lens: *const usize, keys_len: usize);
    fn rados_write_op_operate(write_op: rados_write_op_t, io: ioctx, oid: cstr,
        mtime: *mut libc::time_t, flags: c_int) -> c_int;

    fn rados_watch2(io: ioctx, o: cstr, cookie: *mut u64, watchcb: rados_watchcb2_t,
        watcherrcb: Option<rados_watcherrcb_t>, arg: *mut c_void) -> c_int;
    fn rados_watch_check(io: ioctx, cookie: u64) -> c_int;
    fn rados_unwatch2(io: ioctx, cookie: u64) -> c_int;
    fn rados_watch_flush(cluster: rados_t) -> c_int;
    fn rados_notify2(io: ioctx, o: cstr, buf: cstr, buf_len: c_int, timeout_ms: u64,
        reply_buffer: *mut *mut c_char, reply_buffer_len: *mut usize) -> c_int;
    fn rados_notify_ack(io: ioctx, o: cstr, notify_id: u64, cookie: u64, buf: cstr,
        buf_len: c_int) -> c_int;

    fn rados_lock_exclusive(io: ioctx, oid: cstr, name: cstr, cookie: cstr, desc: cstr,
        duration: *mut libc::timeval, flags: u8) -> c_int;
    fn rados_unlock(io: ioctx, o: cstr, name: cstr, cookie: cstr) -> c_int;
    fn rados_list_lockers(io: ioctx, o: cstr, name: cstr, exclusive: *mut c_int,
        tag: *mut c_char, tag_len: *mut usize, clients: *mut c_char, clients_len: *mut usize,
        cookies: *mut c_char, cookies_len: *mut usize, addrs: *mut c_char,
        addrs_len: *mut usize) -> isize;
    fn rados_break_lock(io: ioctx, o: cstr, name: cstr, client: cstr, cookie: cstr) -> c_int;
}

/// A client address without its messenger type, so that the same client compares
/// equal whichever way Ceph printed it: `v1:127.0.0.1:0/42` (how `cls_lock` lists a
/// locker, even over msgr2), `v2:...`, `any:...` and `127.0.0.1:0/42` (how
/// `rados_getaddrs` gives a client's own) all become `127.0.0.1:0/42`; of a vector
/// (`[v2:...,v1:...]`) the first address. The monitors store blocklist entries
/// without a type, so this form fences the client as well as any other.
pub fn typeless_addr(addr: &str) -> &str {
    let first = match addr.strip_prefix('[') {
        Some(list) => list
            .strip_suffix(']')
            .unwrap_or(list)
            .split(',')
            .next()
            .unwrap_or_default(),
        None => addr,
    };
    ["v1:", "v2:", "any:"]
        .iter()
        .find_map(|t| first.strip_prefix(t))
        .unwrap_or(first)
}

fn err(call: &'static str, errno: i32) -> CephError {
    CephError { call, errno }
}

/// The outcome of [`RadosPool::omap_cas`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cas {
    /// The comparison held and every change was applied (atomically).
    Done,
    /// The comparison failed (another writer won): nothing was changed.
    Conflict,
}

/// The outcome of [`RadosPool::lock_exclusive`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lock {
    /// This client holds the lock for the duration asked, from now.
    Acquired,
    /// Someone holds it (see [`RadosPool::lock_exclusive`] for the exact cases).
    Busy,
}

/// What a [`Watch`] delivers to its `on_event`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A notify's payload (already acknowledged once `on_event` returns).
    Notify(Vec<u8>),
    /// The watch failed with this errno (`ENOTCONN`, `ETIMEDOUT`, `EBLOCKLISTED`...):
    /// notifies may have been missed and the watch is no longer valid; drop it and
    /// watch again (after re-reading what the notifies were about).
    Error(i32),
}

/// One holder of a `cls_lock` lock ([`RadosPool::lockers`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Locker {
    /// The holder's client instance, `client.<global id>` ([`RadosPool::instance_id`]).
    pub client: String,
    /// The cookie the holder locked with.
    pub cookie: String,
    /// The holder's address, in the form `ceph osd blocklist add` takes
    /// ([`RadosPool::blocklist_add`]) and [`RadosPool::client_addr`] gives
    /// ([`typeless_addr`]: `cls_lock` itself lists `v1:127.0.0.1:0/3141592653`).
    pub addr: String,
}

/// A connected RADOS client with one pool context (see the module docs: `Send + Sync`,
/// blocking methods).
pub struct RadosPool {
    image: Arc<Image>,
}

impl RadosPool {
    /// Creates a client as the RBD backend's `Image::pool` does (defaults,
    /// configuration file, options, keyring), connects it, and opens a context on
    /// `pool`.
    pub fn connect(params: &ClusterParams<'_>, pool: &str) -> Result<RadosPool, ClusterError> {
        Ok(RadosPool {
            image: Arc::new(Image::pool(params, pool)?),
        })
    }

    /// [`RadosPool::connect`] with a namespace's client settings (`ceph_conf`,
    /// `client_id`, `keyring`, `ceph_options`) and the RBD backend's defaults (a 30 s
    /// `client_mount_timeout`).
    pub fn open(opts: &RbdOptions, pool: &str) -> Result<RadosPool, ClusterError> {
        let options = super::option_pairs(&opts.ceph_options);
        RadosPool::connect(&super::cluster_params(opts, &options), pool)
    }

    fn io(&self) -> rados_ioctx_t {
        self.image.ioctx_handle()
    }

    /// The handle that owns this client, for opening RBD images on it (`Image::open_on`).
    pub(super) fn client(&self) -> &Arc<Image> {
        &self.image
    }

    /// This client's address as the OSDs see it (`rados_getaddrs`), in the form
    /// `ceph osd blocklist add` and [`RadosPool::blocklist_add`] take and
    /// [`Locker::addr`] shows: `127.0.0.1:0/3141592653` (IP, port 0, nonce; see
    /// [`typeless_addr`]).
    pub fn client_addr(&self) -> Result<String, CephError> {
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: connected cluster handle, valid out-pointer; librados stores a string
        // it allocated with strdup, freed below with free().
        check("rados_getaddrs", unsafe {
            rados_getaddrs(self.image.cluster_handle(), &mut p)
        })?;
        if p.is_null() {
            return Err(err("rados_getaddrs", libc::ENOMEM));
        }
        // SAFETY: `p` is a NUL-terminated string librados just returned.
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        // SAFETY: allocated by strdup in librados, freed once, not used afterwards.
        unsafe { libc::free(p.cast()) };
        Ok(typeless_addr(&s).to_string())
    }

    /// This client's instance (global) id: the `N` of `client.N`, the name its locks
    /// and watches are listed under. New for every connection.
    pub fn instance_id(&self) -> u64 {
        // SAFETY: connected cluster handle; the call only reads it.
        unsafe { rados_get_instance_id(self.image.cluster_handle()) }
    }

    /// Replaces the whole data of `oid` with `data` (creating the object).
    pub fn write_full(&self, oid: &str, data: &[u8]) -> Result<(), CephError> {
        let o = cstring("rados_write_full", oid)?;
        // SAFETY: valid pool context, NUL-terminated name, `data` readable for its
        // length during the (synchronous) call; librados copies it.
        check("rados_write_full", unsafe {
            rados_write_full(self.io(), o.as_ptr(), data.as_ptr().cast(), data.len())
        })
    }

    /// The whole data of `oid` (up to 64 MiB, else `EFBIG`); `Ok(None)` when the object
    /// does not exist. Each attempt is one read from offset 0, so the bytes are one
    /// version of the object.
    pub fn read_full(&self, oid: &str) -> Result<Option<Vec<u8>>, CephError> {
        let o = cstring("rados_read", oid)?;
        let mut len = FIRST_READ;
        while len <= MAX_READ {
            let mut buf = vec![0u8; len];
            // SAFETY: valid pool context, NUL-terminated name; librados writes at most
            // `len` bytes into `buf`, which outlives the synchronous call.
            let rc = unsafe { rados_read(self.io(), o.as_ptr(), buf.as_mut_ptr().cast(), len, 0) };
            if rc == -libc::ENOENT {
                return Ok(None);
            }
            check("rados_read", rc)?;
            let n = usize::try_from(rc).map_err(|_| err("rados_read", libc::EIO))?;
            if n < len {
                buf.truncate(n);
                return Ok(Some(buf));
            }
            // The buffer is full: the object may be larger. Read it whole again.
            len *= 2;
        }
        Err(err("rados_read", libc::EFBIG))
    }

    /// Removes `oid`; a missing object is fine.
    pub fn remove(&self, oid: &str) -> Result<(), CephError> {
        let o = cstring("rados_remove", oid)?;
        // SAFETY: valid pool context, NUL-terminated name.
        let rc = unsafe { rados_remove(self.io(), o.as_ptr()) };
        if rc == -libc::ENOENT {
            return Ok(());
        }
        check("rados_remove", rc)
    }

    /// All omap keys and values of `oid`; `Ok(None)` when the object does not exist.
    ///
    /// Read in pages of up to 1024 keys, each its own read: a map larger than a page
    /// read while it is being written may mix two versions (compare the version key
    /// of [`RadosPool::omap_cas`] with a second read when that matters). A key that
    /// is not UTF-8 fails the read with `EILSEQ`.
    pub fn omap_get_all(&self, oid: &str) -> Result<Option<BTreeMap<String, Vec<u8>>>, CephError> {
        self.omap_get_paged(oid, OMAP_PAGE)
    }

    fn omap_get_paged(
        &self,
        oid: &str,
        page: u64,
    ) -> Result<Option<BTreeMap<String, Vec<u8>>>, CephError> {
        let o = cstring("rados_read_op_operate", oid)?;
        let mut out = BTreeMap::new();
        let mut after = CString::default();
        loop {
            let Some((more, last)) = self.omap_page(&o, &after, page, &mut out)? else {
                return Ok(None);
            };
            match last {
                // An empty page that claims more would loop for ever: stop there.
                Some(k) if more => after = cstring("rados_read_op_omap_get_vals2", &k)?,
                _ => return Ok(Some(out)),
            }
        }
    }

    /// One page of keys after `after` into `out`: whether the OSD has more, and the
    /// last key read. `None`: no such object.
    fn omap_page(
        &self,
        oid: &CStr,
        after: &CStr,
        page: u64,
        out: &mut BTreeMap<String, Vec<u8>>,
    ) -> Result<Option<(bool, Option<String>)>, CephError> {
        let read = OmapRead::new()?;
        let mut more: c_uchar = 0;
        let mut prval: c_int = 0;
        let mut iter: rados_omap_iter_t = std::ptr::null_mut();
        // SAFETY: fresh read operation; `after` is NUL-terminated (librados copies it);
        // a null prefix means none; `iter`, `more` and `prval` stay alive until the
        // synchronous operate below returns, the last time librados writes them.
        unsafe {
            rados_read_op_omap_get_vals2(
                read.op,
                after.as_ptr(),
                std::ptr::null(),
                page,
                &mut iter,
                &mut more,
                &mut prval,
            )
        };
        // The iterator exists from here on, whatever happens: the guard ends it.
        let read = read.with_iter(iter);
        // SAFETY: valid pool context, the operation built above, NUL-terminated name.
        let rc = unsafe { rados_read_op_operate(read.op, self.io(), oid.as_ptr(), 0) };
        if rc == -libc::ENOENT {
            return Ok(None);
        }
        check("rados_read_op_operate", rc)?;
        check("rados_read_op_omap_get_vals2", prval)?;
        let mut last = None;
        loop {
            let (mut k, mut v) = (std::ptr::null_mut(), std::ptr::null_mut());
            let (mut kl, mut vl) = (0usize, 0usize);
            // SAFETY: the operation succeeded, so librados set the iterator up; the
            // out-pointers are valid.
            check("rados_omap_get_next2", unsafe {
                rados_omap_get_next2(read.iter, &mut k, &mut v, &mut kl, &mut vl)
            })?;
            if k.is_null() {
                break;
            }
            // SAFETY: librados returned `kl` bytes at `k`, valid until the iterator ends
            // (after this copy).
            let key = unsafe { std::slice::from_raw_parts(k.cast::<u8>(), kl) }.to_vec();
            let val = if v.is_null() || vl == 0 {
                Vec::new()
            } else {
                // SAFETY: as for the key: `vl` bytes at `v`, copied before the end.
                unsafe { std::slice::from_raw_parts(v.cast::<u8>(), vl) }.to_vec()
            };
            let key =
                String::from_utf8(key).map_err(|_| err("rados_omap_get_next2", libc::EILSEQ))?;
            last = Some(key.clone());
            out.insert(key, val);
        }
        Ok(Some((more != 0, last)))
    }

    /// Compare-and-write of `oid`'s omap in ONE write operation (all or nothing).
    ///
    /// The condition: with `expect == Some(v)`, the object exists and its key
    /// `version_key` equals `v` (a missing key compares as the empty value); with
    /// `None`, the object does not exist yet (it is created). Then each key of `set` is
    /// set and each key of `remove` removed. The caller puts the new version into
    /// `set` (under `version_key`), or the next writer's comparison cannot tell.
    ///
    /// [`Cas::Conflict`]: the comparison failed (`ECANCELED`), the object exists while
    /// `expect` is `None` (`EEXIST`), or it does not while `expect` is `Some`
    /// (`ENOENT`); nothing was written. Other failures are errors.
    pub fn omap_cas(
        &self,
        oid: &str,
        version_key: &str,
        expect: Option<&[u8]>,
        set: &[(&str, &[u8])],
        remove: &[&str],
    ) -> Result<Cas, CephError> {
        const CALL: &str = "rados_write_op_operate";
        let o = cstring(CALL, oid)?;
        let op = WriteOp::new()?;
        let mut prval: c_int = 0;
        match expect {
            Some(v) => {
                // SAFETY: fresh write operation; key and value are read (copied) during
                // the call, lengths given; `prval` outlives the operate below.
                unsafe {
                    rados_write_op_omap_cmp2(
                        op.0,
                        version_key.as_ptr().cast(),
                        LIBRADOS_CMPXATTR_OP_EQ,
                        v.as_ptr().cast(),
                        version_key.len(),
                        v.len(),
                        &mut prval,
                    )
                }
            }
            // SAFETY: fresh write operation; the category is unused and may be null.
            None => unsafe {
                rados_write_op_create(op.0, LIBRADOS_CREATE_EXCLUSIVE, std::ptr::null())
            },
        }
        if !set.is_empty() {
            let keys: Vec<*const c_char> = set.iter().map(|(k, _)| k.as_ptr().cast()).collect();
            let vals: Vec<*const c_char> = set.iter().map(|(_, v)| v.as_ptr().cast()).collect();
            let key_lens: Vec<usize> = set.iter().map(|(k, _)| k.len()).collect();
            let val_lens: Vec<usize> = set.iter().map(|(_, v)| v.len()).collect();
            // SAFETY: four arrays of `set.len()` entries, each pointer valid for its
            // length; librados copies keys and values during the call.
            unsafe {
                rados_write_op_omap_set2(
                    op.0,
                    keys.as_ptr(),
                    vals.as_ptr(),
                    key_lens.as_ptr(),
                    val_lens.as_ptr(),
                    set.len(),
                )
            };
        }
        if !remove.is_empty() {
            let keys: Vec<*const c_char> = remove.iter().map(|k| k.as_ptr().cast()).collect();
            let key_lens: Vec<usize> = remove.iter().map(|k| k.len()).collect();
            // SAFETY: two arrays of `remove.len()` entries, each key valid for its
            // length; librados copies the keys during the call.
            unsafe {
                rados_write_op_omap_rm_keys2(op.0, keys.as_ptr(), key_lens.as_ptr(), remove.len())
            };
        }
        // SAFETY: valid pool context, the operation built above, NUL-terminated name;
        // null mtime (now); `prval` is alive for the synchronous call.
        let rc =
            unsafe { rados_write_op_operate(op.0, self.io(), o.as_ptr(), std::ptr::null_mut(), 0) };
        let conflict = match expect {
            Some(_) => rc == -libc::ECANCELED || rc == -libc::ENOENT,
            None => rc == -libc::EEXIST,
        };
        if conflict {
            return Ok(Cas::Conflict);
        }
        check(CALL, rc).map(|()| Cas::Done)
    }

    /// Watches `oid` (`rados_watch2`; the object must exist, else `ENOENT`).
    ///
    /// `on_event` runs on librados' thread for every notify (its payload) and every
    /// watch error (the errno): it must only signal, never block (module docs). Each
    /// notify is acknowledged right after `on_event` returns, so notifiers do not wait
    /// for their timeout. The returned [`Watch`] unwatches when dropped.
    pub fn watch(
        &self,
        oid: &str,
        on_event: Box<dyn Fn(WatchEvent) + Send + Sync>,
    ) -> Result<Watch, CephError> {
        let ctx = Box::into_raw(Box::new(WatchCtx {
            ioctx: self.io(),
            oid: cstring("rados_watch2", oid)?,
            on_event,
        }));
        let mut cookie = 0u64;
        // SAFETY: valid pool context; `ctx` points to a live WatchCtx (its name is
        // NUL-terminated) that stays alive until the Watch's drop has unwatched and
        // flushed the callbacks; both callbacks match librados' types.
        let rc = unsafe {
            rados_watch2(
                self.io(),
                (*ctx).oid.as_ptr(),
                &mut cookie,
                on_notify,
                Some(on_watch_error),
                ctx.cast(),
            )
        };
        if rc < 0 {
            // librados cancelled the watch; let anything it queued run before freeing.
            // SAFETY: connected cluster handle.
            unsafe { rados_watch_flush(self.image.cluster_handle()) };
            // SAFETY: no watch refers to `ctx` any more and its callbacks have run: the
            // box is reclaimed once, here.
            drop(unsafe { Box::from_raw(ctx) });
            return Err(err("rados_watch2", -rc));
        }
        Ok(Watch {
            image: self.image.clone(),
            cookie,
            ctx,
        })
    }

    /// Whether watch `w` still stands (`rados_watch_check`): `Err` when it was lost (the
    /// OSD dropped it, the client was blocklisted...), and then it should be dropped and
    /// made again. `w` is checked on the client that made it.
    pub fn watch_check(&self, w: &Watch) -> Result<(), CephError> {
        // SAFETY: the watch's own pool context (alive: the Watch holds its client) and
        // its cookie, not yet unwatched.
        check("rados_watch_check", unsafe {
            rados_watch_check(w.image.ioctx_handle(), w.cookie)
        })
    }

    /// Notifies the watchers of `oid` with `payload` and waits until all of them
    /// acknowledged, or `timeout` (rounded up to whole seconds, at least 1 s: the
    /// module docs) passed, then `Err` with `ETIMEDOUT`. No watchers: returns at once.
    /// A missing object is `ENOENT`.
    pub fn notify(&self, oid: &str, payload: &[u8], timeout: Duration) -> Result<(), CephError> {
        const CALL: &str = "rados_notify2";
        let o = cstring(CALL, oid)?;
        let len = c_int::try_from(payload.len()).map_err(|_| err(CALL, libc::EINVAL))?;
        let secs = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
        let ms = secs.max(1).saturating_mul(1000);
        let (mut reply, mut reply_len) = (std::ptr::null_mut::<c_char>(), 0usize);
        // SAFETY: valid pool context, NUL-terminated name, `payload` readable for `len`
        // bytes (copied); valid out-pointers for the reply, freed below.
        let rc = unsafe {
            rados_notify2(
                self.io(),
                o.as_ptr(),
                payload.as_ptr().cast(),
                len,
                ms,
                &mut reply,
                &mut reply_len,
            )
        };
        if !reply.is_null() {
            // SAFETY: allocated by librados for this call (even on error), freed once.
            unsafe { rados_buffer_free(reply) };
        }
        check(CALL, rc)
    }

    /// Takes the `cls_lock` exclusive lock `name` on `oid` (creating the object) with
    /// `cookie` and `desc`, for `duration` from now (`Duration::ZERO`: until unlocked
    /// or broken). With `renew`, a lock this client already holds with this cookie is
    /// extended, and an expired or free one taken.
    ///
    /// [`Lock::Busy`]: another client or cookie holds it and it has not expired
    /// (`EBUSY`), or, without `renew`, this client and cookie already hold it (`EEXIST`;
    /// the lock was not extended then).
    pub fn lock_exclusive(
        &self,
        oid: &str,
        name: &str,
        cookie: &str,
        desc: &str,
        duration: Duration,
        renew: bool,
    ) -> Result<Lock, CephError> {
        const CALL: &str = "rados_lock_exclusive";
        let (o, n) = (cstring(CALL, oid)?, cstring(CALL, name)?);
        let (c, d) = (cstring(CALL, cookie)?, cstring(CALL, desc)?);
        let mut tv = libc::timeval {
            tv_sec: libc::time_t::try_from(duration.as_secs())
                .map_err(|_| err(CALL, libc::EINVAL))?,
            tv_usec: libc::suseconds_t::from(duration.subsec_micros()),
        };
        let tvp: *mut libc::timeval = if duration.is_zero() {
            std::ptr::null_mut()
        } else {
            &mut tv
        };
        let flags = if renew {
            LIBRADOS_LOCK_FLAG_MAY_RENEW
        } else {
            0
        };
        // SAFETY: valid pool context; four NUL-terminated strings and the duration (or
        // null: no expiry) alive for the synchronous call.
        let rc = unsafe {
            rados_lock_exclusive(
                self.io(),
                o.as_ptr(),
                n.as_ptr(),
                c.as_ptr(),
                d.as_ptr(),
                tvp,
                flags,
            )
        };
        if rc == -libc::EBUSY || rc == -libc::EEXIST {
            return Ok(Lock::Busy);
        }
        check(CALL, rc).map(|()| Lock::Acquired)
    }

    /// Releases lock `name` on `oid` that this client holds with `cookie`; not holding
    /// it (`ENOENT`: never taken, expired, broken) is fine.
    pub fn unlock(&self, oid: &str, name: &str, cookie: &str) -> Result<(), CephError> {
        const CALL: &str = "rados_unlock";
        let (o, n, c) = (
            cstring(CALL, oid)?,
            cstring(CALL, name)?,
            cstring(CALL, cookie)?,
        );
        // SAFETY: valid pool context; three NUL-terminated strings alive for the call.
        let rc = unsafe { rados_unlock(self.io(), o.as_ptr(), n.as_ptr(), c.as_ptr()) };
        if rc == -libc::ENOENT {
            return Ok(());
        }
        check(CALL, rc)
    }

    /// The current (unexpired) holders of lock `name` on `oid` (`rados_list_lockers`):
    /// empty when nobody holds it or the object does not exist.
    pub fn lockers(&self, oid: &str, name: &str) -> Result<Vec<Locker>, CephError> {
        const CALL: &str = "rados_list_lockers";
        let (o, n) = (cstring(CALL, oid)?, cstring(CALL, name)?);
        // Buffer sizes: tag, clients, cookies, addresses. On ERANGE librados stores the
        // sizes it needs; the lockers may change before the next attempt.
        let mut lens = [FIRST_LOCKERS_BUF; 4];
        for _ in 0..LOCKERS_ATTEMPTS {
            let mut bufs: [Vec<u8>; 4] = lens.map(|l| vec![0u8; l.max(1)]);
            let mut got = bufs.each_ref().map(Vec::len);
            let mut exclusive: c_int = 0;
            let [tag, clients, cookies, addrs] = &mut bufs;
            let [tag_len, clients_len, cookies_len, addrs_len] = &mut got;
            // SAFETY: valid pool context, two NUL-terminated strings; each buffer is
            // writable for the length passed with it, and librados writes no more
            // (it checks every length and returns ERANGE before copying).
            let rc = unsafe {
                rados_list_lockers(
                    self.io(),
                    o.as_ptr(),
                    n.as_ptr(),
                    &mut exclusive,
                    tag.as_mut_ptr().cast(),
                    tag_len,
                    clients.as_mut_ptr().cast(),
                    clients_len,
                    cookies.as_mut_ptr().cast(),
                    cookies_len,
                    addrs.as_mut_ptr().cast(),
                    addrs_len,
                )
            };
            let rc = c_int::try_from(rc).map_err(|_| err(CALL, libc::EIO))?;
            if rc == -libc::ERANGE {
                // Grow to what librados asked for (never shrink below what we tried).
                for (l, g) in lens.iter_mut().zip(got) {
                    *l = (*l).max(g);
                }
                continue;
            }
            if rc == -libc::ENOENT {
                return Ok(Vec::new());
            }
            check(CALL, rc)?;
            let count = usize::try_from(rc).map_err(|_| err(CALL, libc::EIO))?;
            let split = |buf: &[u8], used: usize| -> Result<Vec<String>, CephError> {
                let used = buf.get(..used).ok_or(err(CALL, libc::EIO))?;
                let v: Vec<String> = used
                    .split(|b| *b == 0)
                    .take(count)
                    .map(|s| String::from_utf8(s.to_vec()).map_err(|_| err(CALL, libc::EILSEQ)))
                    .collect::<Result<_, _>>()?;
                if v.len() == count {
                    Ok(v)
                } else {
                    Err(err(CALL, libc::EIO))
                }
            };
            let clients = split(clients, *clients_len)?;
            let cookies = split(cookies, *cookies_len)?;
            let addrs = split(addrs, *addrs_len)?;
            return Ok(clients
                .into_iter()
                .zip(cookies)
                .zip(addrs)
                .map(|((client, cookie), addr)| Locker {
                    client,
                    cookie,
                    addr: typeless_addr(&addr).to_string(),
                })
                .collect());
        }
        Err(err(CALL, libc::EAGAIN))
    }

    /// Breaks lock `name` on `oid` held by `client` (`client.4123`, from
    /// [`RadosPool::lockers`]) with `cookie`. Already gone (`ENOENT`) is fine. Breaking
    /// does not stop the old holder from writing: fence it first
    /// ([`RadosPool::blocklist_add`]).
    pub fn break_lock(
        &self,
        oid: &str,
        name: &str,
        client: &str,
        cookie: &str,
    ) -> Result<(), CephError> {
        const CALL: &str = "rados_break_lock";
        let (o, n) = (cstring(CALL, oid)?, cstring(CALL, name)?);
        let (cl, c) = (cstring(CALL, client)?, cstring(CALL, cookie)?);
        // SAFETY: valid pool context; four NUL-terminated strings alive for the call.
        let rc =
            unsafe { rados_break_lock(self.io(), o.as_ptr(), n.as_ptr(), cl.as_ptr(), c.as_ptr()) };
        if rc == -libc::ENOENT {
            return Ok(());
        }
        check(CALL, rc)
    }

    /// Fences the client at `addr` ([`Locker::addr`], [`RadosPool::client_addr`]) for
    /// `expire` (`Duration::ZERO`: the monitors' default, an hour): the monitor command
    /// `osd blocklist add` (the older `osd blacklist` spelling if the monitors refuse
    /// the first with `EINVAL`), then this client waits for the osdmap that has it.
    /// From then on the OSDs refuse that client's operations with `EBLOCKLISTED`
    /// (108), and any operation of this client is only served by OSDs that have that
    /// map.
    pub fn blocklist_add(&self, addr: &str, expire: Duration) -> Result<(), CephError> {
        let cmd = |prefix: &str, op_key: &str| {
            let mut m = serde_json::Map::new();
            m.insert("prefix".into(), prefix.into());
            m.insert(op_key.into(), "add".into());
            m.insert("addr".into(), addr.into());
            if !expire.is_zero() {
                m.insert("expire".into(), expire.as_secs_f64().into());
            }
            serde_json::Value::Object(m).to_string()
        };
        match self.image.mon_command(&cmd("osd blocklist", "blocklistop")) {
            Err(CephError {
                errno: libc::EINVAL,
                ..
            }) => self
                .image
                .mon_command(&cmd("osd blacklist", "blacklistop"))?,
            r => r?,
        };
        // SAFETY: connected cluster handle; blocks until the monitors sent the latest map.
        check("rados_wait_for_latest_osdmap", unsafe {
            rados_wait_for_latest_osdmap(self.image.cluster_handle())
        })
    }
}

/// A read operation and, once asked for, its omap iterator; released on drop (the
/// operation first: it refers to the iterator's storage).
struct OmapRead {
    op: rados_read_op_t,
    iter: rados_omap_iter_t,
}

impl OmapRead {
    fn new() -> Result<OmapRead, CephError> {
        // SAFETY: plain allocation; null on failure.
        let op = unsafe { rados_create_read_op() };
        if op.is_null() {
            return Err(err("rados_create_read_op", libc::ENOMEM));
        }
        Ok(OmapRead {
            op,
            iter: std::ptr::null_mut(),
        })
    }

    fn with_iter(mut self, iter: rados_omap_iter_t) -> OmapRead {
        self.iter = iter;
        self
    }
}

impl Drop for OmapRead {
    fn drop(&mut self) {
        // SAFETY: created by rados_create_read_op, released once; no operation on it
        // is running (operate is synchronous).
        unsafe { rados_release_read_op(self.op) };
        if !self.iter.is_null() {
            // SAFETY: the iterator rados_read_op_omap_get_vals2 allocated, ended once,
            // after its operation.
            unsafe { rados_omap_get_end(self.iter) };
        }
    }
}

/// A write operation, released on drop.
struct WriteOp(rados_write_op_t);

impl WriteOp {
    fn new() -> Result<WriteOp, CephError> {
        // SAFETY: plain allocation; null on failure.
        let op = unsafe { rados_create_write_op() };
        if op.is_null() {
            return Err(err("rados_create_write_op", libc::ENOMEM));
        }
        Ok(WriteOp(op))
    }
}

impl Drop for WriteOp {
    fn drop(&mut self) {
        // SAFETY: created by rados_create_write_op, released once, not running.
        unsafe { rados_release_write_op(self.0) };
    }
}

/// What librados hands back to [`on_notify`] and [`on_watch_error`].
struct WatchCtx {
    /// The pool context the watch was made on (alive: the Watch holds the client).
    ioctx: rados_ioctx_t,
    oid: CString,
    on_event: Box<dyn Fn(WatchEvent) + Send + Sync>,
}

impl WatchCtx {
    fn deliver(&self, ev: WatchEvent) {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (self.on_event)(ev)));
        if r.is_err() {
            tracing::error!(oid = ?self.oid, "a RADOS watch callback panicked");
        }
    }
}

/// librados' notify callback (its finisher thread): hands the payload over, then
/// acknowledges the notify.
extern "C" fn on_notify(
    arg: *mut c_void,
    notify_id: u64,
    cookie: u64,
    _notifier_id: u64,
    data: *mut c_void,
    len: usize,
) {
    // SAFETY: `arg` is the WatchCtx of a live Watch: it is freed only after the watch
    // was unwatched and rados_watch_flush ran every queued callback.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    let payload = if data.is_null() || len == 0 {
        Vec::new()
    } else {
        // SAFETY: librados passes `len` bytes at `data`, valid during the callback.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len) }.to_vec()
    };
    ctx.deliver(WatchEvent::Notify(payload));
    // SAFETY: the watch's pool context and NUL-terminated name (alive, as above); no
    // ack payload. rados_notify_ack only queues the ack, it does not wait.
    unsafe {
        rados_notify_ack(
            ctx.ioctx,
            ctx.oid.as_ptr(),
            notify_id,
            cookie,
            std::ptr::null(),
            0,
        )
    };
}

/// librados' watch error callback: hands the errno over.
extern "C" fn on_watch_error(arg: *mut c_void, _cookie: u64, errno: c_int) {
    // SAFETY: as in `on_notify`: the context outlives every callback.
    let ctx = unsafe { &*arg.cast::<WatchCtx>() };
    ctx.deliver(WatchEvent::Error(errno.saturating_abs()));
}

/// A watch on one object ([`RadosPool::watch`]); unwatches on drop (module docs).
/// Dropping it is a round trip to the OSD and waits for callbacks still running: never
/// drop it from its own `on_event`.
pub struct Watch {
    image: Arc<Image>,
    cookie: u64,
    ctx: *mut WatchCtx,
}

// SAFETY: the context is only read (shared) by librados' callback thread and freed by
// the Watch's drop after the callbacks stopped; its `on_event` is Send + Sync, its
// pool context thread-safe. The cookie and the client handle are usable from any thread.
unsafe impl Send for Watch {}
// SAFETY: as for Send: `&Watch` gives nothing but the cookie (rados_watch_check).
unsafe impl Sync for Watch {}

impl Watch {
    /// librados' handle of this watch (the cookie of its notifies).
    pub fn cookie(&self) -> u64 {
        self.cookie
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        // SAFETY: the watch's own pool context (the Watch holds its client) and cookie,
        // unwatched once; librados cancels the watch locally even when the OSD cannot
        // be told (the error is then only logged).
        let rc = unsafe { rados_unwatch2(self.image.ioctx_handle(), self.cookie) };
        if rc < 0 {
            tracing::debug!(errno = -rc, "rados_unwatch2 failed");
        }
        // SAFETY: connected cluster handle; waits for the callbacks already queued.
        let rc = unsafe { rados_watch_flush(self.image.cluster_handle()) };
        if rc < 0 {
            // A callback might still run: leak the context rather than free it under it.
            tracing::warn!(
                errno = -rc,
                "rados_watch_flush failed; leaking a watch context"
            );
            return;
        }
        // SAFETY: created by Box::into_raw in `watch`; no callback can use it any more
        // (unwatched, flushed); reclaimed once.
        drop(unsafe { Box::from_raw(self.ctx) });
    }
}

#[cfg(test)]
#[path = "rados_tests.rs"]
mod tests;
