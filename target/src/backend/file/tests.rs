//! File backend tests, in a temporary directory.

use super::channel::map_errno;
use super::*;
use crate::backend::spec::{open_backend, NamespaceSpec, OpenOptions};
use crate::backend::{CqeResult, DmaSlice, IoCompletion, IoOp};
use nvmf_common::wire::status::{generic, media, Sct, Status};
use std::collections::HashSet;
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A file under a directory, removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new_in(dir: &Path, len: u64) -> TempFile {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(format!("nvmf-file-test-{}-{n}.img", std::process::id()));
        let f = File::create(&path).unwrap();
        f.set_len(len).unwrap();
        TempFile(path)
    }
    fn new(len: u64) -> TempFile {
        Self::new_in(&std::env::temp_dir(), len)
    }
    fn contents(&self) -> Vec<u8> {
        std::fs::read(&self.0).unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Whether the filesystem of `dir` accepts O_DIRECT opens.
fn dir_supports_o_direct(dir: &Path) -> bool {
    let t = TempFile::new_in(dir, 4096);
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&t.0)
        .is_ok()
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u64).wrapping_mul(2654435761).wrapping_add(seed * 977) >> 7) as u8)
        .collect()
}

fn dma(len: usize) -> Arc<DmaBuffer> {
    Arc::new(DmaBuffer::new(len).unwrap())
}

fn slice(buf: &Arc<DmaBuffer>, offset: usize, len: usize) -> DmaSlice {
    DmaSlice::new(buf.clone(), offset, len).unwrap()
}

/// Polls until `n` completions arrived, sleeping on the eventfd in between.
fn wait(ch: &mut dyn IoChannel, n: usize) -> Vec<IoCompletion> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut out = Vec::new();
    let fd = ch.event_fd().unwrap();
    while out.len() < n {
        ch.poll(&mut out);
        if out.len() >= n {
            break;
        }
        assert!(Instant::now() < deadline, "timed out: {} of {n}", out.len());
        // SAFETY: the channel owns the eventfd and outlives this borrow.
        let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
        let mut fds = [nix::poll::PollFd::new(bfd, nix::poll::PollFlags::POLLIN)];
        let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16));
    }
    assert_eq!(out.len(), n, "more completions than operations");
    out
}

fn run(ch: &mut dyn IoChannel, op: IoOp) -> Result<(), BackendError> {
    ch.submit(42, op)?;
    ch.flush();
    let out = wait(ch, 1);
    assert_eq!(out[0].0, 42);
    out[0].1.clone().map(|_| ())
}

/// Reads `len` bytes at `offset` into a buffer at `buf_off`.
fn read_at(ch: &mut dyn IoChannel, offset: u64, len: usize, buf_off: usize) -> Vec<u8> {
    let buf = dma(buf_off + len);
    buf.fill(0, buf_off + len, 0xEE);
    run(
        ch,
        IoOp::Read {
            offset,
            buf: slice(&buf, buf_off, len),
        },
    )
    .unwrap();
    let mut v = vec![0; len];
    assert!(buf.read_at(buf_off, &mut v));
    v
}

fn write_at(
    ch: &mut dyn IoChannel,
    offset: u64,
    data: &[u8],
    buf_off: usize,
    fua: bool,
) -> Result<(), BackendError> {
    let buf = dma(buf_off + data.len());
    assert!(buf.write_at(buf_off, data));
    run(
        ch,
        IoOp::Write {
            offset,
            buf: slice(&buf, buf_off, data.len()),
            fua,
        },
    )
}

