//! The dozen librados and librbd calls the RBD backend needs, declared by hand (there is
//! no maintained Rust crate), and the safe types around them. Every `unsafe` of the RBD
//! backend is in this file or in [`super::rados`] (the object, omap, watch/notify, lock
//! and blocklist calls of gateway groups, which reuses [`Image::pool`]'s connection
//! through the raw-handle accessors here).
//!
//! # Ownership
//!
//! * [`Image`] has one cluster handle (`rados_t`), one pool context and one open image,
//!   and closes them in reverse order on drop. It is shared (`Arc`) by the backend and
//!   every operation in flight, so it cannot be closed under an operation.
//! * The cluster handle is the image's own ([`Image::open`], [`Image::pool`]: created,
//!   connected and shut down by it) or shared ([`Image::open_on`]: the connected handle
//!   of another `Image`, the one that created it, e.g. a gateway group's
//!   [`super::rados::RadosPool`]). A shared image holds an `Arc` to that owner and on
//!   drop closes only its image and its pool context; the owner reference goes after
//!   them, so the handle is shut down once the owner and every image opened on it are
//!   gone, never under one of them.
//! * [`Completions`] is a channel's completion mailbox: a lock-free queue
//!   ([`std::sync::mpsc`]) and an eventfd. librbd's callback thread only pushes a
//!   [`Done`] and writes the eventfd ([`on_complete`]); the poll group does everything
//!   else (return value, release, mapping, completing the NVMe command).
//! * [`InFlight`] owns a submitted operation: its librbd completion, its data buffer
//!   and a reference to the image. [`InFlight::finish`] releases them, and accepts only
//!   the [`Done`] that librbd's callback produced for this very completion, so a buffer
//!   is never handed back while librbd may still read or write it. An `InFlight` dropped
//!   unfinished leaks its buffer and image reference instead of freeing them.
//! * librbd's callback holds only the mailbox, never the [`Image`], so the last
//!   reference to an image is never dropped on librbd's own thread (where `rbd_close`
//!   would wait for itself), nor, through a shared image, the last reference to the
//!   owner of its cluster handle (where `rados_shutdown` would join that thread).
//!
//! # Ordering
//!
//! The callback pushes to the queue before it writes the eventfd, so a completion
//! always leaves the eventfd readable until somebody reads (clears) it, and whoever
//! clears it empties the queue after: the poll group's runtime, which reads a backend's
//! eventfd when epoll reports it and reaps the channel in the same pass, or
//! [`Completions::wait`]. [`Completions::drain`] only empties the queue: a spinning
//! poll group drains on every pass with I/O in flight, and reading the eventfd there
//! was a system call per pass (12 to 15 per command at 128 KiB read) for a wake-up
//! nobody waited for. What accumulates while it spins wakes its first epoll wait at
//! once, which reads it; the wait after that sleeps.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::path::Path;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};

use crate::backend::DmaSlice;

pub(super) type rados_t = *mut c_void;
pub(super) type rados_ioctx_t = *mut c_void;
type rbd_image_t = *mut c_void;
type rbd_completion_t = *mut c_void;
type rbd_callback_t = extern "C" fn(rbd_completion_t, *mut c_void);

#[link(name = "rados")]
extern "C" {
    fn rados_create(cluster: *mut rados_t, id: *const c_char) -> c_int;
    fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    fn rados_conf_set(cluster: rados_t, option: *const c_char, value: *const c_char) -> c_int;
    fn rados_conf_get(
        cluster: rados_t,
        option: *const c_char,
        buf: *mut c_char,
        len: usize,
    ) -> c_int;
    fn rados_connect(cluster: rados_t) -> c_int;
    fn rados_shutdown(cluster: rados_t);
    fn rados_ioctx_create(cluster: rados_t, pool: *const c_char, io: *mut rados_ioctx_t) -> c_int;
    fn rados_ioctx_destroy(io: rados_ioctx_t);
    fn rados_cluster_stat(cluster: rados_t, result: *mut rados_cluster_stat_t) -> c_int;
    fn rados_mon_command(
        cluster: rados_t,
        cmd: *mut *const c_char,
        cmdlen: usize,
        inbuf: *const c_char,
        inbuflen: usize,
        outbuf: *mut *mut c_char,
        outbuflen: *mut usize,
        outs: *mut *mut c_char,
        outslen: *mut usize,
    ) -> c_int;
    pub(super) fn rados_buffer_free(buf: *mut c_char);
}

