//! The I/O channel of a [`FileBackend`]: one io_uring per poll group with the file's
//! buffered and `O_DIRECT` descriptors registered, the operations in flight and their
//! resubmission (short transfers, retries, the fallback from `O_DIRECT` to the page
//! cache, the zeroing methods). The backend and its opening are in `file.rs`.

use std::collections::VecDeque;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use io_uring::{opcode, squeue, types, IoUring};
use nix::sys::eventfd::{EfdFlags, EventFd};

use super::{
    Shared, BUFFERED_IDX, DIRECT_IDX, MAX_IO, MAX_RETRIES, RING_ENTRIES, ZERO_CHUNK, ZERO_PUNCH,
    ZERO_RANGE, ZERO_WRITE,
};
use crate::backend::ring_drain::wait_in_flight;
use crate::backend::{BackendError, CqeResult, DmaSlice, IoChannel, IoCompletion, IoOp};

/// Counters of one channel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FileChannelStats {
    /// Read/write SQEs issued on the `O_DIRECT` descriptor.
    pub direct: u64,
    /// Read/write SQEs issued on the buffered descriptor.
    pub buffered: u64,
    /// SQEs issued again (short transfer, retry, fallback).
    pub resubmitted: u64,
}

/// A data transfer in progress.
struct Rw {
    offset: u64,
    buf: DmaSlice,
    write: bool,
    fua: bool,
    /// Bytes transferred so far.
    done: usize,
    /// May use the direct descriptor (cleared after it returned EINVAL).
    allow_direct: bool,
    /// The SQE in flight went to the direct descriptor.
    used_direct: bool,
    /// The SQE in flight carried RWF_DSYNC.
    used_dsync: bool,
    /// A FUA write had a part written without RWF_DSYNC: fdatasync at the end.
    need_sync: bool,
    /// The fdatasync of a FUA write is in flight.
    syncing: bool,
}

impl Rw {
    /// A transfer of `buf` at `offset` not started yet; its buffer must be mappable
    /// (a submission never carries an address the kernel would fault on).
    fn new(offset: u64, buf: DmaSlice, write: bool, fua: bool) -> Result<Rw, BackendError> {
        buf.buf
            .ptr_at(buf.offset, buf.len)
            .ok_or(BackendError::Io(libc::EFAULT))?;
        Ok(Rw {
            offset,
            buf,
            write,
            fua,
            done: 0,
            allow_direct: true,
            used_direct: false,
            used_dsync: false,
            need_sync: false,
            syncing: false,
        })
    }
}

/// Write Zeroes or Deallocate in progress.
struct Zero {
    offset: u64,
    len: u64,
    dealloc: bool,
    stage: u8,
    /// Bytes written so far (ZERO_WRITE).
    done: u64,
    allow_direct: bool,
    used_direct: bool,
}

enum Op {
    Rw(Rw),
    Flush,
    Zero(Zero),
    /// Completes with this result without doing anything (through a NOP, so that
    /// completions always arrive by the ring and its eventfd).
    Nop(Result<(), BackendError>),
}

struct Pending {
    tag: u64,
    op: Op,
    retries: u8,
}

enum Next {
    Done(Result<(), BackendError>),
    /// Issue the (updated) operation again.
    Again,
}

/// errno → the error the host sees. `write`: the operation modifies the namespace.
pub(super) fn map_errno(write: bool, errno: i32) -> BackendError {
    match errno {
        libc::ENOSPC | libc::EDQUOT => BackendError::NoSpace,
        libc::EOPNOTSUPP | libc::ENOSYS => BackendError::Unsupported,
        libc::EFAULT | libc::ENOMEM | libc::ENOBUFS | libc::EINVAL | libc::ECANCELED => {
            BackendError::Io(errno)
        }
        _ if write => BackendError::WriteIo(errno),
        _ => BackendError::ReadIo(errno),
    }
}

fn is_retryable(errno: i32) -> bool {
    errno == libc::EAGAIN || errno == libc::EINTR
}

fn refuses_method(errno: i32) -> bool {
    errno == libc::EOPNOTSUPP || errno == libc::ENOSYS || errno == libc::EINVAL
}

/// A per-thread io_uring channel of a [`FileBackend`].
pub struct FileChannel {
    shared: Arc<Shared>,
    ring: IoUring,
    eventfd: EventFd,
    slab: Vec<Option<Pending>>,
    free: Vec<usize>,
    /// Slab indices waiting for room in the SQ (or under the in-kernel limit).
    queued: VecDeque<usize>,
    /// SQEs pushed (submitted or not) whose CQE has not been reaped.
    in_kernel: usize,
    /// At most this many SQEs in the kernel, so the CQ can never overflow.
    kernel_cap: usize,
    /// Operations accepted and not yet handed out by `poll`.
    live: usize,
    cqes: Vec<(u64, i32)>,
    stats: FileChannelStats,
}

