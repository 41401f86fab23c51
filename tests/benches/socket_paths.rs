//! Socket paths for NVMe/TCP-sized messages on loopback TCP: plain `writev` and `read`
//! (what the target and host use) against io_uring (Writev, SendMsg, SendZc, SendMsgZc,
//! Recv, multishot Recv with a provided buffer ring) and `sendmsg` with MSG_ZEROCOPY.
//!
//!     cargo bench -p nvmf-tests --bench socket_paths
//!     BENCH_SECS=1 BENCH_REPS=5 cargo bench -p nvmf-tests --bench socket_paths
//!
//! A sender thread pinned to CPU 0 and a receiver thread pinned to CPU 1 share one
//! 127.0.0.1 TCP connection (TCP_NODELAY, default socket buffers). A message is a
//! 24-byte header (a C2HData header's size) and a payload of 128 KiB or 4 KiB, sent as
//! two iovecs. The sender keeps up to 16 messages queued (QD 16); one send operation at
//! a time covers every queued byte (up to 32 iovecs, as SPDK's uring socket batches a
//! socket's requests into one `sendmsg`), except `SendZc`, which takes one contiguous
//! buffer and so sends one message (header and payload are adjacent) per operation. A
//! message's buffer is refilled once its bytes were sent and, for the zero-copy paths,
//! once the kernel's notification says it no longer uses the pages.
//!
//! The receiver places each payload into one of 16 destination buffers (a command's
//! buffer): through a 256 KiB receive buffer and a copy, or with the header read into a
//! 256-byte buffer (as the host does after large data) and the rest of the payload read
//! straight into the destination, or by io_uring Recv the same way (the payload part
//! with MSG_WAITALL: one completion per payload), or by a multishot Recv into a ring of
//! 32 provided 64 KiB buffers and a copy. The plain paths use non-blocking sockets and
//! `poll` when a call would block (as an interrupt-driven poll loop does); the io_uring
//! paths use blocking sockets (io_uring arms its own poll) and one `io_uring_enter`
//! that submits and waits per pass, on a SINGLE_ISSUER | DEFER_TASKRUN ring when the
//! kernel has it.
//!
//! Every message carries its sequence number in the header's first 8 bytes and at three
//! places in the payload; the receiver checks them all, the header's length and magic,
//! and that nothing follows the last message, so a broken path fails rather than looks
//! fast (BENCH_VERIFY=1 also checks every payload byte; slow, for smoke runs).
//!
//! Every run moves the same number of messages per size (calibrated so the baseline
//! takes BENCH_SECS, default 2, or BENCH_BYTES of payload); BENCH_REPS (5) runs of each
//! configuration alternate round robin. Printed per configuration: payload GB/s, CPU
//! seconds (user + system, getrusage(RUSAGE_THREAD) in each thread) per GB of payload
//! for each thread, and system calls (or io_uring_enter calls) per message, as the
//! median with min–max over the runs. On loopback there is no NIC: the TCP receive
//! processing runs in softirq on the CPU that transmits (or in the receiver, from the
//! socket backlog, when it holds the socket), so it lands in the two threads' times.
//! BENCH_ONLY=<text> runs only the configurations whose name contains it.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::resource::{getrusage, UsageWho};
use nix::unistd::Pid;

/// Header bytes per message (a C2HData PDU header).
const HDR: usize = 24;
/// Messages the sender keeps queued or in flight.
const QD: usize = 16;
/// Receive buffer of the copying receiver.
const RX_BUF: usize = 256 * 1024;
/// Read size for a header when the payload is then read in place (the host's SMALL_RX).
const SMALL_RX: usize = 256;
/// Provided buffers of the multishot receiver (a power of two).
const RING_BUFS: u16 = 32;
const RING_BUF_SIZE: usize = 64 * 1024;
const BGID: u16 = 7;
/// A run that makes no progress for this long fails.
const STALL_SECS: u64 = 10;
/// Bytes 12..24 of every header.
const MAGIC: u8 = 0xA5;
/// Sender and receiver CPUs.
const TX_CPU: usize = 0;
const RX_CPU: usize = 1;

// Not in the libc crate: <asm-generic/socket.h>, <linux/errqueue.h>, <linux/io_uring.h>.
const SO_ZEROCOPY: libc::c_int = 60;
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;
const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum SendPath {
    Writev,
    MsgZerocopy,
    UringWritev,
    UringSendMsg,
    UringSendZc,
    UringSendMsgZc,
}