/// librados' `struct rados_cluster_stat_t` (sizes in KiB).
#[repr(C)]
#[derive(Default)]
struct rados_cluster_stat_t {
    kb: u64,
    kb_used: u64,
    kb_avail: u64,
    num_objects: u64,
}

type rbd_image_options_t = *mut c_void;

/// `RBD_IMAGE_OPTION_FEATURES` and `RBD_IMAGE_OPTION_DATA_POOL` of librbd.h.
const RBD_IMAGE_OPTION_FEATURES: c_int = 1;
const RBD_IMAGE_OPTION_DATA_POOL: c_int = 10;

#[link(name = "rbd")]
extern "C" {
    fn rbd_open(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap: *const c_char,
    ) -> c_int;
    fn rbd_close(image: rbd_image_t) -> c_int;
    fn rbd_image_options_create(opts: *mut rbd_image_options_t);
    fn rbd_image_options_destroy(opts: rbd_image_options_t);
    fn rbd_image_options_set_string(
        opts: rbd_image_options_t,
        optname: c_int,
        optval: *const c_char,
    ) -> c_int;
    fn rbd_image_options_set_uint64(
        opts: rbd_image_options_t,
        optname: c_int,
        optval: u64,
    ) -> c_int;
    fn rbd_create4(
        io: rados_ioctx_t,
        name: *const c_char,
        size: u64,
        opts: rbd_image_options_t,
    ) -> c_int;
    fn rbd_remove(io: rados_ioctx_t, name: *const c_char) -> c_int;
    fn rbd_resize2(
        image: rbd_image_t,
        size: u64,
        allow_shrink: bool,
        cb: Option<extern "C" fn(u64, u64, *mut c_void) -> c_int>,
        cbdata: *mut c_void,
    ) -> c_int;
    fn rbd_get_size(image: rbd_image_t, size: *mut u64) -> c_int;
    fn rbd_get_stripe_unit(image: rbd_image_t, stripe_unit: *mut u64) -> c_int;
    fn rbd_flush(image: rbd_image_t) -> c_int;
    fn rbd_aio_create_completion(
        arg: *mut c_void,
        cb: rbd_callback_t,
        c: *mut rbd_completion_t,
    ) -> c_int;
    fn rbd_aio_read(
        image: rbd_image_t,
        off: u64,
        len: usize,
        buf: *mut c_char,
        c: rbd_completion_t,
    ) -> c_int;
    fn rbd_aio_write(
        image: rbd_image_t,
        off: u64,
        len: usize,
        buf: *const c_char,
        c: rbd_completion_t,
    ) -> c_int;
    fn rbd_aio_discard(image: rbd_image_t, off: u64, len: u64, c: rbd_completion_t) -> c_int;
    fn rbd_aio_write_zeroes(
        image: rbd_image_t,
        off: u64,
        len: usize,
        c: rbd_completion_t,
        zero_flags: c_int,
        op_flags: c_int,
    ) -> c_int;
    fn rbd_aio_flush(image: rbd_image_t, c: rbd_completion_t) -> c_int;
    fn rbd_aio_compare_and_write(
        image: rbd_image_t,
        off: u64,
        len: usize,
        cmp_buf: *const c_char,
        buf: *const c_char,
        c: rbd_completion_t,
        mismatch_off: *mut u64,
        op_flags: c_int,
    ) -> isize;
    fn rbd_aio_get_return_value(c: rbd_completion_t) -> isize;
    fn rbd_aio_release(c: rbd_completion_t);
}

/// Largest configuration value [`Image::conf_get`] reads.
const MAX_CONF_VALUE: usize = 64 * 1024;
/// First buffer size tried by [`Image::conf_get`].
const FIRST_CONF_BUF: usize = 256;

/// A failed librados/librbd call: which one, and its errno.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CephError {
    pub call: &'static str,
    pub errno: i32,
}

impl std::fmt::Display for CephError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} failed: {}",
            self.call,
            std::io::Error::from_raw_os_error(self.errno)
        )
    }
}

impl std::error::Error for CephError {}

/// Why a cluster handle could not be set up, connected or opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    #[error(transparent)]
    Call(#[from] CephError),
    /// librados refused one of the namespace's `ceph_options`. The value is not part of
    /// the message: the name is what the operator needs, and values stay out of logs.
    #[error("ceph_options: {key}: {}", option_refusal(*errno))]
    Option { key: String, errno: i32 },
}