impl FileChannel {
    pub(super) fn new(shared: Arc<Shared>) -> Result<FileChannel, BackendError> {
        let errno = |e: std::io::Error| BackendError::Io(e.raw_os_error().unwrap_or(libc::EIO));
        let ring = IoUring::new(RING_ENTRIES).map_err(errno)?;
        let mut fds = vec![shared.buffered.as_raw_fd()];
        if let Some((f, _)) = &shared.direct {
            fds.push(f.as_raw_fd());
        }
        ring.submitter().register_files(&fds).map_err(errno)?;
        let eventfd =
            EventFd::from_value_and_flags(0, EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)
                .map_err(|e| BackendError::Io(e as i32))?;
        ring.submitter()
            .register_eventfd(eventfd.as_raw_fd())
            .map_err(errno)?;
        let kernel_cap = ring.params().cq_entries() as usize;
        let depth = RING_ENTRIES as usize;
        Ok(FileChannel {
            shared,
            ring,
            eventfd,
            slab: Vec::with_capacity(depth),
            free: Vec::with_capacity(depth),
            queued: VecDeque::with_capacity(depth),
            in_kernel: 0,
            kernel_cap,
            live: 0,
            cqes: Vec::with_capacity(kernel_cap),
            stats: FileChannelStats::default(),
        })
    }

    pub fn stats(&self) -> FileChannelStats {
        self.stats
    }

    fn alloc(&mut self, p: Pending) -> usize {
        self.live += 1;
        match self.free.pop() {
            Some(i) => {
                self.slab[i] = Some(p);
                i
            }
            None => {
                self.slab.push(Some(p));
                self.slab.len() - 1
            }
        }
    }

    /// The SQE for the next step of `p`, tagged with slab index `idx`.
    /// For data transfers, also whether the SQE uses the direct descriptor.
    fn build(shared: &Shared, p: &mut Pending, idx: usize) -> (squeue::Entry, Option<bool>) {
        let ud = idx as u64;
        let fixed = |direct: bool| types::Fixed(if direct { DIRECT_IDX } else { BUFFERED_IDX });
        let fdatasync = || {
            opcode::Fsync::new(fixed(false))
                .flags(types::FsyncFlags::DATASYNC)
                .build()
                .user_data(ud)
        };
        match &mut p.op {
            Op::Nop(_) => (opcode::Nop::new().build().user_data(ud), None),
            Op::Flush => (fdatasync(), None),
            Op::Rw(rw) if rw.syncing => (fdatasync(), None),
            Op::Rw(rw) => {
                let pos = rw.offset + rw.done as u64;
                let n = (rw.buf.len - rw.done).min(MAX_IO);
                // Validated at submit; a null pointer would only make the I/O fail.
                let addr = rw
                    .buf
                    .buf
                    .ptr_at(rw.buf.offset + rw.done, n)
                    .unwrap_or(std::ptr::null_mut());
                let direct = rw.allow_direct && shared.direct_ok(pos, addr, n);
                rw.used_direct = direct;
                let entry = if rw.write {
                    let dsync = rw.fua && shared.dsync_ok.load(Ordering::Relaxed);
                    rw.used_dsync = dsync;
                    if rw.fua && !dsync {
                        rw.need_sync = true;
                    }
                    opcode::Write::new(fixed(direct), addr, n as u32)
                        .offset(pos)
                        .rw_flags(if dsync { libc::RWF_DSYNC } else { 0 })
                        .build()
                        .user_data(ud)
                } else {
                    opcode::Read::new(fixed(direct), addr, n as u32)
                        .offset(pos)
                        .build()
                        .user_data(ud)
                };
                (entry, Some(direct))
            }
            Op::Zero(z) if z.stage == ZERO_RANGE || z.stage == ZERO_PUNCH => {
                let mode = if z.stage == ZERO_RANGE {
                    libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE
                } else {
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
                };
                let entry = opcode::Fallocate::new(fixed(false), z.len)
                    .offset(z.offset)
                    .mode(mode)
                    .build()
                    .user_data(ud);
                (entry, None)
            }
            Op::Zero(z) => {
                let pos = z.offset + z.done;
                let n = (z.len - z.done).min(ZERO_CHUNK as u64) as usize;
                let addr = shared
                    .zero_buf()
                    .and_then(|b| b.ptr_at(0, n))
                    .unwrap_or(std::ptr::null_mut());
                let direct = z.allow_direct && shared.direct_ok(pos, addr, n);
                z.used_direct = direct;
                let entry = opcode::Write::new(fixed(direct), addr, n as u32)
                    .offset(pos)
                    .build()
                    .user_data(ud);
                (entry, Some(direct))
            }
        }
    }

