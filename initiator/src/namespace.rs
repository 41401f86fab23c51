//! I/O on one namespace over one queue.
//!
//! Owned by the host library. [`NsIo`] borrows a [`Queue`] and knows the namespace's
//! geometry and the controller's transfer limit. It offers two styles:
//! - non-blocking `submit_*` calls that validate host-side (LBA range, NLB, MDTS, buffer
//!   length) and submit one command with the caller's tag; the caller flushes and reaps
//!   completions with [`Queue::poll`] at any queue depth;
//! - blocking conveniences (`read`, `write`, `flush`, `write_zeroes`, `deallocate`,
//!   `compare`) that split large requests by MDTS (or NLB, or DSM's 256 ranges) and run
//!   the pieces one at a time through a bounce buffer.

use std::sync::Arc;
use std::time::Duration;

use nvmf_common::types::{Cid, Nsid};
use nvmf_common::wire::nvm::{self, opcode as nvm_op, DSM_MAX_RANGES, DSM_RANGE_LEN};
use nvmf_common::wire::sqe::Sqe;
use nvmf_common::wire::status::Status;

use crate::command::{self, SqeBytes, MAX_NLB};
use crate::controller::{Controller, NamespaceInfo};
use crate::error::{check_status, Error};
use crate::queue::Queue;
use crate::transport::{DataDir, Fabric, IoBuf};

/// Largest single transfer of the blocking helpers when the controller reports no
/// MDTS limit: keeps the bounce buffer reasonable.
pub const UNLIMITED_CHUNK: u64 = 1024 * 1024;

/// I/O on one namespace over one queue.
pub struct NsIo<'a> {
    q: &'a mut Queue,
    ns: NamespaceInfo,
    fabric: Arc<dyn Fabric>,
    /// Most blocks one data-moving command may carry (MDTS and NLB).
    max_blocks: u32,
    timeout: Duration,
}

impl<'a> NsIo<'a> {
    /// I/O on namespace `nsid` of `ctrl` through `q` (one of its I/O queues).
    pub fn new(ctrl: &Controller, q: &'a mut Queue, nsid: Nsid) -> Result<NsIo<'a>, Error> {
        let ns = ctrl.namespace(nsid)?.clone();
        Ok(NsIo::from_parts(
            q,
            ns,
            ctrl.fabric().clone(),
            ctrl.max_transfer(),
            ctrl.options().command_timeout,
        ))
    }

    /// The same from explicit parts (for callers that no longer hold the controller).
    pub fn from_parts(
        q: &'a mut Queue,
        ns: NamespaceInfo,
        fabric: Arc<dyn Fabric>,
        max_transfer: Option<u64>,
        timeout: Duration,
    ) -> NsIo<'a> {
        let max_blocks = max_blocks_per_command(max_transfer, ns.block_size);
        NsIo {
            q,
            ns,
            fabric,
            max_blocks,
            timeout,
        }
    }

    pub fn info(&self) -> &NamespaceInfo {
        &self.ns
    }

    pub fn queue(&mut self) -> &mut Queue {
        self.q
    }

    /// Most blocks one Read/Write/Compare may move (MDTS and the 16-bit NLB).
    pub fn max_blocks_per_command(&self) -> u32 {
        self.max_blocks
    }

    /// `Ok` when `nblocks` blocks at `lba` lie inside the namespace.
    pub fn check_range(&self, lba: u64, nblocks: u64) -> Result<(), Error> {
        match lba.checked_add(nblocks) {
            Some(end) if end <= self.ns.nsze => Ok(()),
            _ => Err(Error::InvalidArgument(format!(
                "blocks {lba}..+{nblocks} are outside namespace {} ({} blocks)",
                self.ns.nsid, self.ns.nsze
            ))),
        }
    }

    /// Bytes moved by `nblocks` blocks; checks the count against NLB and MDTS.
    fn data_len(&self, nblocks: u32) -> Result<usize, Error> {
        if nblocks == 0 || nblocks > self.max_blocks {
            return Err(Error::InvalidArgument(format!(
                "{nblocks} blocks in one command: the limit is {} (MDTS)",
                self.max_blocks
            )));
        }
        Ok(nblocks as usize * self.ns.block_size as usize)
    }

