//! A fault-injecting wrapper around any backend, for tests of what the host sees when
//! storage misbehaves. A [`FaultControl`] shared with the test switches faults on and
//! off while I/O runs:
//!
//! - fail reads, writes or flushes with EIO (as the file backend reports an errno:
//!   [`BackendError::ReadIo`] / [`BackendError::WriteIo`]), optionally only after a
//!   number of operations have gone through;
//! - delay every operation (a slow device: the poll group's thread waits in submit);
//! - stall: operations submitted meanwhile are held, neither passed on nor completed,
//!   until the stall is lifted (a device that stops answering; the target's stuck
//!   command watch must show them);
//! - tear writes: only the first bytes of each write reach the inner backend and the
//!   write fails as a short transfer ([`BackendError::Short`]);
//! - a failed write is remembered like the kernel's writeback error (errseq): the next
//!   Flush fails too, once, so a Flush never reports success over a lost write.
//!
//! It also counts the operations that reached the inner backend, so tests can prove
//! that nothing did (data that failed its digest, I/O of a dead association).

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Backend, BackendError, BackendInfo, DmaSlice, IoChannel, IoCompletion, IoOp};

/// The errno injected failures carry.
const EIO: i32 = libc::EIO;

/// Faults to inject, shared between a test and every channel of the backend.
#[derive(Debug, Default)]
pub struct FaultControl {
    fail_reads: AtomicBool,
    fail_writes: AtomicBool,
    fail_flushes: AtomicBool,
    /// Operations still let through before the enabled failures start.
    pass_before_fail: AtomicU64,
    /// With `writes_limited`: write failures still to inject before writes pass again.
    write_failures_left: AtomicU64,
    writes_limited: AtomicBool,
    delay_us: AtomicU64,
    /// Hold operations instead of passing them on.
    stall: AtomicBool,
    /// 0: off; otherwise writes reach the backend cut to this many bytes and fail.
    tear_write_bytes: AtomicU64,
    /// A write failed and no Flush has reported it yet.
    write_error_pending: AtomicBool,
    reads_done: AtomicU64,
    writes_done: AtomicU64,
    fua_writes: AtomicU64,
    flushes_done: AtomicU64,
    failed: AtomicU64,
}

impl FaultControl {
    /// Fail reads with EIO (after [`FaultControl::pass`] operations).
    pub fn fail_reads(&self, on: bool) {
        self.fail_reads.store(on, Ordering::Release);
    }

    /// Fail writes, Write Zeroes and Deallocate with EIO.
    pub fn fail_writes(&self, on: bool) {
        self.writes_limited.store(false, Ordering::Release);
        self.fail_writes.store(on, Ordering::Release);
    }

    /// Fail the next `n` writes (Write Zeroes, Deallocate) with EIO, then pass them
    /// again: a transient device error, which a host retries.
    pub fn fail_writes_times(&self, n: u64) {
        self.write_failures_left.store(n, Ordering::Release);
        self.writes_limited.store(true, Ordering::Release);
        self.fail_writes.store(true, Ordering::Release);
    }

    /// Fail flushes with EIO.
    pub fn fail_flushes(&self, on: bool) {
        self.fail_flushes.store(on, Ordering::Release);
    }

    /// Let `n` more operations through before the enabled failures apply.
    pub fn pass(&self, n: u64) {
        self.pass_before_fail.store(n, Ordering::Release);
    }

    /// Delay every operation by `d` (zero: no delay).
    pub fn delay(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.delay_us.store(us, Ordering::Release);
    }

    /// Hold every operation submitted while on; lifting it passes them on.
    pub fn stall(&self, on: bool) {
        self.stall.store(on, Ordering::Release);
    }

    /// Tear writes after `bytes` bytes (0: off).
    pub fn tear_writes(&self, bytes: u64) {
        self.tear_write_bytes.store(bytes, Ordering::Release);
    }

    /// Switches every fault off (counters and a pending write error stay).
    pub fn clear(&self) {
        self.fail_reads(false);
        self.fail_writes(false);
        self.fail_flushes(false);
        self.pass(0);
        self.delay(Duration::ZERO);
        self.tear_writes(0);
        self.stall(false);
    }

    /// Reads that reached the inner backend.
    pub fn reads_done(&self) -> u64 {
        self.reads_done.load(Ordering::Acquire)
    }

    /// Writes (incl. Write Zeroes, Deallocate, torn writes) that reached the inner
    /// backend.
    pub fn writes_done(&self) -> u64 {
        self.writes_done.load(Ordering::Acquire)
    }

    /// Writes with FUA (write-through) that reached the inner backend.
    pub fn fua_writes(&self) -> u64 {
        self.fua_writes.load(Ordering::Acquire)
    }

    /// Flushes that reached the inner backend.
    pub fn flushes_done(&self) -> u64 {
        self.flushes_done.load(Ordering::Acquire)
    }