    /// Pushes queued operations into the SQ while there is room.
    fn push_queued(&mut self) {
        while let Some(&idx) = self.queued.front() {
            if self.in_kernel >= self.kernel_cap {
                break;
            }
            let Some(p) = self.slab.get_mut(idx).and_then(|s| s.as_mut()) else {
                self.queued.pop_front();
                continue;
            };
            let (entry, direct) = Self::build(&self.shared, p, idx);
            // SAFETY: every pointer in the entry stays valid until its CQE is reaped: data
            // buffers are `DmaSlice`s held by the slab entry, the zero buffer belongs to
            // `shared`, which this channel holds, and `Drop` waits for all in-kernel SQEs
            // before either is released. The fixed file indices are registered.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_err() {
                break; // SQ full: submit, then continue.
            }
            self.queued.pop_front();
            self.in_kernel += 1;
            match direct {
                Some(true) => self.stats.direct += 1,
                Some(false) => self.stats.buffered += 1,
                None => {}
            }
        }
    }

    /// Takes the completion `res` of slab entry `idx`; returns what to hand out, if the
    /// operation is over.
    fn on_cqe(&mut self, idx: usize, res: i32) -> Option<IoCompletion> {
        let mut p = self.slab.get_mut(idx)?.take()?;
        let next = Self::advance(&self.shared, &mut p, res);
        match next {
            Next::Again => {
                self.stats.resubmitted += 1;
                self.slab[idx] = Some(p);
                self.queued.push_back(idx);
                None
            }
            Next::Done(r) => {
                self.free.push(idx);
                self.live -= 1;
                Some((p.tag, r.map(|()| CqeResult::NONE)))
            }
        }
    }

    fn advance(shared: &Shared, p: &mut Pending, res: i32) -> Next {
        if res < 0 && is_retryable(-res) && !matches!(p.op, Op::Nop(_)) {
            p.retries += 1;
            if p.retries <= MAX_RETRIES {
                return Next::Again;
            }
        }
        match &mut p.op {
            Op::Nop(r) => Next::Done(r.clone()),
            Op::Flush => {
                if res < 0 {
                    Next::Done(Err(map_errno(true, -res)))
                } else {
                    Next::Done(Ok(()))
                }
            }
            Op::Rw(rw) => {
                if rw.syncing {
                    return if res < 0 {
                        Next::Done(Err(map_errno(true, -res)))
                    } else {
                        Next::Done(Ok(()))
                    };
                }
                if res < 0 {
                    let e = -res;
                    if e == libc::EINVAL && rw.used_direct {
                        rw.allow_direct = false;
                        shared.disable_direct();
                        return Next::Again;
                    }
                    if rw.used_dsync && (e == libc::EOPNOTSUPP || e == libc::EINVAL) {
                        shared.dsync_ok.store(false, Ordering::Relaxed);
                        return Next::Again;
                    }
                    return Next::Done(Err(map_errno(rw.write, e)));
                }
                if res == 0 {
                    // End of file inside the namespace: the file shrank under us.
                    return Next::Done(Err(if rw.write {
                        BackendError::Short {
                            done: rw.done,
                            want: rw.buf.len,
                        }
                    } else {
                        BackendError::ReadIo(libc::ENODATA)
                    }));
                }
                rw.done += res as usize;
                if rw.done < rw.buf.len {
                    return Next::Again;
                }
                if rw.need_sync {
                    rw.syncing = true;
                    return Next::Again;
                }
                Next::Done(Ok(()))
            }
            Op::Zero(z) => {
                if res >= 0 {
                    if z.stage != ZERO_WRITE {
                        return Next::Done(Ok(()));
                    }
                    if res == 0 {
                        return Next::Done(Err(BackendError::Short {
                            done: z.done as usize,
                            want: z.len as usize,
                        }));
                    }
                    z.done += res as u64;
                    return if z.done < z.len {
                        Next::Again
                    } else {
                        Next::Done(Ok(()))
                    };
                }
                let e = -res;
                // Only a definite "not supported" is remembered; EINVAL may be about
                // this range alone.
                let remember = e != libc::EINVAL;
                match z.stage {
                    ZERO_RANGE if refuses_method(e) => {
                        if remember {
                            let _ = shared.zero_mode.compare_exchange(
                                ZERO_RANGE,
                                ZERO_PUNCH,
                                Ordering::Relaxed,
                                Ordering::Relaxed,
                            );
                        }
                        z.stage = ZERO_PUNCH;
                        Next::Again
                    }
                    ZERO_PUNCH if refuses_method(e) => {
                        if z.dealloc && shared.is_block_device {
                            if remember {
                                shared.dealloc_noop.store(true, Ordering::Relaxed);
                            }
                            return Next::Done(Ok(()));
                        }
                        if remember {
                            let mode = if z.dealloc {
                                &shared.dealloc_mode
                            } else {
                                &shared.zero_mode
                            };
                            mode.store(ZERO_WRITE, Ordering::Relaxed);
                        }
                        z.stage = ZERO_WRITE;
                        Next::Again
                    }
                    ZERO_WRITE if e == libc::EINVAL && z.used_direct => {
                        z.allow_direct = false;
                        shared.disable_direct();
                        Next::Again
                    }
                    _ => Next::Done(Err(map_errno(true, e))),
                }
            }
        }
    }

    /// Reaps every available CQE, handing finished operations to `out`.
    fn reap(&mut self, out: &mut Vec<IoCompletion>) {
        if self.ring.completion().is_empty() {
            return;
        }
        // Clear the eventfd before reaping, so a CQE posted after this point signals it
        // again. EAGAIN (already clear) is fine.
        let _ = self.eventfd.read();
        self.cqes.clear();
        for cqe in self.ring.completion() {
            self.cqes.push((cqe.user_data(), cqe.result()));
        }
        self.in_kernel = self.in_kernel.saturating_sub(self.cqes.len());
        for i in 0..self.cqes.len() {
            let (ud, res) = self.cqes[i];
            if let Some(c) = self.on_cqe(ud as usize, res) {
                out.push(c);
            }
        }
    }
}