impl SendPath {
    fn name(self) -> &'static str {
        match self {
            Self::Writev => "writev",
            Self::MsgZerocopy => "sendmsg MSG_ZEROCOPY",
            Self::UringWritev => "io_uring Writev",
            Self::UringSendMsg => "io_uring SendMsg",
            Self::UringSendZc => "io_uring SendZc (1 msg/op)",
            Self::UringSendMsgZc => "io_uring SendMsgZc",
        }
    }

    /// The io_uring operation it needs, if any.
    fn opcode(self) -> Option<u8> {
        match self {
            Self::Writev | Self::MsgZerocopy => None,
            Self::UringWritev => Some(opcode::Writev::CODE),
            Self::UringSendMsg => Some(opcode::SendMsg::CODE),
            Self::UringSendZc => Some(opcode::SendZc::CODE),
            Self::UringSendMsgZc => Some(opcode::SendMsgZc::CODE),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum RecvPath {
    ReadCopy,
    ReadDirect,
    UringRecv,
    UringMulti,
}

impl RecvPath {
    fn name(self) -> &'static str {
        match self {
            Self::ReadCopy => "read 256 KiB + copy",
            Self::ReadDirect => "read into dst",
            Self::UringRecv => "io_uring Recv into dst",
            Self::UringMulti => "io_uring RecvMulti + buf ring + copy",
        }
    }

    fn opcode(self) -> Option<u8> {
        match self {
            Self::ReadCopy | Self::ReadDirect => None,
            Self::UringRecv => Some(opcode::Recv::CODE),
            Self::UringMulti => Some(opcode::RecvMulti::CODE),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Combo {
    send: SendPath,
    recv: RecvPath,
}

impl Combo {
    fn name(self) -> String {
        format!("{} / {}", self.send.name(), self.recv.name())
    }
}

/// What one thread spent.
#[derive(Clone, Copy, Default, Debug)]
struct Side {
    /// User + system CPU seconds.
    cpu: f64,
    /// System calls (io_uring_enter counts one).
    calls: u64,
}

#[derive(Clone, Copy, Debug)]
struct RunResult {
    secs: f64,
    tx: Side,
    rx: Side,
    zc_notifs: u64,
    zc_copied: u64,
}

// ---------------------------------------------------------------- messages

/// Payload byte `j` of the buffer in slot `slot` (a period of 251 so a misplaced byte
/// shows).
fn pattern(slot: usize, j: usize) -> u8 {
    ((slot * 131 + j * 7) % 251) as u8
}

/// Payload offsets carrying the sequence number.
fn stamp_offsets(p: usize) -> [usize; 3] {
    [0, (p / 2) & !7, p - 8]
}

fn slot_of(seq: u64) -> usize {
    (seq % QD as u64) as usize
}

/// The sender's QD message buffers (header and payload adjacent) and its position.
struct Tx {
    slots: Vec<Vec<u8>>,
    p: usize,
    total: u64,
    /// Next sequence number to put into a slot.
    next_fill: u64,
    /// The first byte not yet sent: message `send_seq`, offset `send_off`.
    send_seq: u64,
    send_off: usize,
    /// Zero-copy sends not yet notified that cover each slot.
    zc_refs: [u32; QD],
}

impl Tx {
    fn new(p: usize, total: u64) -> Tx {
        let slots = (0..QD)
            .map(|s| {
                let mut v = vec![0u8; HDR + p];
                v[8..12].copy_from_slice(&(p as u32).to_le_bytes());
                v[12..HDR].fill(MAGIC);
                for (j, b) in v[HDR..].iter_mut().enumerate() {
                    *b = pattern(s, j);
                }
                v
            })
            .collect();
        Tx {
            slots,
            p,
            total,
            next_fill: 0,
            send_seq: 0,
            send_off: 0,
            zc_refs: [0; QD],
        }
    }

    fn msg_len(&self) -> usize {
        HDR + self.p
    }

    /// Puts new messages into the slots that are free: sent, and not used by a
    /// zero-copy send any more.
    fn refill(&mut self) {
        while self.next_fill < self.total && self.next_fill < self.send_seq + QD as u64 {
            let s = slot_of(self.next_fill);
            if self.zc_refs[s] != 0 {
                break;
            }
            let seq = self.next_fill.to_le_bytes();
            let buf = &mut self.slots[s];
            buf[..8].copy_from_slice(&seq);
            for o in stamp_offsets(self.p) {
                buf[HDR + o..HDR + o + 8].copy_from_slice(&seq);
            }
            self.next_fill += 1;
        }
    }

    fn pending(&self) -> bool {
        self.send_seq < self.next_fill
    }

    fn finished(&self) -> bool {
        self.send_seq == self.total
    }

    /// Two iovecs (header, payload) per queued message, from the first unsent byte, for
    /// at most `max_msgs` messages.
    fn iovecs(&self, out: &mut Vec<libc::iovec>, max_msgs: usize) {
        out.clear();
        let mut seq = self.send_seq;
        let mut off = self.send_off;
        while seq < self.next_fill && out.len() < 2 * max_msgs {
            let base = self.slots[slot_of(seq)].as_ptr();
            if off < HDR {
                out.push(libc::iovec {
                    // SAFETY: off < HDR, inside the slot's allocation.
                    iov_base: unsafe { base.add(off) } as *mut libc::c_void,
                    iov_len: HDR - off,
                });
                off = HDR;
            }
            out.push(libc::iovec {
                // SAFETY: HDR <= off < HDR + p, inside the slot's allocation.
                iov_base: unsafe { base.add(off) } as *mut libc::c_void,
                iov_len: self.msg_len() - off,
            });
            seq += 1;
            off = 0;
        }
    }

    /// The rest of the current message as one contiguous buffer.
    fn contiguous(&self) -> (*const u8, usize) {
        let base = self.slots[slot_of(self.send_seq)].as_ptr();
        // SAFETY: send_off < HDR + p, inside the slot's allocation.
        (
            unsafe { base.add(self.send_off) },
            self.msg_len() - self.send_off,
        )
    }

    /// Marks `n` more bytes sent. Returns the first and last message they touched.
    fn advance(&mut self, mut n: usize) -> Result<(u64, u64), String> {
        let first = self.send_seq;
        while n > 0 {
            if self.send_seq >= self.next_fill {
                return Err(format!(
                    "the kernel reports {n} bytes more sent than queued"
                ));
            }
            let rest = self.msg_len() - self.send_off;
            if n >= rest {
                n -= rest;
                self.send_seq += 1;
                self.send_off = 0;
            } else {
                self.send_off += n;
                n = 0;
            }
        }
        let last = if self.send_off > 0 {
            self.send_seq
        } else {
            self.send_seq - 1
        };
        Ok((first, last))
    }
}

/// Zero-copy sends whose notification has not arrived: id -> messages covered.
#[derive(Default)]
struct ZcTrack {
    ops: HashMap<u32, Option<(u64, u64)>>,
    next_id: u32,
    notifs: u64,
    copied: u64,
}

impl ZcTrack {
    fn sent(&mut self, id: u32, range: Option<(u64, u64)>, tx: &mut Tx) {
        if let Some((a, b)) = range {
            for s in a..=b {
                tx.zc_refs[slot_of(s)] += 1;
            }
        }
        self.ops.insert(id, range);
    }

    fn release(&mut self, id: u32, copied: bool, tx: &mut Tx) -> Result<(), String> {
        let range = self
            .ops
            .remove(&id)
            .ok_or_else(|| format!("zero-copy notification for unknown send {id}"))?;
        if let Some((a, b)) = range {
            for s in a..=b {
                tx.zc_refs[slot_of(s)] -= 1;
            }
        }
        self.notifs += 1;
        self.copied += u64::from(copied);
        Ok(())
    }
}

/// The receiver: the message being received and the destination buffers.
struct Rx {
    p: usize,
    total: u64,
    seq: u64,
    hdr: [u8; HDR],
    hdr_got: usize,
    data_got: usize,
    dst: Vec<Vec<u8>>,
    full: bool,
}

impl Rx {
    fn new(p: usize, total: u64, full: bool) -> Rx {
        Rx {
            p,
            total,
            seq: 0,
            hdr: [0; HDR],
            hdr_got: 0,
            data_got: 0,
            // Written, so the pages are there before the clock starts.
            dst: (0..QD).map(|_| vec![0xEEu8; p]).collect(),
            full,
        }
    }

    fn done(&self) -> bool {
        self.seq == self.total
    }

    /// Bytes from a receive buffer: header bytes to the header, payload bytes copied
    /// into the destination.
    fn feed(&mut self, mut b: &[u8]) -> Result<(), String> {
        while !b.is_empty() {
            if self.done() {
                return Err(format!("{} bytes after the last message", b.len()));
            }
            if self.hdr_got < HDR {
                let n = (HDR - self.hdr_got).min(b.len());
                self.hdr[self.hdr_got..self.hdr_got + n].copy_from_slice(&b[..n]);
                self.hdr_got += n;
                b = &b[n..];
                if self.hdr_got == HDR {
                    self.check_hdr()?;
                }
                continue;
            }
            let n = (self.p - self.data_got).min(b.len());
            let s = slot_of(self.seq);
            self.dst[s][self.data_got..self.data_got + n].copy_from_slice(&b[..n]);
            b = &b[n..];
            self.placed(n)?;
        }
        Ok(())
    }

    /// The rest of the current payload's destination, once its header is in.
    fn direct_dst(&mut self) -> Option<&mut [u8]> {
        if self.done() || self.hdr_got < HDR {
            return None;
        }
        let s = slot_of(self.seq);
        Some(&mut self.dst[s][self.data_got..])
    }

    /// `n` payload bytes were placed in the destination.
    fn placed(&mut self, n: usize) -> Result<(), String> {
        self.data_got += n;
        if self.data_got == self.p {
            self.finish()?;
        }
        Ok(())
    }

    fn check_hdr(&self) -> Result<(), String> {
        let seq = u64::from_le_bytes(self.hdr[..8].try_into().unwrap_or_default());
        let len = u32::from_le_bytes(self.hdr[8..12].try_into().unwrap_or_default());
        if seq != self.seq || len as usize != self.p || self.hdr[12..].iter().any(|&b| b != MAGIC) {
            return Err(format!(
                "message {}: bad header (sequence {seq}, length {len})",
                self.seq
            ));
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), String> {
        let s = slot_of(self.seq);
        let seq = self.seq.to_le_bytes();
        let offs = stamp_offsets(self.p);
        let d = &mut self.dst[s];
        for o in offs {
            if d[o..o + 8] != seq {
                return Err(format!(
                    "message {}: payload offset {o} holds another sequence number",
                    self.seq
                ));
            }
        }
        if self.full {
            let stamp = |j: usize| offs.iter().any(|&o| (o..o + 8).contains(&j));
            if let Some(j) = (0..self.p).find(|&j| !stamp(j) && d[j] != pattern(s, j)) {
                return Err(format!("message {}: payload byte {j} is wrong", self.seq));
            }
            // A later message that leaves this buffer alone must not pass.
            d.fill(0);
        }
        self.seq += 1;
        self.hdr_got = 0;
        self.data_got = 0;
        Ok(())
    }
}

// ---------------------------------------------------------------- system calls

fn thread_cpu() -> f64 {
    match getrusage(UsageWho::RUSAGE_THREAD) {
        Ok(u) => {
            let t = |v: nix::sys::time::TimeVal| v.tv_sec() as f64 + v.tv_usec() as f64 * 1e-6;
            t(u.user_time()) + t(u.system_time())
        }
        Err(e) => panic!("getrusage(RUSAGE_THREAD): {e}"),
    }
}

fn pin(cpu: usize) -> Result<(), String> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|e| format!("CPU {cpu} in a CpuSet: {e}"))?;
    sched_setaffinity(Pid::from_raw(0), &set)
        .map_err(|e| format!("sched_setaffinity(CPU {cpu}): {e}"))
}

fn socket_pair() -> Result<(TcpStream, TcpStream), String> {
    let err = |what: &str, e: io::Error| format!("{what}: {e}");
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| err("bind", e))?;
    let addr = l.local_addr().map_err(|e| err("local_addr", e))?;
    let a = TcpStream::connect(addr).map_err(|e| err("connect", e))?;
    let (b, _) = l.accept().map_err(|e| err("accept", e))?;
    a.set_nodelay(true).map_err(|e| err("TCP_NODELAY", e))?;
    b.set_nodelay(true).map_err(|e| err("TCP_NODELAY", e))?;
    Ok((a, b))
}

fn set_zerocopy(sock: &TcpStream) -> Result<(), String> {
    let one: libc::c_int = 1;
    // SAFETY: a c_int option value of the size passed, for a socket that is open.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_ZEROCOPY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(format!("SO_ZEROCOPY: {}", io::Error::last_os_error()));
    }
    Ok(())
}

/// Waits (poll) for `want` or an error on the socket.
fn wait_fd(sock: &TcpStream, want: PollFlags, st: &mut Side) -> Result<PollFlags, String> {
    let mut fds = [PollFd::new(sock.as_fd(), want)];
    loop {
        st.calls += 1;
        match poll(&mut fds, PollTimeout::from((STALL_SECS * 1000) as u16)) {
            Ok(0) => return Err(format!("no progress in {STALL_SECS} s")),
            Ok(_) => return Ok(fds[0].revents().unwrap_or(PollFlags::empty())),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(format!("poll: {e}")),
        }
    }
}

fn sendmsg_iov(fd: libc::c_int, iov: &mut [libc::iovec], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: all-zero is a valid msghdr (no name, no control data).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov.as_mut_ptr();
    msg.msg_iovlen = iov.len();
    // SAFETY: msg and the iovecs (into the sender's live slot buffers) outlive the call.
    let n = unsafe { libc::sendmsg(fd, &msg, flags) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

fn writev(fd: libc::c_int, iov: &[libc::iovec]) -> io::Result<usize> {
    // SAFETY: the iovecs point into the sender's live slot buffers; the kernel reads them.
    let n = unsafe { libc::writev(fd, iov.as_ptr(), iov.len() as libc::c_int) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// Takes every MSG_ZEROCOPY notification queued on the socket. Returns how many
/// notification messages there were.
fn reap_errqueue(
    sock: &TcpStream,
    tx: &mut Tx,
    zt: &mut ZcTrack,
    st: &mut Side,
) -> Result<usize, String> {
    let mut found = 0;
    loop {
        let mut control = [0u64; 16];
        // SAFETY: all-zero is a valid msghdr.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control);
        st.calls += 1;
        // SAFETY: msg describes `control`, which lives across the call; no iovecs.
        let r = unsafe {
            libc::recvmsg(
                sock.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(found),
                io::ErrorKind::Interrupted => continue,
                _ => return Err(format!("recvmsg(MSG_ERRQUEUE): {e}")),
            }
        }
        // SAFETY: recvmsg filled in msg; CMSG_FIRSTHDR walks the control bytes it reports.
        let mut cm = unsafe { libc::CMSG_FIRSTHDR(&msg) };
        while !cm.is_null() {
            // SAFETY: cm is a complete header inside `control` (CMSG_FIRSTHDR/NXTHDR).
            let (level, ty) = unsafe { ((*cm).cmsg_level, (*cm).cmsg_type) };
            if (level == libc::SOL_IP && ty == libc::IP_RECVERR)
                || (level == libc::SOL_IPV6 && ty == libc::IPV6_RECVERR)
            {
                // SAFETY: an IP(V6)_RECVERR message carries a sock_extended_err.
                let ee: libc::sock_extended_err =
                    unsafe { std::ptr::read_unaligned(libc::CMSG_DATA(cm).cast()) };
                if ee.ee_errno != 0 || ee.ee_origin != SO_EE_ORIGIN_ZEROCOPY {
                    return Err(format!(
                        "error queue: errno {} origin {}",
                        ee.ee_errno, ee.ee_origin
                    ));
                }
                let copied = ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0;
                // ee_info..=ee_data: a range of send calls (a 32-bit counter).
                let mut id = ee.ee_info;
                loop {
                    zt.release(id, copied, tx)?;
                    if id == ee.ee_data {
                        break;
                    }
                    id = id.wrapping_add(1);
                }
                found += 1;
            }
            // SAFETY: as for CMSG_FIRSTHDR.
            cm = unsafe { libc::CMSG_NXTHDR(&msg, cm) };
        }
    }
}

// ---------------------------------------------------------------- io_uring

/// A ring and everything its operations may read or write: dropped (ring first) only
/// once no operation is open.
struct RingCtx {
    ring: IoUring,
    /// Submitted operations whose last CQE (the one without F_MORE) was not reaped.
    open: usize,
    iov: Vec<libc::iovec>,
    msg: Box<libc::msghdr>,
    small: Vec<u8>,
    bufs: Option<BufRing>,
    /// The multishot receive saw the end of the stream.
    eof: bool,
}

impl RingCtx {
    fn new(entries: u32, defer: bool) -> Result<RingCtx, String> {
        let ring = new_ring(entries, defer).map_err(|e| format!("io_uring_setup: {e}"))?;
        Ok(RingCtx {
            ring,
            open: 0,
            iov: Vec::with_capacity(2 * QD),
            // SAFETY: all-zero is a valid msghdr.
            msg: Box::new(unsafe { std::mem::zeroed() }),
            small: vec![0u8; SMALL_RX],
            bufs: None,
            eof: false,
        })
    }

    fn push(&mut self, e: &squeue::Entry) -> Result<(), String> {
        // SAFETY: callers build `e` from buffers that outlive the operation: the fields
        // of this context, the sender's slots or the receiver's destinations, none of
        // which is freed, or reused by the sender, before the operation's last CQE has
        // been reaped (or `settle` has waited for it).
        unsafe { self.ring.submission().push(e) }
            .map_err(|_| "submission queue full".to_string())?;
        self.open += 1;
        Ok(())
    }

    /// Submits what is queued and waits for at least one completion.
    fn wait(&mut self, st: &mut Side) -> Result<(), String> {
        let ts = types::Timespec::new().sec(STALL_SECS);
        let args = types::SubmitArgs::new().timespec(&ts);
        loop {
            st.calls += 1;
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => return Ok(()),
                Err(e) => match e.raw_os_error() {
                    Some(libc::EINTR) => continue,
                    Some(libc::EBUSY) => return Ok(()),
                    Some(libc::ETIME) => {
                        return Err(format!("io_uring: nothing completed in {STALL_SECS} s"))
                    }
                    _ => return Err(format!("io_uring_enter: {e}")),
                },
            }
        }
    }

    /// After an error (the socket shut down): waits until no operation is open, so the
    /// buffers can go. Aborts if the kernel does not let go of them.
    fn settle(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(STALL_SECS);
        while self.open > 0 && Instant::now() < deadline {
            let ts = types::Timespec::new().sec(1);
            let args = types::SubmitArgs::new().timespec(&ts);
            let _ = self.ring.submitter().submit_with_args(1, &args);
            for cqe in self.ring.completion() {
                if !cqueue::more(cqe.flags()) {
                    self.open -= 1;
                }
            }
        }
        if self.open > 0 {
            eprintln!("io_uring operations still open after an error: aborting");
            std::process::abort();
        }
    }
}

fn new_ring(entries: u32, defer: bool) -> io::Result<IoUring> {
    if defer {
        IoUring::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
    } else {
        IoUring::new(entries)
    }
}

/// A page-aligned page (a provided buffer ring's memory).
#[repr(C, align(4096))]
struct Page([u8; 4096]);

/// A provided buffer ring of RING_BUFS buffers of RING_BUF_SIZE.
struct BufRing {
    entries: Vec<Page>,
    data: Vec<u8>,
    tail: u16,
}

impl BufRing {
    fn new() -> BufRing {
        let bytes = usize::from(RING_BUFS) * std::mem::size_of::<types::BufRingEntry>();
        let mut r = BufRing {
            entries: (0..bytes.div_ceil(4096)).map(|_| Page([0; 4096])).collect(),
            data: vec![0xEEu8; usize::from(RING_BUFS) * RING_BUF_SIZE],
            tail: 0,
        };
        for bid in 0..RING_BUFS {
            r.provide(bid);
        }
        r.publish();
        r
    }

    fn base(&mut self) -> *mut types::BufRingEntry {
        self.entries.as_mut_ptr().cast()
    }

    /// Hands buffer `bid` (back) to the kernel; it sees it after `publish`.
    fn provide(&mut self, bid: u16) {
        let addr = self.data[usize::from(bid) * RING_BUF_SIZE..].as_mut_ptr() as u64;
        let i = usize::from(self.tail & (RING_BUFS - 1));
        let base = self.base();
        // SAFETY: i < RING_BUFS, and the ring's entries fit in `entries`; the kernel reads
        // only entries before the published tail, and this one is past it.
        let e = unsafe { &mut *base.add(i) };
        e.set_addr(addr);
        e.set_len(RING_BUF_SIZE as u32);
        e.set_bid(bid);
        self.tail = self.tail.wrapping_add(1);
    }

    fn publish(&mut self) {
        let base = self.base();
        // SAFETY: the tail is a u16 in the first entry (BufRingEntry::tail), aligned; the
        // kernel reads it concurrently, so it is stored atomically, after the entries.
        unsafe {
            let tail = types::BufRingEntry::tail(base) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    fn buffer(&self, bid: u16, len: usize) -> Option<&[u8]> {
        let at = usize::from(bid) * RING_BUF_SIZE;
        self.data.get(at..at + len.min(RING_BUF_SIZE))
    }
}

// ---------------------------------------------------------------- senders

/// `writev` (or `sendmsg` with MSG_ZEROCOPY) on a non-blocking socket, `poll` when full.
fn send_sync(
    tx: &mut Tx,
    sock: &TcpStream,
    zc: bool,
    zt: &mut ZcTrack,
    st: &mut Side,
) -> Result<(), String> {
    let fd = sock.as_raw_fd();
    let mut iov = Vec::with_capacity(2 * QD);
    // MSG_ZEROCOPY ran out of notification memory (optmem): wait for notifications.
    let mut nobufs = false;
    loop {
        tx.refill();
        if tx.pending() && !nobufs {
            tx.iovecs(&mut iov, QD);
            st.calls += 1;
            let r = if zc {
                sendmsg_iov(fd, &mut iov, libc::MSG_ZEROCOPY | libc::MSG_NOSIGNAL)
            } else {
                writev(fd, &iov)
            };
            match r {
                Ok(n) => {
                    let range = tx.advance(n)?;
                    if zc {
                        // Each send call that sent bytes takes the next notification id.
                        let id = zt.next_id;
                        zt.next_id = id.wrapping_add(1);
                        zt.sent(id, Some(range), tx);
                    }
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if zc && e.raw_os_error() == Some(libc::ENOBUFS) => nobufs = true,
                Err(e) => return Err(format!("{}: {e}", if zc { "sendmsg" } else { "writev" })),
            }
        } else if tx.finished() && zt.ops.is_empty() {
            return Ok(());
        }
        if !zc && !tx.pending() {
            return Err("sender stalled with nothing queued".into());
        }
        let want = if tx.pending() && !nobufs {
            PollFlags::POLLOUT
        } else {
            PollFlags::empty()
        };
        let revents = wait_fd(sock, want, st)?;
        if zc && revents.contains(PollFlags::POLLERR) {
            if reap_errqueue(sock, tx, zt, st)? == 0 {
                let e = sock.take_error().ok().flatten();
                return Err(format!("socket error: {e:?}"));
            }
            nobufs = false;
        }
    }
}

/// One io_uring send operation at a time over everything queued (SendZc: over the rest
/// of one message).
fn send_uring(
    tx: &mut Tx,
    sock: &TcpStream,
    path: SendPath,
    ctx: &mut RingCtx,
    zt: &mut ZcTrack,
    st: &mut Side,
) -> Result<(), String> {
    let fd = types::Fd(sock.as_raw_fd());
    let nosig = libc::MSG_NOSIGNAL;
    let mut inflight = false;
    let mut next_ud: u32 = 0;
    loop {
        tx.refill();
        if !inflight && tx.pending() {
            next_ud = next_ud.wrapping_add(1);
            let e = match path {
                SendPath::UringWritev => {
                    tx.iovecs(&mut ctx.iov, QD);
                    opcode::Writev::new(fd, ctx.iov.as_ptr(), ctx.iov.len() as u32).build()
                }
                SendPath::UringSendMsg | SendPath::UringSendMsgZc => {
                    tx.iovecs(&mut ctx.iov, QD);
                    ctx.msg.msg_iov = ctx.iov.as_mut_ptr();
                    ctx.msg.msg_iovlen = ctx.iov.len();
                    let msg: *const libc::msghdr = &*ctx.msg;
                    if path == SendPath::UringSendMsg {
                        opcode::SendMsg::new(fd, msg).flags(nosig as u32).build()
                    } else {
                        opcode::SendMsgZc::new(fd, msg)
                            .flags(nosig as u32)
                            .ioprio(IORING_SEND_ZC_REPORT_USAGE)
                            .build()
                    }
                }
                SendPath::UringSendZc => {
                    let (ptr, len) = tx.contiguous();
                    opcode::SendZc::new(fd, ptr, len as u32)
                        .flags(nosig)
                        .zc_flags(IORING_SEND_ZC_REPORT_USAGE)
                        .build()
                }
                SendPath::Writev | SendPath::MsgZerocopy => {
                    return Err(format!("{} is not an io_uring path", path.name()))
                }
            };
            ctx.push(&e.user_data(u64::from(next_ud)))?;
            inflight = true;
        } else if !inflight && tx.finished() && zt.ops.is_empty() {
            return Ok(());
        }
        ctx.wait(st)?;
        let mut cq = ctx.ring.completion();
        for cqe in &mut cq {
            let (id, res, fl) = (cqe.user_data() as u32, cqe.result(), cqe.flags());
            if !cqueue::more(fl) {
                ctx.open -= 1;
            }
            if cqueue::notif(fl) {
                let copied = res as u32 & IORING_NOTIF_USAGE_ZC_COPIED != 0;
                zt.release(id, copied, tx)?;
                continue;
            }
            inflight = false;
            let range = if res > 0 {
                Some(tx.advance(res as usize)?)
            } else {
                None
            };
            // F_MORE: a notification follows; the pages stay in use until then.
            if cqueue::more(fl) {
                zt.sent(id, range, tx);
            }
            if res == -libc::EAGAIN || res == -libc::EINTR {
                continue;
            }
            if res < 0 {
                return Err(format!(
                    "{}: {}",
                    path.name(),
                    io::Error::from_raw_os_error(-res)
                ));
            }
            if res == 0 {
                return Err(format!("{}: sent nothing", path.name()));
            }
        }
    }
}

// ---------------------------------------------------------------- receivers

/// `read` on a non-blocking socket, `poll` when empty: into a 256 KiB buffer and copied,
/// or (direct) the header into a 256-byte buffer and the payload into its destination.
fn recv_sync(rx: &mut Rx, sock: &TcpStream, direct: bool, st: &mut Side) -> Result<(), String> {
    let mut s = sock;
    let mut buf = vec![0xEEu8; if direct { SMALL_RX } else { RX_BUF }];
    while !rx.done() {
        let (r, placed) = match rx.direct_dst() {
            Some(d) if direct => (s.read(d), true),
            _ => (s.read(&mut buf), false),
        };
        st.calls += 1;
        match r {
            Ok(0) => return Err(format!("end of stream after {} messages", rx.seq)),
            Ok(n) if placed => rx.placed(n)?,
            Ok(n) => rx.feed(&buf[..n])?,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                wait_fd(sock, PollFlags::POLLIN, st)?;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read: {e}")),
        }
    }
    Ok(())
}

/// io_uring Recv, one at a time: the header into a 256-byte buffer, the payload with
/// MSG_WAITALL straight into its destination.
fn recv_uring(
    rx: &mut Rx,
    sock: &TcpStream,
    ctx: &mut RingCtx,
    st: &mut Side,
) -> Result<(), String> {
    let fd = types::Fd(sock.as_raw_fd());
    while !rx.done() {
        let (ptr, len, placed) = match rx.direct_dst() {
            Some(d) => (d.as_mut_ptr(), d.len(), true),
            None => (ctx.small.as_mut_ptr(), ctx.small.len(), false),
        };
        let flags = if placed { libc::MSG_WAITALL } else { 0 };
        ctx.push(
            &opcode::Recv::new(fd, ptr, len as u32)
                .flags(flags)
                .build()
                .user_data(1),
        )?;
        let mut res = None;
        while res.is_none() {
            ctx.wait(st)?;
            if let Some(c) = ctx.ring.completion().next() {
                ctx.open -= 1;
                res = Some(c.result());
            }
        }
        let res = res.unwrap_or(-libc::EIO);
        if res == -libc::EAGAIN || res == -libc::EINTR {
            continue;
        }
        if res < 0 {
            return Err(format!("Recv: {}", io::Error::from_raw_os_error(-res)));
        }
        if res == 0 {
            return Err(format!("end of stream after {} messages", rx.seq));
        }
        if placed {
            rx.placed(res as usize)?;
        } else {
            rx.feed(&ctx.small[..res as usize])?;
        }
    }
    Ok(())
}

/// Multishot io_uring Recv into provided buffers, copied into the destinations; each
/// buffer goes back to the ring once copied. Re-armed when it stops (no F_MORE).
fn recv_multi(
    rx: &mut Rx,
    sock: &TcpStream,
    ctx: &mut RingCtx,
    st: &mut Side,
) -> Result<(), String> {
    let fd = types::Fd(sock.as_raw_fd());
    while !rx.done() {
        if ctx.open == 0 {
            ctx.push(&opcode::RecvMulti::new(fd, BGID).build().user_data(2))?;
        }
        ctx.wait(st)?;
        let bufs = ctx.bufs.as_mut().ok_or("no provided buffer ring")?;
        let mut cq = ctx.ring.completion();
        for cqe in &mut cq {
            let (res, fl) = (cqe.result(), cqe.flags());
            if !cqueue::more(fl) {
                ctx.open -= 1;
            }
            if res == -libc::ENOBUFS {
                continue;
            }
            if res < 0 {
                return Err(format!("RecvMulti: {}", io::Error::from_raw_os_error(-res)));
            }
            if res == 0 {
                if rx.done() {
                    ctx.eof = true;
                    continue;
                }
                return Err(format!("end of stream after {} messages", rx.seq));
            }
            let bid = cqueue::buffer_select(fl).ok_or("RecvMulti completion without a buffer")?;
            let data = bufs
                .buffer(bid, res as usize)
                .ok_or("RecvMulti: bad buffer id")?;
            rx.feed(data)?;
            bufs.provide(bid);
        }
        drop(cq);
        bufs.publish();
    }
    Ok(())
}

/// After the last message: the sender closes, nothing else may arrive.
fn expect_eof(path: RecvPath, sock: &TcpStream, ctx: Option<&mut RingCtx>) -> Result<(), String> {
    let mut st = Side::default();
    let extra = |n: usize| Err(format!("{n} bytes after the last message"));
    match (path, ctx) {
        (RecvPath::ReadCopy | RecvPath::ReadDirect, _) => {
            let mut s = sock;
            let mut b = [0u8; 4096];
            loop {
                match s.read(&mut b) {
                    Ok(0) => return Ok(()),
                    Ok(n) => return extra(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        wait_fd(sock, PollFlags::POLLIN, &mut st)?;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(format!("read: {e}")),
                }
            }
        }
        (RecvPath::UringRecv, Some(ctx)) => {
            let fd = types::Fd(sock.as_raw_fd());
            let (ptr, len) = (ctx.small.as_mut_ptr(), ctx.small.len() as u32);
            ctx.push(&opcode::Recv::new(fd, ptr, len).build().user_data(1))?;
            loop {
                ctx.wait(&mut st)?;
                if let Some(c) = ctx.ring.completion().next() {
                    ctx.open -= 1;
                    return match c.result() {
                        0 => Ok(()),
                        n if n > 0 => extra(n as usize),
                        e => Err(format!("Recv: {}", io::Error::from_raw_os_error(-e))),
                    };
                }
            }
        }
        (RecvPath::UringMulti, Some(ctx)) => {
            let fd = types::Fd(sock.as_raw_fd());
            while !ctx.eof {
                if ctx.open == 0 {
                    ctx.push(&opcode::RecvMulti::new(fd, BGID).build().user_data(2))?;
                }
                ctx.wait(&mut st)?;
                for cqe in ctx.ring.completion() {
                    if !cqueue::more(cqe.flags()) {
                        ctx.open -= 1;
                    }
                    match cqe.result() {
                        0 => ctx.eof = true,
                        n if n > 0 => return extra(n as usize),
                        e => {
                            return Err(format!("RecvMulti: {}", io::Error::from_raw_os_error(-e)))
                        }
                    }
                }
            }
            Ok(())
        }
        (_, None) => Err("no io_uring context".into()),
    }
}

// ---------------------------------------------------------------- one run

struct RunSpec {
    combo: Combo,
    p: usize,
    msgs: u64,
    defer: bool,
    full: bool,
}

fn sender_thread(
    spec: &RunSpec,
    sock: TcpStream,
    barrier: &Barrier,
) -> Result<(Side, ZcTrack), String> {
    let pinned = pin(TX_CPU);
    let mut tx = Tx::new(spec.p, spec.msgs);
    let mut zt = ZcTrack::default();
    let prep = pinned.and_then(|()| match spec.combo.send {
        SendPath::Writev | SendPath::MsgZerocopy => {
            if spec.combo.send == SendPath::MsgZerocopy {
                set_zerocopy(&sock)?;
            }
            sock.set_nonblocking(true)
                .map_err(|e| format!("O_NONBLOCK: {e}"))?;
            Ok(None)
        }
        _ => RingCtx::new(8, spec.defer).map(Some),
    });
    barrier.wait();
    // Declared after `tx`: dropped (the ring closed) before the slots are freed.
    let mut ctx = match prep {
        Ok(c) => c,
        Err(e) => {
            let _ = sock.shutdown(Shutdown::Both);
            return Err(e);
        }
    };
    let mut st = Side::default();
    let c0 = thread_cpu();
    let r = match (spec.combo.send, ctx.as_mut()) {
        (SendPath::Writev, _) => send_sync(&mut tx, &sock, false, &mut zt, &mut st),
        (SendPath::MsgZerocopy, _) => send_sync(&mut tx, &sock, true, &mut zt, &mut st),
        (path, Some(c)) => send_uring(&mut tx, &sock, path, c, &mut zt, &mut st),
        (_, None) => Err("no io_uring context".into()),
    };
    st.cpu = thread_cpu() - c0;
    if let Err(e) = r {
        let _ = sock.shutdown(Shutdown::Both);
        if let Some(c) = ctx.as_mut() {
            c.settle();
        }
        return Err(format!("sender: {e}"));
    }
    let _ = sock.shutdown(Shutdown::Write);
    Ok((st, zt))
}

fn receiver_thread(
    spec: &RunSpec,
    sock: TcpStream,
    barrier: &Barrier,
) -> Result<(Side, f64), String> {
    let pinned = pin(RX_CPU);
    let mut rx = Rx::new(spec.p, spec.msgs, spec.full);
    let prep = pinned.and_then(|()| match spec.combo.recv {
        RecvPath::ReadCopy | RecvPath::ReadDirect => {
            sock.set_nonblocking(true)
                .map_err(|e| format!("O_NONBLOCK: {e}"))?;
            Ok(None)
        }
        RecvPath::UringRecv => RingCtx::new(8, spec.defer).map(Some),
        RecvPath::UringMulti => {
            let mut c = RingCtx::new(64, spec.defer)?;
            let mut b = BufRing::new();
            let base = b.base() as u64;
            c.bufs = Some(b);
            // SAFETY: the ring memory is page-aligned, RING_BUFS entries long, and lives
            // in `c.bufs` (moved with its heap allocation unchanged) until the ring is
            // dropped, which comes first (field order of RingCtx).
            unsafe {
                c.ring
                    .submitter()
                    .register_buf_ring_with_flags(base, RING_BUFS, BGID, 0)
            }
            .map_err(|e| format!("IORING_REGISTER_PBUF_RING: {e}"))?;
            Ok(Some(c))
        }
    });
    barrier.wait();
    // Declared after `rx`: dropped (the ring closed) before the destinations are freed.
    let mut ctx = match prep {
        Ok(c) => c,
        Err(e) => {
            let _ = sock.shutdown(Shutdown::Both);
            return Err(e);
        }
    };
    let mut st = Side::default();
    let t0 = Instant::now();
    let c0 = thread_cpu();
    let r = match (spec.combo.recv, ctx.as_mut()) {
        (RecvPath::ReadCopy, _) => recv_sync(&mut rx, &sock, false, &mut st),
        (RecvPath::ReadDirect, _) => recv_sync(&mut rx, &sock, true, &mut st),
        (RecvPath::UringRecv, Some(c)) => recv_uring(&mut rx, &sock, c, &mut st),
        (RecvPath::UringMulti, Some(c)) => recv_multi(&mut rx, &sock, c, &mut st),
        (_, None) => Err("no io_uring context".into()),
    };
    st.cpu = thread_cpu() - c0;
    let secs = t0.elapsed().as_secs_f64();
    let r = r.and_then(|()| expect_eof(spec.combo.recv, &sock, ctx.as_mut()));
    if let Err(e) = r {
        let _ = sock.shutdown(Shutdown::Both);
        if let Some(c) = ctx.as_mut() {
            c.settle();
        }
        return Err(format!("receiver: {e}"));
    }
    Ok((st, secs))
}

fn run_once(spec: RunSpec) -> Result<RunResult, String> {
    let (a, b) = socket_pair()?;
    let spec = Arc::new(spec);
    let barrier = Arc::new(Barrier::new(2));
    let (s2, b2) = (spec.clone(), barrier.clone());
    let sender = thread::Builder::new()
        .name("bench-tx".into())
        .spawn(move || sender_thread(&s2, a, &b2))
        .unwrap_or_else(|e| panic!("spawning the sender: {e}"));
    let (s3, b3) = (spec.clone(), barrier.clone());
    let receiver = thread::Builder::new()
        .name("bench-rx".into())
        .spawn(move || receiver_thread(&s3, b, &b3))
        .unwrap_or_else(|e| panic!("spawning the receiver: {e}"));
    let tx = sender
        .join()
        .unwrap_or_else(|_| Err("sender panicked".into()));
    let rx = receiver
        .join()
        .unwrap_or_else(|_| Err("receiver panicked".into()));
    match (tx, rx) {
        (Ok((tx, zt)), Ok((rx, secs))) => Ok(RunResult {
            secs,
            tx,
            rx,
            zc_notifs: zt.notifs,
            zc_copied: zt.copied,
        }),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

// ---------------------------------------------------------------- main

fn env_f64(name: &str, default: f64) -> f64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v}: not a number: {e}")),
        Err(_) => default,
    }
}

/// "median (min–max)".
fn stat(mut v: Vec<f64>, prec: usize) -> String {
    if v.is_empty() {
        return "–".into();
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let med = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2.0
    };
    format!("{med:.prec$} ({:.prec$}–{:.prec$})", v[0], v[v.len() - 1])
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn main() {
    let secs = env_f64("BENCH_SECS", 2.0);
    let reps = env_f64("BENCH_REPS", 5.0).max(1.0) as usize;
    let bytes = std::env::var("BENCH_BYTES").ok().map(|v| {
        v.parse::<u64>()
            .unwrap_or_else(|e| panic!("BENCH_BYTES={v}: {e}"))
    });
    let full = std::env::var("BENCH_VERIFY").is_ok_and(|v| v == "1");
    let only = std::env::var("BENCH_ONLY").ok();

    let cpus = thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        println!("socket_paths: needs 2 CPUs (sender on CPU 0, receiver on CPU 1), have {cpus}");
        return;
    }
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();

    // io_uring: is there one, which operations, and can it defer task work?
    let uring = IoUring::new(8).and_then(|ring| {
        let mut probe = Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        Ok(probe)
    });
    let defer = new_ring(8, true).is_ok();
    match &uring {
        Ok(_) => println!(
            "io_uring: available; rings {}",
            if defer {
                "with IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN"
            } else {
                "without DEFER_TASKRUN (not supported)"
            }
        ),
        Err(e) => println!("io_uring: unavailable ({e}); the io_uring rows are skipped"),
    }
    let supported = |op: Option<u8>| match (op, &uring) {
        (None, _) => true,
        (Some(op), Ok(probe)) => probe.is_supported(op),
        (Some(_), Err(_)) => false,
    };

    let base = Combo {
        send: SendPath::Writev,
        recv: RecvPath::ReadDirect,
    };
    let mut combos = vec![base];
    for send in [
        SendPath::UringWritev,
        SendPath::UringSendMsg,
        SendPath::UringSendZc,
        SendPath::UringSendMsgZc,
        SendPath::MsgZerocopy,
    ] {
        combos.push(Combo {
            send,
            recv: RecvPath::ReadDirect,
        });
    }
    for recv in [
        RecvPath::ReadCopy,
        RecvPath::UringRecv,
        RecvPath::UringMulti,
    ] {
        combos.push(Combo {
            send: SendPath::Writev,
            recv,
        });
    }
    combos.retain(|c| {
        let ok = supported(c.send.opcode()) && supported(c.recv.opcode());
        if !ok && uring.is_ok() {
            println!("skipped (operation not supported): {}", c.name());
        }
        ok && only.as_deref().is_none_or(|o| c.name().contains(o))
    });

    println!(
        "kernel {}, {cpus} CPUs, sender on CPU {TX_CPU}, receiver on CPU {RX_CPU}, QD {QD}, \
         {reps} runs per configuration (round robin){}",
        kernel.trim(),
        if full {
            ", every payload byte checked"
        } else {
            ""
        }
    );

    for p in [128 * 1024, 4096] {
        let msgs = match bytes {
            Some(b) => (b / p as u64).max(QD as u64),
            None => {
                // Calibrate on the baseline: a warm-up run, then one that is timed.
                let probe_msgs = ((256u64 << 20) / p as u64).max(QD as u64);
                let mut rate = 0.0;
                for _ in 0..2 {
                    let r = run_once(RunSpec {
                        combo: base,
                        p,
                        msgs: probe_msgs,
                        defer,
                        full,
                    })
                    .unwrap_or_else(|e| panic!("calibration run ({}): {e}", base.name()));
                    rate = probe_msgs as f64 / r.secs;
                }
                ((rate * secs) as u64).max(QD as u64)
            }
        };
        let mb = msgs * p as u64 / (1 << 20);
        println!(
            "\n### {} KiB messages ({} B header + {} B payload), {msgs} messages ({mb} MiB of payload) per run\n",
            p / 1024,
            HDR,
            p
        );
        let mut results: Vec<Vec<Result<RunResult, String>>> = vec![Vec::new(); combos.len()];
        for rep in 0..reps {
            for (i, &combo) in combos.iter().enumerate() {
                let r = run_once(RunSpec {
                    combo,
                    p,
                    msgs,
                    defer,
                    full,
                });
                match &r {
                    Ok(r) => eprintln!(
                        "  [{} KiB, run {}/{reps}] {}: {:.2} GB/s",
                        p / 1024,
                        rep + 1,
                        combo.name(),
                        (msgs * p as u64) as f64 / r.secs / 1e9
                    ),
                    Err(e) => eprintln!(
                        "  [{} KiB, run {}/{reps}] {}: FAILED: {e}",
                        p / 1024,
                        rep + 1,
                        combo.name()
                    ),
                }
                results[i].push(r);
            }
        }
        let gb = (msgs * p as u64) as f64 / 1e9;
        println!(
            "| send | receive | GB/s | sender CPU s/GB | receiver CPU s/GB | sender calls/msg | receiver calls/msg |"
        );
        println!("|---|---|---|---|---|---|---|");
        let mut notes = Vec::new();
        for (combo, rs) in combos.iter().zip(&results) {
            let ok: Vec<&RunResult> = rs.iter().filter_map(|r| r.as_ref().ok()).collect();
            let failed: Vec<&String> = rs.iter().filter_map(|r| r.as_ref().err()).collect();
            if let Some(e) = failed.first() {
                notes.push(format!(
                    "{}: {} of {} runs FAILED (first: {e})",
                    combo.name(),
                    failed.len(),
                    rs.len()
                ));
            }
            let col =
                |f: &dyn Fn(&RunResult) -> f64, prec| stat(ok.iter().map(|r| f(r)).collect(), prec);
            println!(
                "| {} | {} | {} | {} | {} | {:.2} | {:.2} |{}",
                combo.send.name(),
                combo.recv.name(),
                col(&|r| gb / r.secs, 2),
                col(&|r| r.tx.cpu / gb, 3),
                col(&|r| r.rx.cpu / gb, 3),
                median(ok.iter().map(|r| r.tx.calls as f64 / msgs as f64).collect()),
                median(ok.iter().map(|r| r.rx.calls as f64 / msgs as f64).collect()),
                if failed.is_empty() {
                    ""
                } else {
                    " FAILED runs"
                }
            );
            let notifs: u64 = ok.iter().map(|r| r.zc_notifs).sum();
            if notifs > 0 {
                let copied: u64 = ok.iter().map(|r| r.zc_copied).sum();
                notes.push(format!(
                    "{}: {notifs} zero-copy notifications, {copied} of them reported the data copied",
                    combo.name()
                ));
            }
        }
        for n in notes {
            println!("\n- {n}");
        }
    }
}
