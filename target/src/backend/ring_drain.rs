//! Waiting out an io_uring's operations before its buffers go, shared by the file
//! backend's channel and the passthru channel: both own buffers the kernel may still
//! write while an operation is in flight, so a channel dropped with operations in the
//! kernel first waits for their completions. If that wait fails, the caller leaks the
//! buffers instead of freeing memory the kernel could write.

use io_uring::{cqueue, squeue, IoUring};

/// Waits until none of the `in_kernel` operations of `ring` is left, reaping (and
/// discarding) their completions. Interrupted or busy waits are retried; any other
/// error is returned with `in_kernel` counting what is still out.
pub(crate) fn wait_in_flight<S: squeue::EntryMarker, C: cqueue::EntryMarker>(
    ring: &mut IoUring<S, C>,
    in_kernel: &mut usize,
) -> std::io::Result<()> {
    while *in_kernel > 0 {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
                ) => {}
            Err(e) => return Err(e),
        }
        let n = ring.completion().count();
        *in_kernel = in_kernel.saturating_sub(n);
    }
    Ok(())
}
