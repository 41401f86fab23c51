//! A channel for backends that finish I/O inside `submit` (RAM, null): completions are
//! queued and handed out by the next `poll`, so callers see the same asynchronous
//! interface as io_uring, with no system call and no allocation per I/O.

use std::os::fd::RawFd;

use super::{BackendError, CqeResult, IoChannel, IoCompletion, IoOp};

/// Completions a channel keeps room for before its first `poll`.
const INLINE_CAPACITY: usize = 256;

/// How an inline backend performs one operation.
pub(crate) trait InlineExec: Send {
    /// Capacity in bytes, for the range check every operation gets first.
    fn size_bytes(&self) -> u64;
    /// Performs `op` synchronously.
    fn execute(&self, op: &IoOp) -> Result<(), BackendError>;
}

pub(crate) struct InlineChannel<E: InlineExec> {
    exec: E,
    done: Vec<IoCompletion>,
}

impl<E: InlineExec> InlineChannel<E> {
    pub(crate) fn new(exec: E) -> Self {
        InlineChannel {
            exec,
            done: Vec::with_capacity(INLINE_CAPACITY),
        }
    }
}

impl<E: InlineExec> IoChannel for InlineChannel<E> {
    fn submit(&mut self, tag: u64, op: IoOp) -> Result<(), BackendError> {
        op.check_range(self.exec.size_bytes())?;
        self.exec.execute(&op)?;
        // Dropping `op` here releases the buffer: the I/O is over.
        self.done.push((tag, Ok(CqeResult::NONE)));
        Ok(())
    }

    fn flush(&mut self) {}

    fn poll(&mut self, out: &mut Vec<IoCompletion>) -> usize {
        let n = self.done.len();
        out.append(&mut self.done);
        n
    }

    fn in_flight(&self) -> usize {
        self.done.len()
    }

    fn event_fd(&self) -> Option<RawFd> {
        None
    }
}