impl IoChannel for FileChannel {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        op.check_range(self.shared.size_bytes)?;
        let op = match op {
            IoOp::Read { buf, .. } | IoOp::Write { buf, .. } if buf.len == 0 => Op::Nop(Ok(())),
            IoOp::Read { offset, buf } => Op::Rw(Rw::new(offset, buf, false, false)?),
            IoOp::Write { offset, buf, fua } => Op::Rw(Rw::new(offset, buf, true, fua)?),
            IoOp::Flush => Op::Flush,
            IoOp::WriteZeroes { len: 0, .. } | IoOp::Deallocate { len: 0, .. } => Op::Nop(Ok(())),
            IoOp::WriteZeroes { offset, len } => Op::Zero(Zero {
                offset,
                len,
                dealloc: false,
                stage: self.shared.zero_mode.load(Ordering::Relaxed),
                done: 0,
                allow_direct: true,
                used_direct: false,
            }),
            IoOp::Deallocate { offset, len } => {
                if self.shared.dealloc_noop.load(Ordering::Relaxed) {
                    Op::Nop(Ok(()))
                } else {
                    Op::Zero(Zero {
                        offset,
                        len,
                        dealloc: true,
                        stage: self.shared.dealloc_mode.load(Ordering::Relaxed),
                        done: 0,
                        allow_direct: true,
                        used_direct: false,
                    })
                }
            }
        };
        let idx = self.alloc(Pending {
            tag,
            op,
            retries: 0,
        });
        self.queued.push_back(idx);
        self.push_queued();
        Ok(())
    }

    fn flush(&mut self) {
        loop {
            self.push_queued();
            if self.ring.submission().is_empty() {
                break;
            }
            match self.ring.submit() {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => {
                    // EAGAIN/EBUSY: transient; the entries stay queued for the next call.
                    if !matches!(e.raw_os_error(), Some(libc::EAGAIN) | Some(libc::EBUSY)) {
                        tracing::error!(path = %self.shared.path.display(), error = %e, "io_uring submit failed");
                    }
                    break;
                }
            }
            if self.queued.is_empty() || self.in_kernel >= self.kernel_cap {
                break;
            }
        }
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let before = out.len();
        self.reap(out);
        // Resubmissions and operations that waited for room go out now.
        if !self.queued.is_empty() {
            self.flush();
        }
        out.len() - before
    }

    fn in_flight(&self) -> usize {
        self.live
    }

    fn event_fd(&self) -> Option<RawFd> {
        Some(self.eventfd.as_raw_fd())
    }
}

impl Drop for FileChannel {
    fn drop(&mut self) {
        // Never pushed: the kernel has not seen these.
        self.queued.clear();
        if let Err(e) = wait_in_flight(&mut self.ring, &mut self.in_kernel) {
            // The kernel may still use the buffers: leak them rather than free memory
            // it could write.
            tracing::error!(path = %self.shared.path.display(), error = %e, in_flight = self.in_kernel, "cannot wait for in-flight I/O; leaking its buffers");
            std::mem::forget(std::mem::take(&mut self.slab));
            std::mem::forget(self.shared.clone());
        }
    }
}