    /// Operations failed by injection.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Acquire)
    }

    /// Whether this write fails (consumes one of the `pass` budget, or of the
    /// failures left when they are limited).
    fn write_fails(&self) -> bool {
        if !self.fail_writes.load(Ordering::Acquire) || self.passes() {
            return false;
        }
        !self.writes_limited.load(Ordering::Acquire)
            || self
                .write_failures_left
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Whether this operation passes (consumes one of the `pass` budget).
    fn passes(&self) -> bool {
        self.pass_before_fail
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// A backend whose operations go through a [`FaultControl`].
pub struct FaultBackend {
    inner: Arc<dyn Backend>,
    ctl: Arc<FaultControl>,
}

impl FaultBackend {
    /// Wraps `inner`; returns the backend and its control.
    pub fn wrap(inner: Arc<dyn Backend>) -> (Arc<FaultBackend>, Arc<FaultControl>) {
        let ctl = Arc::new(FaultControl::default());
        (
            Arc::new(FaultBackend {
                inner,
                ctl: ctl.clone(),
            }),
            ctl,
        )
    }
}

impl Backend for FaultBackend {
    fn info(&self) -> &BackendInfo {
        self.inner.info()
    }

    fn compare_and_write_unit(&self) -> Option<u64> {
        self.inner.compare_and_write_unit()
    }

    fn open_channel(&self) -> Result<Box<dyn IoChannel>, BackendError> {
        Ok(Box::new(FaultChannel {
            inner: self.inner.open_channel()?,
            ctl: self.ctl.clone(),
            injected: Vec::new(),
            torn: Vec::new(),
            held: Vec::new(),
        }))
    }
}

struct FaultChannel {
    inner: Box<dyn IoChannel>,
    ctl: Arc<FaultControl>,
    /// Completions of failed-by-injection operations, handed out by the next poll.
    injected: Vec<IoCompletion>,
    /// Tags of torn writes in flight: (tag, bytes written, bytes wanted).
    torn: Vec<(u64, usize, usize)>,
    /// Operations held by a stall, in submission order.
    held: Vec<(u64, IoOp)>,
}

impl FaultChannel {
    fn inject(&mut self, tag: u64, e: BackendError) {
        self.ctl.failed.fetch_add(1, Ordering::AcqRel);
        if matches!(e, BackendError::WriteIo(_) | BackendError::Short { .. }) {
            self.ctl.write_error_pending.store(true, Ordering::Release);
        }
        self.injected.push((tag, Err(e)));
    }
}

impl IoChannel for FaultChannel {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        if self.ctl.stall.load(Ordering::Acquire) {
            self.held.push((tag, op));
            return Ok(());
        }
        self.pass_on(tag, op)
    }

    fn flush(&mut self) {
        self.inner.flush();
    }

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        if !self.held.is_empty() && !self.ctl.stall.load(Ordering::Acquire) {
            for (tag, op) in std::mem::take(&mut self.held) {
                if let Err(e) = self.pass_on(tag, op) {
                    self.injected.push((tag, Err(e)));
                }
            }
            self.inner.flush();
        }
        self.poll_inner(out)
    }

    fn in_flight(&self) -> usize {
        self.inner.in_flight() + self.injected.len() + self.held.len()
    }

    fn event_fd(&self) -> Option<RawFd> {
        self.inner.event_fd()
    }

    fn submit_compare_and_write(
        &mut self,
        tag: u64,
        op: crate::backend::CompareAndWrite,
    ) -> Result<(), BackendError> {
        if self.ctl.write_fails() {
            self.inject(tag, BackendError::WriteIo(EIO));
            return Ok(());
        }
        self.ctl.writes_done.fetch_add(1, Ordering::AcqRel);
        self.inner.submit_compare_and_write(tag, op)
    }
}