    /// Checks a data command and returns the exact-length slice of `buf` to send.
    fn data_for(&self, lba: u64, nblocks: u32, buf: &IoBuf) -> Result<IoBuf, Error> {
        self.check_range(lba, u64::from(nblocks))?;
        let len = self.data_len(nblocks)?;
        // The SGL must describe exactly the transfer length: a target rejects a
        // mismatch (Data SGL Length Invalid).
        buf.slice(0, len).ok_or_else(|| {
            Error::InvalidArgument(format!("buffer of {} bytes, command moves {len}", buf.len))
        })
    }

    // ---- non-blocking ----

    /// Submits a Read of `nblocks` at `lba` into `buf` (at least that long).
    pub fn submit_read(
        &mut self,
        tag: u64,
        lba: u64,
        nblocks: u32,
        buf: &IoBuf,
    ) -> Result<Cid, Error> {
        let data = self.data_for(lba, nblocks, buf)?;
        let sqe = command::read(self.ns.nsid, lba, nblocks, false)?;
        self.q.submit(sqe, Some(&data), DataDir::FromCtrl, tag)
    }

    /// Submits a Write of `nblocks` at `lba` from `buf`.
    pub fn submit_write(
        &mut self,
        tag: u64,
        lba: u64,
        nblocks: u32,
        buf: &IoBuf,
        fua: bool,
    ) -> Result<Cid, Error> {
        let data = self.data_for(lba, nblocks, buf)?;
        let sqe = command::write(self.ns.nsid, lba, nblocks, fua)?;
        self.q.submit(sqe, Some(&data), DataDir::ToCtrl, tag)
    }

    /// Submits a Compare of `nblocks` at `lba` with `buf`.
    pub fn submit_compare(
        &mut self,
        tag: u64,
        lba: u64,
        nblocks: u32,
        buf: &IoBuf,
    ) -> Result<Cid, Error> {
        let data = self.data_for(lba, nblocks, buf)?;
        let sqe = command::compare(self.ns.nsid, lba, nblocks)?;
        self.q.submit(sqe, Some(&data), DataDir::ToCtrl, tag)
    }

    /// Submits a Flush of this namespace.
    pub fn submit_flush(&mut self, tag: u64) -> Result<Cid, Error> {
        self.q
            .submit(command::flush(self.ns.nsid), None, DataDir::None, tag)
    }

    /// Submits a Write Zeroes of `nblocks` (1..=65536) at `lba`.
    pub fn submit_write_zeroes(
        &mut self,
        tag: u64,
        lba: u64,
        nblocks: u32,
        deac: bool,
    ) -> Result<Cid, Error> {
        self.check_range(lba, u64::from(nblocks))?;
        let sqe = command::write_zeroes(self.ns.nsid, lba, nblocks, deac)?;
        self.q.submit(sqe, None, DataDir::None, tag)
    }

