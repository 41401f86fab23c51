//! Work-request chains for `ibv_post_send`, `ibv_post_recv` and `ibv_post_srq_recv`:
//! the per-queue scratch they are built in (reused, so posting does not allocate),
//! the receive chain both a QP and an SRQ post, and the error a failed post maps to.
//! Below the QP and the SRQ, which both post through it.

use rdma_sys::{ibv_recv_wr, ibv_send_wr, ibv_sge};

use crate::{RecvWr, VerbsError};

/// Scratch for building work-request chains (raw pointers into itself while posting).
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) send: Vec<ibv_send_wr>,
    pub(super) recv: Vec<ibv_recv_wr>,
    pub(super) sges: Vec<ibv_sge>,
}

// SAFETY: the vectors hold raw pointers only into themselves, valid only during one
// post call made under the mutex that guards them.
unsafe impl Send for Scratch {}

/// The error for a failed `ibv_post_*` return code.
pub(super) fn post_error(rc: i32, queue: &'static str) -> VerbsError {
    match rc {
        libc::ENOMEM => VerbsError::QueueFull(queue),
        libc::EINVAL => VerbsError::InvalidArgument("work request refused by the device"),
        other => VerbsError::Provider(format!(
            "post to {queue}: {}",
            std::io::Error::from_raw_os_error(other)
        )),
    }
}

/// Builds `wrs` into an `ibv_recv_wr` chain in `s` and hands its head to `post`
/// (`ibv_post_recv` or `ibv_post_srq_recv`), with one doorbell.
pub(super) fn post_recv_chain(
    s: &mut Scratch,
    wrs: &[RecvWr<'_>],
    queue: &'static str,
    post: impl FnOnce(*mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> i32,
) -> Result<(), VerbsError> {
    if wrs.is_empty() {
        return Ok(());
    }
    s.sges.clear();
    s.recv.clear();
    for wr in wrs {
        s.sges.extend(wr.sg_list.iter().map(|g| ibv_sge {
            addr: g.addr,
            length: g.length,
            lkey: g.lkey,
        }));
    }
    let mut first_sge = 0usize;
    for wr in wrs {
        let n = wr.sg_list.len();
        let num_sge = i32::try_from(n).map_err(|_| VerbsError::InvalidArgument("too many SGEs"))?;
        s.recv.push(ibv_recv_wr {
            wr_id: wr.wr_id,
            next: std::ptr::null_mut(),
            sg_list: if n == 0 {
                std::ptr::null_mut()
            } else {
                // In bounds: `first_sge + n <= s.sges.len()` by construction.
                s.sges[first_sge..].as_mut_ptr()
            },
            num_sge,
        });
        first_sge += n;
    }
    let base = s.recv.as_mut_ptr();
    let count = s.recv.len();
    for i in 0..count.saturating_sub(1) {
        // SAFETY: `i + 1 < count`: both elements exist and the vector no longer grows.
        unsafe { (*base.add(i)).next = base.add(i + 1) };
    }
    let mut bad: *mut ibv_recv_wr = std::ptr::null_mut();
    let rc = post(base, &mut bad);
    s.recv.clear();
    s.sges.clear();
    if rc != 0 {
        return Err(post_error(rc, queue));
    }
    Ok(())
}