/// What `rados_conf_set`'s errno means for an option of `ceph_options`.
fn option_refusal(errno: i32) -> String {
    match errno {
        libc::ENOENT => "not a Ceph option".into(),
        libc::EINVAL => "librados refused the value (not valid for this option)".into(),
        _ => format!(
            "rados_conf_set failed: {}",
            std::io::Error::from_raw_os_error(errno)
        ),
    }
}

pub(super) fn check(call: &'static str, rc: c_int) -> Result<(), CephError> {
    if rc < 0 {
        Err(CephError { call, errno: -rc })
    } else {
        Ok(())
    }
}

pub(super) fn cstring(call: &'static str, s: &str) -> Result<CString, CephError> {
    CString::new(s).map_err(|_| CephError {
        call,
        errno: libc::EINVAL,
    })
}

fn path_cstring(call: &'static str, p: &Path) -> Result<CString, CephError> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(p.as_os_str().as_bytes()).map_err(|_| CephError {
        call,
        errno: libc::EINVAL,
    })
}

/// How to reach the cluster.
#[derive(Debug, Clone, Default)]
pub struct ClusterParams<'a> {
    /// Configuration file; `None`: librados' default search.
    pub conf: Option<&'a Path>,
    /// Client id (`admin`); `None`: librados' default.
    pub client_id: Option<&'a str>,
    /// Keyring file; `None`: what the configuration says.
    pub keyring: Option<&'a Path>,
    /// Options set before the configuration file is read (the file wins).
    pub defaults: &'a [(&'a str, &'a str)],
    /// The namespace's `ceph_options`, set after the file is read (they win).
    pub options: &'a [(&'a str, &'a str)],
}

/// A cluster connection, a pool context and an open image (see the module docs).
pub struct Image {
    cluster: rados_t,
    /// `None`: `cluster` is this Image's own, shut down by its drop. `Some`: the Image
    /// that owns `cluster` (never itself a shared one), kept alive by this reference
    /// until this image and its pool context are closed (module docs).
    owner: Option<Arc<Image>>,
    ioctx: rados_ioctx_t,
    image: rbd_image_t,
}

// SAFETY: the handles are opaque pointers to librados/librbd objects that have no thread
// affinity; librbd serialises access to an image internally, and its C API may be
// called for one image from several threads at once (AIO submission, size queries).
unsafe impl Send for Image {}
// SAFETY: as for Send: every method takes `&self` and librbd locks internally.
unsafe impl Sync for Image {}