    /// Submits a Dataset Management (deallocate) of up to 256 `(lba, nblocks)` ranges;
    /// the descriptors are written into `buf`, which must stay untouched until the
    /// command completes.
    pub fn submit_deallocate(
        &mut self,
        tag: u64,
        ranges: &[(u64, u32)],
        buf: &IoBuf,
    ) -> Result<Cid, Error> {
        for &(lba, n) in ranges {
            self.check_range(lba, u64::from(n))?;
        }
        let nr = u32::try_from(ranges.len()).unwrap_or(u32::MAX);
        let sqe = command::deallocate(self.ns.nsid, nr)?;
        let bytes = command::dsm_range_data(ranges);
        let data = buf
            .slice(0, bytes.len())
            .filter(|d| d.write_at(0, &bytes))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "buffer of {} bytes cannot hold {} ranges",
                    buf.len,
                    ranges.len()
                ))
            })?;
        self.q.submit(sqe, Some(&data), DataDir::ToCtrl, tag)
    }

    // ---- blocking ----

    /// Runs one command to completion and checks its status.
    fn run(&mut self, sqe: SqeBytes, data: Option<&IoBuf>, dir: DataDir) -> Result<(), Error> {
        let (opcode, slba) = {
            let s = Sqe::new_unchecked(&sqe[..]);
            (s.opcode(), nvm::rw_slba(&s))
        };
        let c = self.q.execute(sqe, data, dir, self.timeout)?;
        if c.status.is_success() {
            return Ok(());
        }
        let what = match opcode {
            nvm_op::READ | nvm_op::WRITE | nvm_op::COMPARE | nvm_op::WRITE_ZEROES => format!(
                "{} (nsid {}, lba {slba})",
                command::io_name(opcode),
                self.ns.nsid
            ),
            _ => format!("{} (nsid {})", command::io_name(opcode), self.ns.nsid),
        };
        check_status(&what, c.status)
    }

    /// Blocks per chunk for a `len`-byte request and a bounce buffer for it.
    fn bounce(&self, len: usize) -> Result<(u32, IoBuf), Error> {
        let bs = self.ns.block_size as usize;
        if len == 0 || !len.is_multiple_of(bs) {
            return Err(Error::InvalidArgument(format!(
                "{len} bytes is not a non-zero multiple of the {bs}-byte block size"
            )));
        }
        let total_blocks = len / bs;
        let per = (self.max_blocks as usize).min(total_blocks);
        let buf = self.fabric.alloc(per * bs)?;
        Ok((per as u32, buf))
    }

    /// Reads `buf.len()` bytes (whole blocks) starting at `lba`.
    pub fn read(&mut self, lba: u64, buf: &mut [u8]) -> Result<(), Error> {
        let bs = self.ns.block_size as usize;
        let (per, bounce) = self.bounce(buf.len())?;
        self.check_range(lba, (buf.len() / bs) as u64)?;
        let mut lba = lba;
        for chunk in buf.chunks_mut(per as usize * bs) {
            let n = (chunk.len() / bs) as u32;
            let data = self.data_for(lba, n, &bounce)?;
            let sqe = command::read(self.ns.nsid, lba, n, false)?;
            self.run(sqe, Some(&data), DataDir::FromCtrl)?;
            if !data.read_at(0, chunk) {
                return Err(Error::Protocol("read bounce buffer unreadable".into()));
            }
            lba += u64::from(n);
        }
        Ok(())
    }

    /// Writes `buf` (whole blocks) starting at `lba`.
    pub fn write(&mut self, lba: u64, buf: &[u8]) -> Result<(), Error> {
        self.write_like(lba, buf, false)
    }

    /// Compares the blocks at `lba` with `buf`; a mismatch is an
    /// [`Error::Status`] with Compare Failure.
    pub fn compare(&mut self, lba: u64, buf: &[u8]) -> Result<(), Error> {
        self.write_like(lba, buf, true)
    }

    fn write_like(&mut self, lba: u64, buf: &[u8], compare: bool) -> Result<(), Error> {
        let bs = self.ns.block_size as usize;
        let (per, bounce) = self.bounce(buf.len())?;
        self.check_range(lba, (buf.len() / bs) as u64)?;
        let mut lba = lba;
        for chunk in buf.chunks(per as usize * bs) {
            let n = (chunk.len() / bs) as u32;
            let data = self.data_for(lba, n, &bounce)?;
            if !data.write_at(0, chunk) {
                return Err(Error::Protocol("write bounce buffer unwritable".into()));
            }
            let sqe = if compare {
                command::compare(self.ns.nsid, lba, n)?
            } else {
                command::write(self.ns.nsid, lba, n, false)?
            };
            self.run(sqe, Some(&data), DataDir::ToCtrl)?;
            lba += u64::from(n);
        }
        Ok(())
    }

    /// Flushes the namespace's volatile write cache.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.run(command::flush(self.ns.nsid), None, DataDir::None)
    }

    /// Zeroes `nblocks` blocks at `lba` (split into 65536-block commands).
    pub fn write_zeroes(&mut self, lba: u64, nblocks: u64) -> Result<(), Error> {
        self.check_range(lba, nblocks)?;
        let mut done = 0u64;
        while done < nblocks {
            let n = (nblocks - done).min(u64::from(MAX_NLB)) as u32;
            let sqe = command::write_zeroes(self.ns.nsid, lba + done, n, false)?;
            self.run(sqe, None, DataDir::None)?;
            done += u64::from(n);
        }
        Ok(())
    }

    /// Fused Compare and Write: the blocks at `lba` become `new` only if they hold
    /// `expect` (same length, whole blocks, one command each), atomically against
    /// every other write. Returns both statuses as the target gave them (Compare
    /// Failure and Command Aborted due to Failed Fused Command on a mismatch).
    pub fn compare_and_write(
        &mut self,
        lba: u64,
        expect: &[u8],
        new: &[u8],
    ) -> Result<(Status, Status), Error> {
        let bs = self.ns.block_size as usize;
        if expect.len() != new.len() || expect.is_empty() || !expect.len().is_multiple_of(bs) {
            return Err(Error::InvalidArgument(format!(
                "compare and write takes two buffers of the same whole blocks ({} and {} bytes)",
                expect.len(),
                new.len()
            )));
        }
        let n = (expect.len() / bs) as u32;
        if n > self.max_blocks {
            return Err(Error::InvalidArgument(format!(
                "{n} blocks: one Compare and Write moves at most {}",
                self.max_blocks
            )));
        }
        let cmp = self.fabric.alloc(expect.len())?;
        let wr = self.fabric.alloc(new.len())?;
        let cmp = self.data_for(lba, n, &cmp)?;
        let wr = self.data_for(lba, n, &wr)?;
        if !cmp.write_at(0, expect) || !wr.write_at(0, new) {
            return Err(Error::Protocol(
                "compare and write buffers unwritable".into(),
            ));
        }
        let (first, second) = command::compare_and_write(self.ns.nsid, lba, n)?;
        let c = self.q.execute_all(
            &[
                (first, Some(&cmp), DataDir::ToCtrl),
                (second, Some(&wr), DataDir::ToCtrl),
            ],
            self.timeout,
        )?;
        match (c.first(), c.get(1)) {
            (Some(a), Some(b)) => Ok((a.status, b.status)),
            _ => Err(Error::Protocol("a fused pair lost a completion".into())),
        }
    }

    /// Verifies `nblocks` blocks at `lba` (split into 65536-block commands): the
    /// target reads them back; an unreadable block fails with the target's status.
    pub fn verify(&mut self, lba: u64, nblocks: u64) -> Result<(), Error> {
        self.check_range(lba, nblocks)?;
        let mut done = 0u64;
        while done < nblocks {
            let n = (nblocks - done).min(u64::from(MAX_NLB)) as u32;
            let sqe = command::verify(self.ns.nsid, lba + done, n)?;
            self.run(sqe, None, DataDir::None)?;
            done += u64::from(n);
        }
        Ok(())
    }

    /// Copies the `(lba, nblocks)` source ranges, one after another, to `dest` in one
    /// Copy command (the target checks them against its MSRC, MSSRL and MCL).
    pub fn copy(&mut self, dest: u64, ranges: &[(u64, u32)]) -> Result<(), Error> {
        let bytes = command::copy_range_data(ranges);
        let sqe = command::copy(self.ns.nsid, dest, ranges.len() as u32, false)?;
        let buf = self.fabric.alloc(bytes.len())?;
        let data = buf
            .slice(0, bytes.len())
            .filter(|d| d.write_at(0, &bytes))
            .ok_or_else(|| Error::Protocol("Copy buffer too small".into()))?;
        self.run(sqe, Some(&data), DataDir::ToCtrl)
    }

    /// Deallocates `(lba, nblocks)` ranges (256 per command).
    pub fn deallocate(&mut self, ranges: &[(u64, u32)]) -> Result<(), Error> {
        if ranges.is_empty() {
            return Ok(());
        }
        for &(lba, n) in ranges {
            self.check_range(lba, u64::from(n))?;
        }
        let per = DSM_MAX_RANGES as usize;
        let buf = self.fabric.alloc(per.min(ranges.len()) * DSM_RANGE_LEN)?;
        for group in ranges.chunks(per) {
            let bytes = command::dsm_range_data(group);
            let data = buf
                .slice(0, bytes.len())
                .filter(|d| d.write_at(0, &bytes))
                .ok_or_else(|| Error::Protocol("DSM buffer too small".into()))?;
            let sqe = command::deallocate(self.ns.nsid, group.len() as u32)?;
            self.run(sqe, Some(&data), DataDir::ToCtrl)?;
        }
        Ok(())
    }
}