impl FaultChannel {
    fn pass_on(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        let c = self.ctl.clone();
        let us = c.delay_us.load(Ordering::Acquire);
        if us > 0 {
            std::thread::sleep(Duration::from_micros(us));
        }
        match op {
            IoOp::Read { .. } => {
                if c.fail_reads.load(Ordering::Acquire) && !c.passes() {
                    self.inject(tag, BackendError::ReadIo(EIO));
                    return Ok(());
                }
                c.reads_done.fetch_add(1, Ordering::AcqRel);
            }
            IoOp::Write { offset, buf, fua } => {
                if c.write_fails() {
                    self.inject(tag, BackendError::WriteIo(EIO));
                    return Ok(());
                }
                c.writes_done.fetch_add(1, Ordering::AcqRel);
                if fua {
                    c.fua_writes.fetch_add(1, Ordering::AcqRel);
                }
                let tear = c.tear_write_bytes.load(Ordering::Acquire);
                let want = buf.len;
                if tear > 0 && (tear as usize) < want {
                    let done = tear as usize;
                    let Some(cut) = DmaSlice::new(buf.buf.clone(), buf.offset, done) else {
                        self.inject(tag, BackendError::Short { done: 0, want });
                        return Ok(());
                    };
                    self.inner.submit(
                        tag,
                        IoOp::Write {
                            offset,
                            buf: cut,
                            fua,
                        },
                    )?;
                    self.torn.push((tag, done, want));
                    return Ok(());
                }
                return self.inner.submit(tag, IoOp::Write { offset, buf, fua });
            }
            IoOp::WriteZeroes { .. } | IoOp::Deallocate { .. } => {
                if c.write_fails() {
                    self.inject(tag, BackendError::WriteIo(EIO));
                    return Ok(());
                }
                c.writes_done.fetch_add(1, Ordering::AcqRel);
            }
            IoOp::Flush => {
                let fail = c.fail_flushes.load(Ordering::Acquire) && !c.passes();
                // A write error not yet reported fails this Flush (once), like fsync.
                if fail || c.write_error_pending.swap(false, Ordering::AcqRel) {
                    c.failed.fetch_add(1, Ordering::AcqRel);
                    self.injected.push((tag, Err(BackendError::WriteIo(EIO))));
                    return Ok(());
                }
                c.flushes_done.fetch_add(1, Ordering::AcqRel);
            }
        }
        self.inner.submit(tag, op)
    }

    fn poll_inner(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let start = out.len();
        self.inner.poll(out);
        if !self.torn.is_empty() {
            for (tag, res) in out.iter_mut().skip(start) {
                if let Some(i) = self.torn.iter().position(|t| t.0 == *tag) {
                    let (_, done, want) = self.torn.swap_remove(i);
                    *res = Err(BackendError::Short { done, want });
                    self.ctl.failed.fetch_add(1, Ordering::AcqRel);
                    self.ctl.write_error_pending.store(true, Ordering::Release);
                }
            }
        }
        out.append(&mut self.injected);
        out.len() - start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ram::RamBackend;
    use nvmf_verbs::DmaBuffer;

    fn ram() -> Arc<dyn Backend> {
        match RamBackend::new(1 << 20, 512) {
            Ok(b) => Arc::new(b),
            Err(e) => panic!("{e}"),
        }
    }

    fn run(ch: &mut dyn IoChannel, tag: u64, op: IoOp) -> Result<(), BackendError> {
        ch.submit(tag, op)?;
        ch.flush();
        let mut out = Vec::new();
        while out.is_empty() {
            ch.poll(&mut out);
        }
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0, tag);
        out.remove(0).1.map(|_| ())
    }

    fn slice(len: usize, fill: u8) -> DmaSlice {
        let b = Arc::new(DmaBuffer::new(len).unwrap());
        b.fill(0, len, fill);
        DmaSlice::new(b, 0, len).unwrap()
    }

    #[test]
    fn injected_errors_torn_writes_and_sticky_flush() {
        let (b, ctl) = FaultBackend::wrap(ram());
        let mut ch = b.open_channel().unwrap();
        let w = |fill| IoOp::Write {
            offset: 0,
            buf: slice(4096, fill),
            fua: false,
        };
        assert_eq!(run(ch.as_mut(), 1, w(1)), Ok(()));
        assert_eq!(run(ch.as_mut(), 2, IoOp::Flush), Ok(()));
        // EIO after one more write.
        ctl.fail_writes(true);
        ctl.pass(1);
        assert_eq!(run(ch.as_mut(), 3, w(2)), Ok(()));
        assert_eq!(run(ch.as_mut(), 4, w(3)), Err(BackendError::WriteIo(EIO)));
        // The next flush reports the lost write, once.
        assert_eq!(
            run(ch.as_mut(), 5, IoOp::Flush),
            Err(BackendError::WriteIo(EIO))
        );
        assert_eq!(run(ch.as_mut(), 6, IoOp::Flush), Ok(()));
        ctl.clear();
        // A torn write: 512 bytes of 4096 land.
        ctl.tear_writes(512);
        assert_eq!(
            run(ch.as_mut(), 7, w(4)),
            Err(BackendError::Short {
                done: 512,
                want: 4096
            })
        );
        ctl.clear();
        let back = slice(4096, 0);
        assert_eq!(
            run(
                ch.as_mut(),
                8,
                IoOp::Read {
                    offset: 0,
                    buf: back.clone()
                }
            ),
            Ok(())
        );
        let mut got = vec![0u8; 4096];
        assert!(back.buf.read_at(0, &mut got));
        assert!(got[..512].iter().all(|&x| x == 4));
        assert!(got[512..].iter().all(|&x| x == 2));
        ctl.fail_reads(true);
        assert_eq!(
            run(
                ch.as_mut(),
                9,
                IoOp::Read {
                    offset: 0,
                    buf: back
                }
            ),
            Err(BackendError::ReadIo(EIO))
        );
        assert_eq!(ctl.writes_done(), 3);
        assert_eq!(ctl.failed(), 4);
    }
}