impl Image {
    /// A cluster handle for client `client_id` (librados' default id if `None`), not
    /// configured or connected; no pool or image yet. Dropping it shuts it down.
    fn create(client_id: Option<&str>) -> Result<Image, CephError> {
        let id = client_id.map(|i| cstring("rados_create", i)).transpose()?;
        let mut cluster: rados_t = std::ptr::null_mut();
        // SAFETY: `cluster` is a valid out-pointer; `id` is a NUL-terminated string or
        // null (librados' default id), alive for the call.
        let rc = unsafe {
            rados_create(
                &mut cluster,
                id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        check("rados_create", rc)?;
        // From here on the Image owns the handle, and its Drop shuts it down.
        Ok(Image {
            cluster,
            owner: None,
            ioctx: std::ptr::null_mut(),
            image: std::ptr::null_mut(),
        })
    }

    /// Sets each of `options` (a namespace's `ceph_options`) on the unconnected handle;
    /// librados checks the name and parses the value for the option's type here.
    fn set_options(&self, options: &[(&str, &str)]) -> Result<(), ClusterError> {
        for (key, value) in options {
            self.conf_set(key, value)
                .map_err(|e| ClusterError::Option {
                    key: (*key).to_string(),
                    errno: e.errno,
                })?;
        }
        Ok(())
    }

    /// Connects to the cluster and opens `pool`/`name` (its head, read-write).
    pub fn open(params: &ClusterParams<'_>, pool: &str, name: &str) -> Result<Image, ClusterError> {
        let mut img = Image::pool(params, pool)?;
        img.open_image(name)?;
        Ok(img)
    }

    /// Opens `pool`/`name` (its head, read-write) on `client`'s connected cluster
    /// handle, with a pool context of its own: no new connection. The returned image
    /// keeps the handle's owner alive and does not shut the handle down (module docs).
    /// Operations of the image are the owner's client's: same address, same
    /// configuration (`rbd_cache`, timeouts), fenced together.
    pub fn open_on(client: &Arc<Image>, pool: &str, name: &str) -> Result<Image, CephError> {
        // Only `create` makes an Image without a pool context, and it never leaves this
        // module unconnected; check anyway rather than use an unconnected handle.
        if client.ioctx.is_null() {
            return Err(CephError {
                call: "rados_ioctx_create",
                errno: libc::ENOTCONN,
            });
        }
        let owner = client.owner.clone().unwrap_or_else(|| client.clone());
        // From here on Drop closes what is opened below, and leaves the handle to `owner`.
        let mut img = Image {
            cluster: owner.cluster,
            owner: Some(owner),
            ioctx: std::ptr::null_mut(),
            image: std::ptr::null_mut(),
        };
        let pool_c = cstring("rados_ioctx_create", pool)?;
        // SAFETY: connected cluster handle (the owner has a pool context, so it
        // connected), kept alive by `img.owner`; NUL-terminated pool name; valid
        // out-pointer. librados handles are thread-safe: other images and the owner may
        // use the handle at the same time.
        let rc = unsafe { rados_ioctx_create(img.cluster, pool_c.as_ptr(), &mut img.ioctx) };
        check("rados_ioctx_create", rc)?;
        img.open_image(name)?;
        Ok(img)
    }

    /// Opens image `name` (its head, read-write) in this handle's pool context.
    fn open_image(&mut self, name: &str) -> Result<(), CephError> {
        let name_c = cstring("rbd_open", name)?;
        // SAFETY: valid pool context, NUL-terminated image name, valid out-pointer; a
        // null snapshot name opens the image head read-write.
        let rc = unsafe {
            rbd_open(
                self.ioctx,
                name_c.as_ptr(),
                &mut self.image,
                std::ptr::null(),
            )
        };
        check("rbd_open", rc)
    }

    /// Whether this image uses another Image's cluster handle ([`Image::open_on`]).
    pub fn shares_client(&self) -> bool {
        self.owner.is_some()
    }

    /// Connects to the cluster and opens a context on `pool` (no image).
    pub fn pool(params: &ClusterParams<'_>, pool: &str) -> Result<Image, ClusterError> {
        let mut img = Image::create(params.client_id)?;
        for (k, v) in params.defaults {
            img.conf_set(k, v)?;
        }
        let conf = params
            .conf
            .map(|p| path_cstring("rados_conf_read_file", p))
            .transpose()?;
        // SAFETY: the cluster handle is valid and not connected yet; the path is a
        // NUL-terminated string or null (default search), alive for the call.
        let rc = unsafe {
            rados_conf_read_file(
                img.cluster,
                conf.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        // Without an explicit file, a missing default file is fine when the
        // environment (CEPH_ARGS) or the defaults are enough.
        if params.conf.is_some() || rc != -libc::ENOENT {
            check("rados_conf_read_file", rc)?;
        }
        // After the file, so an option given for this namespace overrides it.
        img.set_options(params.options)?;
        if let Some(k) = params.keyring {
            let k = k.to_string_lossy();
            img.conf_set("keyring", &k)?;
        }
        // SAFETY: the cluster handle is valid and configured; connect blocks until the
        // monitors answer or `client_mount_timeout` passes.
        check("rados_connect", unsafe { rados_connect(img.cluster) })?;
        let pool_c = cstring("rados_ioctx_create", pool)?;
        // SAFETY: connected cluster, NUL-terminated pool name, valid out-pointer.
        let rc = unsafe { rados_ioctx_create(img.cluster, pool_c.as_ptr(), &mut img.ioctx) };
        check("rados_ioctx_create", rc)?;
        Ok(img)
    }

    /// The connected cluster handle, for [`super::rados`]. Valid while `self` lives.
    pub(super) fn cluster_handle(&self) -> rados_t {
        self.cluster
    }

    /// The pool context, for [`super::rados`]: set (non-null) on every handle that
    /// [`Image::pool`] or [`Image::open`] returned, and valid while `self` lives.
    pub(super) fn ioctx_handle(&self) -> rados_ioctx_t {
        self.ioctx
    }

    /// The cluster's raw capacity in bytes (connected handle).
    pub fn cluster_bytes(&self) -> Result<u64, CephError> {
        let mut st = rados_cluster_stat_t::default();
        // SAFETY: connected cluster handle, valid out-pointer to a struct of librados'
        // layout.
        check("rados_cluster_stat", unsafe {
            rados_cluster_stat(self.cluster, &mut st)
        })?;
        Ok(st.kb.saturating_mul(1024))
    }

    /// Runs one monitor command (`{"prefix": ...}` JSON); its output.
    pub fn mon_command(&self, json: &str) -> Result<Vec<u8>, CephError> {
        let cmd = cstring("rados_mon_command", json)?;
        let mut cmds = [cmd.as_ptr()];
        let (mut out, mut out_len) = (std::ptr::null_mut::<c_char>(), 0usize);
        let (mut status, mut status_len) = (std::ptr::null_mut::<c_char>(), 0usize);
        // SAFETY: connected cluster; one NUL-terminated command alive for the call; no
        // input buffer; valid out-pointers, whose buffers librados allocates and we
        // free below with rados_buffer_free.
        let rc = unsafe {
            rados_mon_command(
                self.cluster,
                cmds.as_mut_ptr(),
                cmds.len(),
                std::ptr::null(),
                0,
                &mut out,
                &mut out_len,
                &mut status,
                &mut status_len,
            )
        };
        let bytes = if out.is_null() || out_len == 0 {
            Vec::new()
        } else {
            // SAFETY: librados returned `out_len` bytes at `out`, valid until freed.
            unsafe { std::slice::from_raw_parts(out.cast::<u8>(), out_len) }.to_vec()
        };
        for b in [out, status] {
            if !b.is_null() {
                // SAFETY: allocated by librados for this call, freed once.
                unsafe { rados_buffer_free(b) };
            }
        }
        check("rados_mon_command", rc)?;
        Ok(bytes)
    }

    /// Creates image `name` of `size` bytes in this handle's pool, with `features`
    /// (librbd's bits; `None`: the cluster's default) and its data in `data_pool`.
    pub fn create_image(
        &self,
        name: &str,
        size: u64,
        features: Option<u64>,
        data_pool: Option<&str>,
    ) -> Result<(), CephError> {
        let name_c = cstring("rbd_create4", name)?;
        let data_pool_c = data_pool.map(|d| cstring("rbd_create4", d)).transpose()?;
        let mut opts: rbd_image_options_t = std::ptr::null_mut();
        // SAFETY: valid out-pointer; destroyed below on every path.
        unsafe { rbd_image_options_create(&mut opts) };
        let set = || -> Result<(), CephError> {
            if let Some(f) = features {
                // SAFETY: options created above, still alive.
                check("rbd_image_options_set_uint64", unsafe {
                    rbd_image_options_set_uint64(opts, RBD_IMAGE_OPTION_FEATURES, f)
                })?;
            }
            if let Some(d) = &data_pool_c {
                // SAFETY: options alive; NUL-terminated string alive for the call
                // (librbd copies it).
                check("rbd_image_options_set_string", unsafe {
                    rbd_image_options_set_string(opts, RBD_IMAGE_OPTION_DATA_POOL, d.as_ptr())
                })?;
            }
            // SAFETY: valid pool context, NUL-terminated name, options alive.
            check("rbd_create4", unsafe {
                rbd_create4(self.ioctx, name_c.as_ptr(), size, opts)
            })
        };
        let r = set();
        // SAFETY: created by rbd_image_options_create, destroyed once.
        unsafe { rbd_image_options_destroy(opts) };
        r
    }

    /// Removes image `name` from this handle's pool (it must not be open).
    pub fn remove_image(&self, name: &str) -> Result<(), CephError> {
        let name_c = cstring("rbd_remove", name)?;
        // SAFETY: valid pool context, NUL-terminated name; librbd removes the image's
        // objects synchronously.
        check("rbd_remove", unsafe {
            rbd_remove(self.ioctx, name_c.as_ptr())
        })
    }

    /// Sets the open image's size (`allow_shrink`: may make it smaller).
    pub fn resize(&self, size: u64, allow_shrink: bool) -> Result<(), CephError> {
        // SAFETY: open image; no progress callback.
        check("rbd_resize2", unsafe {
            rbd_resize2(self.image, size, allow_shrink, None, std::ptr::null_mut())
        })
    }

    fn conf_set(&self, option: &str, value: &str) -> Result<(), CephError> {
        let (o, v) = (
            cstring("rados_conf_set", option)?,
            cstring("rados_conf_set", value)?,
        );
        // SAFETY: valid cluster handle; both strings NUL-terminated and alive for the call.
        check("rados_conf_set", unsafe {
            rados_conf_set(self.cluster, o.as_ptr(), v.as_ptr())
        })
    }

    /// The client's value of configuration `option` (`rbd_cache` → `true`).
    pub fn conf_get(&self, option: &str) -> Result<String, CephError> {
        let o = cstring("rados_conf_get", option)?;
        let mut len = FIRST_CONF_BUF;
        loop {
            let mut buf = vec![0u8; len];
            // SAFETY: valid cluster handle; `o` is NUL-terminated; librados writes at
            // most `buf.len()` bytes into `buf` (NUL included) or fails with
            // ENAMETOOLONG.
            let rc = unsafe {
                rados_conf_get(self.cluster, o.as_ptr(), buf.as_mut_ptr().cast(), buf.len())
            };
            if rc == -libc::ENAMETOOLONG && len < MAX_CONF_VALUE {
                len *= 2;
                continue;
            }
            check("rados_conf_get", rc)?;
            let s = CStr::from_bytes_until_nul(&buf).map_err(|_| CephError {
                call: "rados_conf_get",
                errno: libc::EINVAL,
            })?;
            return Ok(s.to_string_lossy().into_owned());
        }
    }

    /// The image's current size in bytes (librbd refreshes the header first when a
    /// watch notification said it changed, e.g. after `rbd resize`).
    pub fn size(&self) -> Result<u64, CephError> {
        let mut size = 0u64;
        // SAFETY: open image, valid out-pointer.
        check("rbd_get_size", unsafe {
            rbd_get_size(self.image, &mut size)
        })?;
        Ok(size)
    }

    /// The image's stripe unit in bytes: with default striping its object size, the
    /// unit inside which a compare-and-write is one atomic OSD operation.
    pub fn stripe_unit(&self) -> Result<u64, CephError> {
        let mut unit = 0u64;
        // SAFETY: open image, valid out-pointer.
        check("rbd_get_stripe_unit", unsafe {
            rbd_get_stripe_unit(self.image, &mut unit)
        })?;
        Ok(unit)
    }

    /// Flushes the client's write-back cache, blocking.
    pub fn flush_blocking(&self) -> Result<(), CephError> {
        // SAFETY: open image; rbd_flush blocks until cached writes are on the OSDs.
        check("rbd_flush", unsafe { rbd_flush(self.image) })
    }
}

/// Checks `options` with librados (names known, values parse) on a handle that is
/// never connected, so no cluster is needed.
pub fn check_options(options: &[(&str, &str)]) -> Result<(), ClusterError> {
    Image::create(None)?.set_options(options)
}

impl Drop for Image {
    fn drop(&mut self) {
        // Nothing can be in flight: every InFlight holds an `Arc<Image>`.
        if !self.image.is_null() {
            // SAFETY: the image was opened by rbd_open and is closed exactly once.
            let rc = unsafe { rbd_close(self.image) };
            if rc < 0 {
                tracing::warn!(errno = -rc, "rbd_close failed");
            }
        }
        if !self.ioctx.is_null() {
            // SAFETY: created by rados_ioctx_create, destroyed once, its image closed.
            unsafe { rados_ioctx_destroy(self.ioctx) };
        }
        if self.owner.is_none() {
            // SAFETY: created by rados_create, shut down once, after its pool context;
            // no image shares it any more (each would hold an `Arc` to this Image).
            unsafe { rados_shutdown(self.cluster) };
        }
        // A shared handle: `owner` is dropped after this body, once this image and its
        // pool context are closed; the last reference shuts the handle down.
    }
}

/// What librbd's callback reports: which slot, and the completion it fired for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Done {
    slot: usize,
    /// The completion's address; only compared, never dereferenced.
    completion: usize,
}

impl Done {
    /// The channel slot the operation was submitted with.
    pub fn slot(&self) -> usize {
        self.slot
    }
}

/// The sending half of a channel's mailbox, shared with librbd's callbacks.
struct Notifier {
    tx: mpsc::Sender<Done>,
    efd: EventFd,
}

/// The argument librbd hands back to [`on_complete`]: boxed per operation.
struct CallbackArg {
    notifier: Arc<Notifier>,
    slot: usize,
}

/// librbd's completion callback (its own thread): hands the completion over and wakes
/// the poll group, nothing else.
extern "C" fn on_complete(c: rbd_completion_t, arg: *mut c_void) {
    // SAFETY: `arg` is the `Box<CallbackArg>` leaked in `submit` for this completion;
    // librbd calls the callback exactly once per completion, so the box is reclaimed once.
    let arg = unsafe { Box::from_raw(arg.cast::<CallbackArg>()) };
    // A closed receiver (channel dropped) is fine: the InFlight was leaked.
    let _ = arg.notifier.tx.send(Done {
        slot: arg.slot,
        completion: c as usize,
    });
    // Only EAGAIN (counter saturated) can fail, and then the eventfd is readable anyway.
    let _ = arg.notifier.efd.write(1);
}

/// A channel's completion mailbox (see the module docs).
pub struct Completions {
    notifier: Arc<Notifier>,
    rx: mpsc::Receiver<Done>,
}

impl Completions {
    pub fn new() -> std::io::Result<Completions> {
        let efd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        let (tx, rx) = mpsc::channel();
        Ok(Completions {
            notifier: Arc::new(Notifier { tx, efd }),
            rx,
        })
    }

    /// Readable when completions are waiting.
    pub fn event_fd(&self) -> RawFd {
        self.notifier.efd.as_raw_fd()
    }

    /// Appends every completion that arrived to `out`. Leaves the eventfd as it is
    /// (module docs: ordering).
    pub fn drain(&self, out: &mut Vec<Done>) {
        while let Ok(d) = self.rx.try_recv() {
            out.push(d);
        }
    }

    /// Makes the eventfd readable (a completion that did not go through librbd).
    pub fn signal(&self) {
        let _ = self.notifier.efd.write(1);
    }

    /// Blocks until the eventfd is readable or `timeout` passes, then clears it: the
    /// caller drains next, and a completion pushed after the clear makes it readable
    /// again (module docs: ordering).
    pub fn wait(&self, timeout: Duration) {
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.notifier.efd.as_fd(), PollFlags::POLLIN)];
        let _ = nix::poll::poll(&mut fds, PollTimeout::from(ms));
        // EAGAIN: the timeout passed with nothing signalled.
        let _ = self.notifier.efd.read();
    }
}

/// One librbd operation.
#[derive(Debug)]
pub enum Request {
    Read {
        offset: u64,
        buf: DmaSlice,
    },
    Write {
        offset: u64,
        buf: DmaSlice,
    },
    Discard {
        offset: u64,
        len: u64,
    },
    WriteZeroes {
        offset: u64,
        len: u64,
    },
    Flush,
    /// `rbd_aio_compare_and_write`: `buf` replaces `cmp` atomically (-EILSEQ: differs).
    CompareAndWrite {
        offset: u64,
        cmp: DmaSlice,
        buf: DmaSlice,
    },
}

/// A submitted operation (see the module docs).
pub struct InFlight {
    completion: rbd_completion_t,
    buf: Option<DmaSlice>,
    /// A compare-and-write's expected data, and where librbd writes the offset of
    /// the first difference: both must outlive the operation.
    cmp: Option<(DmaSlice, Box<u64>)>,
    image: Option<Arc<Image>>,
}

// SAFETY: the completion pointer is only passed back to librbd (get_return_value,
// release), which may be done from any thread; the rest is Send.
unsafe impl Send for InFlight {}

/// Submits `req` on `image`; its [`Done`] will arrive in `mailbox` carrying `slot`.
/// `Err(errno)` if librbd refused it up front (then nothing is in flight).
pub fn submit(
    image: &Arc<Image>,
    req: Request,
    mailbox: &Completions,
    slot: usize,
) -> Result<InFlight, i32> {
    // DmaSlice's fields are public: check the range here rather than trust it, since
    // librbd will read or write every byte of it.
    if let Request::Read { buf, .. } | Request::Write { buf, .. } = &req {
        if buf.buf.ptr_at(buf.offset, buf.len).is_none() {
            return Err(libc::EFAULT);
        }
    }
    if let Request::CompareAndWrite { cmp, buf, .. } = &req {
        let inside = |b: &DmaSlice| b.buf.ptr_at(b.offset, b.len).is_some();
        if !inside(cmp) || !inside(buf) || cmp.len != buf.len {
            return Err(libc::EFAULT);
        }
    }
    let arg = Box::into_raw(Box::new(CallbackArg {
        notifier: mailbox.notifier.clone(),
        slot,
    }));
    let mut c: rbd_completion_t = std::ptr::null_mut();
    // SAFETY: `arg` stays valid until the callback reclaims it (or we do below, if the
    // operation is never issued); `on_complete` matches rbd_callback_t; `c` is a valid
    // out-pointer.
    let rc = unsafe { rbd_aio_create_completion(arg.cast(), on_complete, &mut c) };
    if rc < 0 {
        // SAFETY: no completion exists, so no callback can reclaim `arg`: we do, once.
        drop(unsafe { Box::from_raw(arg) });
        return Err(-rc);
    }
    let img = image.image;
    // The data buffers below lie inside registered DmaBuffers (checked above); each is
    // kept alive in the InFlight until `finish`, which only succeeds after librbd's
    // callback, or leaked if never finished.
    let mut cmp_kept = None;
    let (rc, buf) = match req {
        Request::Read { offset, buf } => {
            // SAFETY: open image, fresh completion; `buf.ptr()..+buf.len` is writable
            // memory that outlives the operation (above).
            let rc = unsafe { rbd_aio_read(img, offset, buf.len, buf.ptr().cast(), c) };
            (rc, Some(buf))
        }
        Request::Write { offset, buf } => {
            // SAFETY: open image, fresh completion; `buf.ptr()..+buf.len` is readable
            // memory that outlives the operation (above).
            let rc = unsafe { rbd_aio_write(img, offset, buf.len, buf.ptr().cast(), c) };
            (rc, Some(buf))
        }
        Request::Discard { offset, len } => {
            // SAFETY: open image and fresh completion; no memory of ours is involved.
            let rc = unsafe { rbd_aio_discard(img, offset, len, c) };
            (rc, None)
        }
        Request::WriteZeroes { offset, len } => match usize::try_from(len) {
            Ok(len) => {
                // SAFETY: open image and fresh completion; no flags (thin zeroing).
                let rc = unsafe { rbd_aio_write_zeroes(img, offset, len, c, 0, 0) };
                (rc, None)
            }
            Err(_) => (-libc::EINVAL, None),
        },
        Request::Flush => {
            // SAFETY: open image and fresh completion.
            let rc = unsafe { rbd_aio_flush(img, c) };
            (rc, None)
        }
        Request::CompareAndWrite { offset, cmp, buf } => {
            let mut mismatch = Box::new(0u64);
            // SAFETY: open image, fresh completion; both buffers are readable memory of
            // `buf.len` bytes (checked above) and, with the mismatch offset librbd
            // writes, are kept in the InFlight until the callback ran.
            let rc = unsafe {
                rbd_aio_compare_and_write(
                    img,
                    offset,
                    buf.len,
                    cmp.ptr().cast(),
                    buf.ptr().cast(),
                    c,
                    &mut *mismatch,
                    0,
                )
            };
            cmp_kept = Some((cmp, mismatch));
            (c_int::try_from(rc).unwrap_or(-libc::EINVAL), Some(buf))
        }
    };
    if rc < 0 {
        // librbd refused the operation without starting it, so the callback will not
        // run: release the completion and reclaim `arg` here.
        // SAFETY: the completion is ours and not attached to any operation.
        unsafe { rbd_aio_release(c) };
        // SAFETY: reclaimed once; no callback will.
        drop(unsafe { Box::from_raw(arg) });
        return Err(-rc);
    }
    Ok(InFlight {
        completion: c,
        buf,
        cmp: cmp_kept,
        image: Some(image.clone()),
    })
}

impl InFlight {
    /// If `done` is this operation's callback report: its return value (bytes or
    /// -errno) and its buffer. Otherwise the operation back, untouched.
    pub fn finish(mut self, done: &Done) -> Result<(isize, Option<DmaSlice>), InFlight> {
        if done.completion != self.completion as usize {
            return Err(self);
        }
        // SAFETY: the callback for this completion ran (it produced `done`), so the
        // operation is over: reading its value and releasing our reference is allowed
        // from any thread; librbd keeps its own reference until its callback returns.
        let ret = unsafe { rbd_aio_get_return_value(self.completion) };
        // SAFETY: released once; `completion` is nulled so Drop does not leak it.
        unsafe { rbd_aio_release(self.completion) };
        self.completion = std::ptr::null_mut();
        self.image = None;
        self.cmp = None;
        Ok((ret, self.buf.take()))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.completion.is_null() {
            return;
        }
        // Unfinished: librbd may still use the buffer and the image. Leak both rather
        // than free memory it could write (and the completion with them).
        if let Some(b) = self.buf.take() {
            std::mem::forget(b);
        }
        if let Some(c) = self.cmp.take() {
            std::mem::forget(c);
        }
        if let Some(i) = self.image.take() {
            std::mem::forget(i);
        }
    }
}

#[cfg(test)]
#[path = "ffi_tests.rs"]
mod tests;