/// Most blocks per data command for a transfer limit and block size: MDTS (or
/// [`UNLIMITED_CHUNK`] when there is none) and NLB, at least one block.
pub fn max_blocks_per_command(max_transfer: Option<u64>, block_size: u32) -> u32 {
    let limit = max_transfer.unwrap_or(UNLIMITED_CHUNK);
    let by_mdts = limit / u64::from(block_size.max(1));
    u32::try_from(by_mdts.min(u64::from(MAX_NLB)))
        .unwrap_or(MAX_NLB)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::ConnectOptions;
    use crate::testing::fake_target::{FakeTarget, FakeTargetConfig};
    use nvmf_common::types::Nqn;
    use nvmf_common::wire::status::{media, Sct};

    fn connect(cfg: FakeTargetConfig) -> (FakeTarget, Controller, Queue) {
        let t = FakeTarget::new(cfg);
        let mut o = ConnectOptions::new(
            Nqn::new(t.subnqn()).unwrap(),
            Nqn::new("nqn.host").unwrap(),
            [1; 16],
        );
        o.nr_io_queues = 1;
        o.kato_ms = 0;
        let mut c = Controller::connect(t.fabric(), o).unwrap();
        let q = c.take_io_queues().pop().unwrap();
        (t, c, q)
    }

    #[test]
    fn limits() {
        assert_eq!(max_blocks_per_command(Some(128 * 1024), 512), 256);
        assert_eq!(max_blocks_per_command(None, 4096), 256);
        assert_eq!(max_blocks_per_command(Some(u64::MAX), 512), MAX_NLB);
        assert_eq!(max_blocks_per_command(Some(100), 512), 1);
    }

    #[test]
    fn blocking_round_trip_split_by_mdts() {
        // MDTS 1 = 8 KiB = 16 blocks of 512: a 40-block write takes three commands.
        let (t, c, mut q) = connect(FakeTargetConfig {
            mdts: 1,
            ..Default::default()
        });
        let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap();
        assert_eq!(io.max_blocks_per_command(), 16);
        let data: Vec<u8> = (0..40 * 512).map(|i| (i % 253) as u8).collect();
        let before = t.ios();
        io.write(100, &data).unwrap();
        assert_eq!(t.ios() - before, 3);
        assert_eq!(t.ns_bytes(1, 100 * 512, data.len()), data);
        let mut back = vec![0u8; data.len()];
        io.read(100, &mut back).unwrap();
        assert_eq!(back, data);
        io.compare(100, &data).unwrap();
        let mut other = data.clone();
        other[5] ^= 1;
        let e = io.compare(100, &other).unwrap_err();
        assert!(e
            .status()
            .is_some_and(|s| s.is(Sct::MediaError, media::COMPARE_FAILURE)));
        io.write_zeroes(100, 8).unwrap();
        assert!(t.ns_bytes(1, 100 * 512, 8 * 512).iter().all(|&b| b == 0));
        io.deallocate(&[(108, 2), (120, 1)]).unwrap();
        assert!(t.log().iter().any(|s| s == "dsm 2"));
        io.flush().unwrap();
    }

    #[test]
    fn host_side_validation() {
        let (t, c, mut q) = connect(FakeTargetConfig::default());
        let mut io = NsIo::new(&c, &mut q, Nsid(3)).unwrap();
        let before = t.ios();
        // Namespace 3: 100 blocks of 4096.
        assert!(io.read(99, &mut vec![0u8; 2 * 4096]).is_err());
        assert!(io.read(0, &mut [0u8; 100]).is_err());
        assert!(io.write_zeroes(u64::MAX, 2).is_err());
        assert!(io.deallocate(&[(0, 101)]).is_err());
        let buf = c.alloc(4096).unwrap();
        assert!(io.submit_read(1, 0, 2, &buf).is_err(), "buffer too short");
        assert!(io.submit_read(1, 0, 0, &buf).is_err());
        assert!(io.submit_read(1, 100, 1, &buf).is_err());
        assert_eq!(t.ios(), before, "nothing reached the target");
        assert!(
            NsIo::new(&c, &mut q, Nsid(2)).is_err(),
            "inactive namespace"
        );
    }

    #[test]
    fn async_submit_and_poll() {
        let (_t, c, mut q) = connect(FakeTargetConfig::default());
        let bufs: Vec<IoBuf> = (0..4).map(|_| c.alloc(512).unwrap()).collect();
        let mut io = NsIo::new(&c, &mut q, Nsid(1)).unwrap();
        for (i, b) in bufs.iter().enumerate() {
            b.fill(i as u8 + 1);
            io.submit_write(i as u64, i as u64, 1, b, false).unwrap();
        }
        io.submit_flush(99).unwrap();
        let q = io.queue();
        q.flush().unwrap();
        let mut out = Vec::new();
        while out.len() < 5 {
            q.poll(&mut out).unwrap();
        }
        let mut tags: Vec<u64> = out.iter().map(|c| c.tag).collect();
        tags.sort_unstable();
        assert_eq!(tags, vec![0, 1, 2, 3, 99]);
        assert!(out.iter().all(|c| c.status.is_success()));
    }
}