#[test]
fn geometry_and_info() {
    let t = TempFile::new(4 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let info = b.info();
    assert_eq!(info.size_bytes, 4 << 20);
    assert_eq!(info.block_size, 512);
    assert!(info.volatile_write_cache);
    assert!(info.supports_deallocate);
    assert!(info.deallocated_reads_zero);
    assert!(info.supports_write_zeroes);
    assert!(!b.is_block_device());
    assert!(
        info.description.starts_with("file "),
        "{}",
        info.description
    );
    assert!(info.description.contains(&*t.0.to_string_lossy()));

    // Block size override, and rounding down to a whole block.
    let t = TempFile::new((1 << 20) + 600);
    let b = FileBackend::open(
        &t.0,
        FileOptions {
            block_size: Some(4096),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(b.info().block_size, 4096);
    assert_eq!(b.info().size_bytes, 1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    assert_eq!(b.info().block_size, 512);
    assert_eq!(b.info().size_bytes, (1 << 20) + 512);

    // Buffered on request.
    let b = FileBackend::open(
        &t.0,
        FileOptions {
            buffered_io: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(!b.is_direct());
    assert!(b.info().description.contains("(buffered)"));
}

#[test]
fn direct_and_buffered_paths() {
    let dir = std::env::temp_dir();
    let t = TempFile::new_in(&dir, 4 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let direct = dir_supports_o_direct(&dir);
    assert_eq!(b.is_direct(), direct, "O_DIRECT probe disagrees");
    if direct {
        assert!(b.info().description.contains("(O_DIRECT)"));
        let a = b.dio_align().unwrap();
        assert!(a.offset.is_power_of_two() && a.offset <= 4096, "{a:?}");
        assert!(a.mem.is_power_of_two() && a.mem <= 4096, "{a:?}");
    } else {
        eprintln!("note: {} does not support O_DIRECT", dir.display());
    }
    let mut ch = b.open_file_channel().unwrap();

    // Aligned offset, length and buffer: the O_DIRECT descriptor.
    let data = pattern(1, 8192);
    write_at(&mut ch, 4096, &data, 0, false).unwrap();
    let s = ch.stats();
    assert_eq!((s.direct, s.buffered), if direct { (1, 0) } else { (0, 1) });
    assert_eq!(read_at(&mut ch, 4096, 8192, 0), data);
    let s = ch.stats();
    assert_eq!((s.direct, s.buffered), if direct { (2, 0) } else { (0, 2) });

    // Unaligned offset and buffer address: the buffered descriptor.
    let data2 = pattern(2, 3000);
    write_at(&mut ch, 1000, &data2, 100, false).unwrap();
    assert_eq!(read_at(&mut ch, 1000, 3000, 100), data2);
    // Aligned offset but unaligned buffer address: buffered too.
    assert_eq!(read_at(&mut ch, 4096, 8192, 8), data);
    let s = ch.stats();
    assert_eq!(s.direct + s.buffered, 5);
    assert_eq!(s.buffered, if direct { 3 } else { 5 });

    // Both paths see each other's data (the kernel keeps them coherent).
    let mut expect = vec![0u8; 12288];
    expect[1000..4000].copy_from_slice(&data2);
    expect[4096..12288].copy_from_slice(&data);
    assert_eq!(read_at(&mut ch, 0, 12288, 0), expect);
    assert_eq!(read_at(&mut ch, 0, 12288, 1), expect);
    assert_eq!(t.contents()[..12288], expect[..]);
    assert_eq!(ch.in_flight(), 0);
}

#[test]
fn flush_and_fua() {
    let t = TempFile::new(1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    let data = pattern(3, 4096);
    write_at(&mut *ch, 8192, &data, 0, true).unwrap();
    let data2 = pattern(4, 1000);
    write_at(&mut *ch, 100, &data2, 3, true).unwrap();
    assert_eq!(run(&mut *ch, IoOp::Flush), Ok(()));
    let c = t.contents();
    assert_eq!(c[8192..12288], data[..]);
    assert_eq!(c[100..1100], data2[..]);
    assert!(b.shared.dsync_ok.load(Ordering::Relaxed));
}

#[test]
fn fua_without_rwf_dsync_syncs_after() {
    let t = TempFile::new(1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    // As on a kernel that refuses RWF_DSYNC: the write is followed by fdatasync.
    b.shared.dsync_ok.store(false, Ordering::Relaxed);
    let mut ch = b.open_file_channel().unwrap();
    let data = pattern(5, 4096);
    write_at(&mut ch, 0, &data, 0, true).unwrap();
    assert_eq!(ch.stats().resubmitted, 1, "the fdatasync step");
    assert_eq!(t.contents()[..4096], data[..]);
}

fn fill_file(ch: &mut dyn IoChannel, len: usize) -> Vec<u8> {
    let data = pattern(9, len);
    write_at(ch, 0, &data, 0, false).unwrap();
    data
}

#[test]
fn write_zeroes_reads_back_zero() {
    let t = TempFile::new(2 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    let mut expect = fill_file(&mut *ch, 2 << 20);
    for (off, len) in [(4096u64, 65536u64), (512, 1024), (300_000, 200_000)] {
        assert_eq!(
            run(&mut *ch, IoOp::WriteZeroes { offset: off, len }),
            Ok(())
        );
        expect[off as usize..(off + len) as usize].fill(0);
    }
    assert_eq!(read_at(&mut *ch, 0, 2 << 20, 0), expect);
    assert_eq!(t.contents(), expect);
    // The file did not grow.
    assert_eq!(t.contents().len(), 2 << 20);
}

#[test]
fn write_zeroes_by_writing_zero_buffer() {
    let t = TempFile::new(4 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    // As on a filesystem that supports neither ZERO_RANGE nor PUNCH_HOLE.
    b.shared.zero_mode.store(ZERO_WRITE, Ordering::Relaxed);
    let mut ch = b.open_file_channel().unwrap();
    let mut expect = fill_file(&mut ch, 4 << 20);
    let before = ch.stats();
    // 1 MiB + 1 KiB starting at 512: five chunk writes.
    let (off, len) = (512u64, (1u64 << 20) + 1024);
    assert_eq!(run(&mut ch, IoOp::WriteZeroes { offset: off, len }), Ok(()));
    let after = ch.stats();
    let chunks = len.div_ceil(ZERO_CHUNK as u64);
    assert_eq!(
        (after.direct + after.buffered) - (before.direct + before.buffered),
        chunks
    );
    expect[off as usize..(off + len) as usize].fill(0);
    assert_eq!(t.contents(), expect);

    // The same fallback for Deallocate.
    b.shared.dealloc_mode.store(ZERO_WRITE, Ordering::Relaxed);
    assert_eq!(
        run(
            &mut ch,
            IoOp::Deallocate {
                offset: 3 << 20,
                len: 8192
            }
        ),
        Ok(())
    );
    expect[3 << 20..(3 << 20) + 8192].fill(0);
    assert_eq!(t.contents(), expect);
}

#[test]
fn deallocate_reads_back_zero() {
    let t = TempFile::new(2 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    let mut expect = fill_file(&mut *ch, 2 << 20);
    let (off, len) = (1u64 << 20, 256u64 << 10);
    assert_eq!(run(&mut *ch, IoOp::Deallocate { offset: off, len }), Ok(()));
    expect[off as usize..(off + len) as usize].fill(0);
    assert_eq!(read_at(&mut *ch, 0, 2 << 20, 0), expect);
    assert_eq!(t.contents(), expect);
    // A whole-block hole was punched: the file now uses less space.
    let blocks = std::os::unix::fs::MetadataExt::blocks(&std::fs::metadata(&t.0).unwrap());
    assert!(blocks * 512 <= (2 << 20) - len, "{blocks} blocks");
    assert_eq!(b.shared.dealloc_mode.load(Ordering::Relaxed), ZERO_PUNCH);
}

/// tmpfs has no ZERO_RANGE (EOPNOTSUPP): the channel falls back to punching holes.
#[test]
fn write_zeroes_fallback_on_tmpfs() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let t = TempFile::new_in(shm, 1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    let mut expect = fill_file(&mut *ch, 1 << 20);
    assert_eq!(
        run(
            &mut *ch,
            IoOp::WriteZeroes {
                offset: 8192,
                len: 16384
            }
        ),
        Ok(())
    );
    expect[8192..8192 + 16384].fill(0);
    assert_eq!(t.contents(), expect);
    let mode = b.shared.zero_mode.load(Ordering::Relaxed);
    assert!(mode == ZERO_RANGE || mode == ZERO_PUNCH, "{mode}");
    eprintln!("tmpfs: {} ; zero mode {mode}", b.info().description);
    // A second one starts with what worked.
    assert_eq!(
        run(
            &mut *ch,
            IoOp::WriteZeroes {
                offset: 0,
                len: 512
            }
        ),
        Ok(())
    );
    expect[..512].fill(0);
    assert_eq!(t.contents(), expect);
}

#[test]
fn many_in_flight() {
    let t = TempFile::new(8 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_file_channel().unwrap();
    // 300 writes > 256 SQ entries; then 1200 reads > 512 CQ entries.
    let n = 300usize;
    let buf = dma(n * 4096);
    for i in 0..n {
        assert!(buf.write_at(i * 4096, &pattern(i as u64, 4096)));
    }
    for i in 0..n {
        ch.submit(
            i as u64,
            IoOp::Write {
                offset: (i * 4096 * 2) as u64,
                buf: slice(&buf, i * 4096, 4096),
                fua: false,
            },
        )
        .unwrap();
    }
    assert_eq!(ch.in_flight(), n);
    ch.flush();
    let out = wait(&mut ch, n);
    let tags: HashSet<u64> = out.iter().map(|c| c.0).collect();
    assert_eq!(tags.len(), n);
    assert!(out.iter().all(|c| c.1.is_ok()), "{out:?}");
    assert_eq!(ch.in_flight(), 0);

    let m = 1200usize;
    let rbuf = dma(m * 4096);
    for j in 0..m {
        let i = j % n;
        ch.submit(
            1000 + j as u64,
            IoOp::Read {
                offset: (i * 4096 * 2) as u64,
                buf: slice(&rbuf, j * 4096, 4096),
            },
        )
        .unwrap();
    }
    assert_eq!(ch.in_flight(), m);
    ch.flush();
    let out = wait(&mut ch, m);
    assert!(out.iter().all(|c| c.1.is_ok()));
    let tags: HashSet<u64> = out.iter().map(|c| c.0).collect();
    assert_eq!(tags.len(), m);
    for j in 0..m {
        let mut got = vec![0u8; 4096];
        rbuf.read_at(j * 4096, &mut got);
        assert_eq!(got, pattern((j % n) as u64, 4096), "read {j}");
    }
    assert_eq!(ch.in_flight(), 0);
    // Every operation was issued exactly once, whether it waited for room or not.
    let st = ch.stats();
    assert_eq!(st.direct + st.buffered, (n + m) as u64);
    assert_eq!(st.resubmitted, 0);
    // Buffers are released once their I/O completed.
    assert_eq!(Arc::strong_count(&buf), 1);
    assert_eq!(Arc::strong_count(&rbuf), 1);
}

#[test]
fn drop_waits_for_in_flight_io() {
    let t = TempFile::new(8 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let buf = dma(1 << 20);
    {
        let mut ch = b.open_channel().unwrap();
        for i in 0..600u64 {
            ch.submit(
                i,
                IoOp::Read {
                    offset: (i % 8) << 20,
                    buf: slice(&buf, 0, 1 << 20),
                },
            )
            .unwrap();
        }
        ch.flush();
        // Dropped with I/O in the kernel and in the overflow queue.
    }
    assert_eq!(Arc::strong_count(&buf), 1);
}

#[test]
fn read_only_file() {
    let t = TempFile::new(1 << 20);
    let data = pattern(11, 4096);
    {
        let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
        let mut ch = b.open_channel().unwrap();
        write_at(&mut *ch, 0, &data, 0, false).unwrap();
    }
    let b = FileBackend::open(
        &t.0,
        FileOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(b.info().description.contains("read-only"));
    let mut ch = b.open_channel().unwrap();
    assert_eq!(read_at(&mut *ch, 0, 4096, 0), data);
    let e = write_at(&mut *ch, 0, &pattern(12, 4096), 0, false).unwrap_err();
    assert_eq!(e, BackendError::WriteIo(libc::EBADF));
    assert_eq!(e.status(), Status::media_retryable(media::WRITE_FAULT));
    let e = write_at(&mut *ch, 10, &pattern(12, 10), 1, true).unwrap_err();
    assert_eq!(e, BackendError::WriteIo(libc::EBADF));
    let e = run(
        &mut *ch,
        IoOp::WriteZeroes {
            offset: 0,
            len: 4096,
        },
    )
    .unwrap_err();
    assert_eq!(e, BackendError::WriteIo(libc::EBADF));
    assert_eq!(read_at(&mut *ch, 0, 4096, 0), data);
    assert_eq!(ch.in_flight(), 0);
}

#[test]
fn read_past_shrunk_file_is_an_error() {
    let t = TempFile::new(1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    // Someone truncates the file under the namespace.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&t.0)
        .unwrap()
        .set_len(4096)
        .unwrap();
    let buf = dma(8192);
    let r = run(
        &mut *ch,
        IoOp::Read {
            offset: 0,
            buf: slice(&buf, 0, 8192),
        },
    );
    assert_eq!(r, Err(BackendError::ReadIo(libc::ENODATA)));
    assert_eq!(
        r.unwrap_err().status(),
        Status::media_retryable(media::UNRECOVERED_READ_ERROR)
    );
}

#[test]
fn submit_checks() {
    let t = TempFile::new(1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    let buf = dma(8192);
    assert_eq!(
        ch.submit(
            1,
            IoOp::Read {
                offset: (1 << 20) - 4096,
                buf: slice(&buf, 0, 8192)
            }
        ),
        Err(BackendError::OutOfRange)
    );
    assert_eq!(
        ch.submit(
            2,
            IoOp::Deallocate {
                offset: 1 << 20,
                len: 1
            }
        ),
        Err(BackendError::OutOfRange)
    );
    let bad = DmaSlice {
        buf: buf.clone(),
        offset: 8000,
        len: 4096,
    };
    assert_eq!(
        ch.submit(
            3,
            IoOp::Write {
                offset: 0,
                buf: bad,
                fua: false
            }
        ),
        Err(BackendError::Io(libc::EFAULT))
    );
    assert_eq!(ch.in_flight(), 0);
    // Zero-length operations complete (through the ring) successfully.
    ch.submit(
        4,
        IoOp::Read {
            offset: 0,
            buf: slice(&buf, 0, 0),
        },
    )
    .unwrap();
    ch.submit(5, IoOp::WriteZeroes { offset: 0, len: 0 })
        .unwrap();
    ch.flush();
    let mut out = wait(&mut *ch, 2);
    out.sort_by_key(|c| c.0);
    assert_eq!(
        out,
        vec![(4, Ok(CqeResult::NONE)), (5, Ok(CqeResult::NONE))]
    );
}

#[test]
fn errno_mapping() {
    assert_eq!(map_errno(false, libc::EIO), BackendError::ReadIo(libc::EIO));
    assert_eq!(map_errno(true, libc::EIO), BackendError::WriteIo(libc::EIO));
    assert_eq!(map_errno(true, libc::ENOSPC), BackendError::NoSpace);
    assert_eq!(map_errno(true, libc::EDQUOT), BackendError::NoSpace);
    assert_eq!(map_errno(true, libc::EOPNOTSUPP), BackendError::Unsupported);
    assert_eq!(
        map_errno(false, libc::EFAULT),
        BackendError::Io(libc::EFAULT)
    );

    assert_eq!(
        BackendError::ReadIo(libc::EIO).status(),
        Status::media_retryable(media::UNRECOVERED_READ_ERROR)
    );
    assert_eq!(
        BackendError::WriteIo(libc::EIO).status(),
        Status::media_retryable(media::WRITE_FAULT)
    );
    assert!(BackendError::Short { done: 1, want: 2 }
        .status()
        .is(Sct::MediaError, media::WRITE_FAULT));
    assert_eq!(
        BackendError::NoSpace.status(),
        Status::generic_dnr(generic::CAPACITY_EXCEEDED)
    );
    assert_eq!(
        BackendError::Unsupported.status(),
        Status::generic_dnr(generic::INVALID_OPCODE)
    );
    assert_eq!(
        BackendError::OutOfRange.status(),
        Status::generic_dnr(generic::LBA_OUT_OF_RANGE)
    );
    assert!(BackendError::Io(libc::EFAULT)
        .status()
        .is(Sct::Generic, generic::INTERNAL_ERROR));
    assert!(BackendError::Busy
        .status()
        .is(Sct::Generic, generic::NS_NOT_READY));
}

#[test]
fn open_errors_name_the_path() {
    let dir = std::env::temp_dir();
    let missing = dir.join(format!("nvmf-file-test-missing-{}", std::process::id()));
    let e = FileBackend::open(&missing, FileOptions::default()).unwrap_err();
    assert!(matches!(e, OpenError::Missing { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!("backing path {} does not exist", missing.display())
    );

    let e = FileBackend::open(&dir, FileOptions::default()).unwrap_err();
    assert!(matches!(e, OpenError::Directory { .. }), "{e}");
    assert!(e.to_string().contains(&*dir.to_string_lossy()), "{e}");
    assert!(e.to_string().contains("directory"), "{e}");

    let empty = TempFile::new(0);
    let e = FileBackend::open(&empty.0, FileOptions::default()).unwrap_err();
    assert!(matches!(e, OpenError::Empty { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!("backing file {} is empty", empty.0.display())
    );

    let tiny = TempFile::new(100);
    let e = FileBackend::open(&tiny.0, FileOptions::default()).unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::TooSmall {
                size: 100,
                min: 512,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&*tiny.0.to_string_lossy()), "{e}");
    let e = FileBackend::open(
        &tiny.0,
        FileOptions {
            block_size: Some(1000),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            OpenError::BadBlockSize {
                block_size: 1000,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&*tiny.0.to_string_lossy()), "{e}");

    let e = FileBackend::open(Path::new("/dev/null"), FileOptions::default()).unwrap_err();
    assert!(matches!(e, OpenError::NotFileOrBlockDevice { .. }), "{e}");
    assert!(e.to_string().contains("/dev/null"), "{e}");

    // Through the spec layer as well.
    let e = open_backend(
        &NamespaceSpec::File(missing.clone()),
        &OpenOptions::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains(&*missing.to_string_lossy()), "{e}");

    // Permission errors are classified (a test process running as root cannot
    // provoke one).
    let e = OpenError::from_io(
        Path::new("/x"),
        std::io::Error::from_raw_os_error(libc::EACCES),
    );
    assert_eq!(e.to_string(), "backing path /x: permission denied");
}

#[test]
fn permission_denied_when_not_root() {
    let t = TempFile::new(4096);
    std::fs::set_permissions(&t.0, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    // Root bypasses file permissions; then there is nothing to see.
    if std::fs::File::open(&t.0).is_ok() {
        eprintln!("skipped: running with CAP_DAC_OVERRIDE");
        return;
    }
    let e = FileBackend::open(&t.0, FileOptions::default()).unwrap_err();
    assert!(matches!(e, OpenError::PermissionDenied { .. }), "{e}");
    assert!(e.to_string().contains(&*t.0.to_string_lossy()), "{e}");
}

#[test]
fn event_fd_signals_completions() {
    let t = TempFile::new(1 << 20);
    let b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    let mut ch = b.open_channel().unwrap();
    let fd = ch.event_fd().unwrap();
    // SAFETY: the channel owns the eventfd for the whole test.
    let bfd = unsafe { BorrowedFd::borrow_raw(fd) };
    let readable = || {
        let mut fds = [nix::poll::PollFd::new(bfd, nix::poll::PollFlags::POLLIN)];
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(5000u16)).unwrap() == 1
    };
    ch.submit(1, IoOp::Flush).unwrap();
    ch.flush();
    assert!(readable());
    let mut out = Vec::new();
    assert_eq!(ch.poll(&mut out), 1);
    // poll cleared it.
    let mut fds = [nix::poll::PollFd::new(bfd, nix::poll::PollFlags::POLLIN)];
    assert_eq!(
        nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO).unwrap(),
        0
    );
}

#[test]
fn channels_on_two_threads() {
    let t = TempFile::new(4 << 20);
    let b: Arc<dyn Backend> = Arc::new(FileBackend::open(&t.0, FileOptions::default()).unwrap());
    let handles: Vec<_> = (0..2u64)
        .map(|k| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut ch = b.open_channel().unwrap();
                for i in 0..32u64 {
                    let off = k * (2 << 20) + i * 8192;
                    write_at(&mut *ch, off, &pattern(k * 100 + i, 8192), 0, false).unwrap();
                }
                for i in 0..32u64 {
                    let off = k * (2 << 20) + i * 8192;
                    assert_eq!(read_at(&mut *ch, off, 8192, 0), pattern(k * 100 + i, 8192));
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Run with `NVMF_TEST_BLOCKDEV=/dev/loopN cargo test -- --ignored block_device`
/// (destroys the device's data).
#[test]
#[ignore]
fn block_device() {
    let Ok(dev) = std::env::var("NVMF_TEST_BLOCKDEV") else {
        eprintln!("skipped: NVMF_TEST_BLOCKDEV not set");
        return;
    };
    let path = PathBuf::from(dev);
    let b = FileBackend::open(&path, FileOptions::default()).unwrap();
    let info = b.info().clone();
    eprintln!("{info:?} dio {:?}", b.dio_align());
    assert!(b.is_block_device());
    assert!(info.description.starts_with("block device"));
    assert!(!info.supports_deallocate);
    assert!(info.size_bytes > 0 && info.size_bytes.is_multiple_of(u64::from(info.block_size)));
    let mut ch = b.open_file_channel().unwrap();
    let bs = info.block_size as usize;
    let data = pattern(21, 4 * bs);
    write_at(&mut ch, 0, &data, 0, true).unwrap();
    assert_eq!(read_at(&mut ch, 0, 4 * bs, 0), data);
    assert_eq!(read_at(&mut ch, 0, 4 * bs, 1), data);
    assert_eq!(ch.stats().direct, 2);
    assert_eq!(ch.stats().buffered, 1);
    assert_eq!(run(&mut ch, IoOp::Flush), Ok(()));
    assert_eq!(
        run(
            &mut ch,
            IoOp::WriteZeroes {
                offset: bs as u64,
                len: bs as u64
            }
        ),
        Ok(())
    );
    let mut expect = data.clone();
    expect[bs..2 * bs].fill(0);
    assert_eq!(read_at(&mut ch, 0, 4 * bs, 0), expect);
    assert_eq!(
        run(
            &mut ch,
            IoOp::Deallocate {
                offset: 0,
                len: bs as u64
            }
        ),
        Ok(())
    );
    // Block size must be a multiple of the device's.
    if info.block_size == 4096 {
        let e = FileBackend::open(
            &path,
            FileOptions {
                block_size: Some(512),
                ..Default::default()
            },
        )
        .unwrap_err();
        assert!(matches!(e, OpenError::BlockSizeMismatch { .. }), "{e}");
    }
}

/// A wrong direct I/O alignment: the kernel's EINVAL sends the I/O (and all later
/// ones) to the buffered descriptor.
#[test]
fn direct_einval_falls_back_to_buffered() {
    let t = TempFile::new(1 << 20);
    let mut b = FileBackend::open(&t.0, FileOptions::default()).unwrap();
    if !b.is_direct() {
        eprintln!("skipped: no O_DIRECT in {}", std::env::temp_dir().display());
        return;
    }
    let shared = Arc::get_mut(&mut b.shared).unwrap();
    if let Some((_, a)) = shared.direct.as_mut() {
        *a = DioAlign { offset: 1, mem: 1 };
    }
    let mut ch = b.open_file_channel().unwrap();
    let data = pattern(31, 3000);
    write_at(&mut ch, 1001, &data, 3, false).unwrap();
    let s = ch.stats();
    assert_eq!((s.direct, s.buffered, s.resubmitted), (1, 1, 1));
    assert!(!b.is_direct());
    assert_eq!(read_at(&mut ch, 1001, 3000, 5), data);
    let s = ch.stats();
    assert_eq!((s.direct, s.buffered, s.resubmitted), (1, 2, 1));
    assert_eq!(t.contents()[1001..4001], data[..]);
}
