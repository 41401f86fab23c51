//! Verify and Copy end to end: what Identify advertises (ONCS, OCFS, MSSRL/MCL/MSRC),
//! the data a Copy moves (overlapping sources and destination included) on RAM over
//! the loopback transport and on a file over NVMe/TCP, and every refusal with its
//! precise status, the destination untouched.

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::{ocfs, oncs, IdentifyNamespace};
use nvmf_common::wire::nvm;
use nvmf_common::wire::status::{cmd_specific, generic, media, Sct, Status};
use nvmf_initiator::command;
use nvmf_initiator::controller::Controller;
use nvmf_initiator::namespace::NsIo;
use nvmf_initiator::transport::tcp::TcpOptions;
use nvmf_initiator::transport::DataDir;
use nvmf_tests::{
    config, connect, connect_to, exec, pattern, ram_backend, start, start_tcp, wrap_ns1,
};

/// The block size of every namespace here (the spec strings' default).
const BS: usize = 512;
/// MDTS of the test target (the config default): Copy's MCL and MSSRL in bytes.
const MAX_IO: usize = 1 << 20;

/// A scratch file of `size` bytes, removed on drop.
struct TempFile(std::path::PathBuf);

impl TempFile {
    fn new(size: u64) -> TempFile {
        let p = std::env::temp_dir().join(format!(
            "nvmf-copy-verify-{}-{:?}.img",
            std::process::id(),
            std::thread::current().id()
        ));
        let f = std::fs::File::create(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        f.set_len(size).unwrap_or_else(|e| panic!("{e}"));
        TempFile(p)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// What a refused Copy sent (name, destination, sources) and the status it must get.
type RefusalCase = (&'static str, u64, Vec<(u64, u32)>, fn(Status) -> bool);

fn status_of(r: Result<(), nvmf_initiator::error::Error>, what: &str) -> Status {
    match r {
        Ok(()) => panic!("{what}: succeeded, expected a refusal"),
        Err(e) => e
            .status()
            .unwrap_or_else(|| panic!("{what}: not an NVMe status: {e}")),
    }
}

fn read(io: &mut NsIo<'_>, lba: u64, blocks: usize) -> Vec<u8> {
    let mut out = vec![0u8; blocks * BS];
    io.read(lba, &mut out)
        .unwrap_or_else(|e| panic!("read {lba}: {e}"));
    out
}

/// Three sources (the third overlapping the first) copied to a destination that
/// overlaps both: the destination gets the sources as they were before the command,
/// in order, and the blocks around it are untouched.
fn copy_moves_the_data(ctrl: &mut Controller) {
    let mut queues = ctrl.take_io_queues();
    let mut io = NsIo::new(ctrl, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let base = pattern(11, 0, 400 * BS);
    io.write(0, &base).unwrap_or_else(|e| panic!("write: {e}"));
    let sources: [(u64, u32); 3] = [(100, 8), (300, 16), (104, 8)];
    let mut want = Vec::new();
    for &(lba, n) in &sources {
        let at = lba as usize * BS;
        want.extend_from_slice(&base[at..at + n as usize * BS]);
    }
    let dest = 102u64;
    io.copy(dest, &sources)
        .unwrap_or_else(|e| panic!("copy: {e}"));
    let back = read(&mut io, dest, want.len() / BS);
    assert_eq!(back, want, "the destination holds the sources as they were");
    let end = dest as usize + want.len() / BS;
    assert_eq!(read(&mut io, 0, dest as usize), base[..dest as usize * BS]);
    assert_eq!(
        read(&mut io, end as u64, 400 - end),
        base[end * BS..],
        "nothing past the destination changed"
    );
    // A Copy of one block onto itself leaves it as it is.
    io.copy(0, &[(0, 1)])
        .unwrap_or_else(|e| panic!("copy onto itself: {e}"));
    assert_eq!(read(&mut io, 0, 1), base[..BS]);
}

#[test]
fn identify_advertises_verify_copy_and_the_copy_limits() {
    let env = start(&config(&["ram:64M"]));
    let ctrl = connect(&env, 1, 32);
    let id = ctrl.id_ctrl();
    assert_ne!(id.oncs & oncs::VERIFY, 0, "ONCS.Verify");
    assert_ne!(id.oncs & oncs::COPY, 0, "ONCS.Copy");
    let raw = ctrl.identify_controller_raw();
    let ocfs_v = nvmf_common::wire::identify::IdentifyController::new_unchecked(raw).ocfs();
    assert_eq!(ocfs_v, ocfs::FORMAT_0, "only descriptor format 0h");
    let page = ctrl
        .identify_namespace(Nsid(1))
        .unwrap_or_else(|e| panic!("identify ns: {e}"));
    let ns = IdentifyNamespace::new_unchecked(&page[..]);
    let blocks = (MAX_IO / BS) as u32;
    assert_eq!(ns.mcl(), blocks, "MCL: MDTS in blocks");
    assert_eq!(u32::from(ns.mssrl()), blocks, "MSSRL: MDTS in blocks");
    assert_eq!(ns.msrc(), 255, "MSRC: all 256 ranges (0-based)");
}

#[test]
fn copy_on_ram_over_loopback() {
    let env = start(&config(&["ram:64M"]));
    let mut ctrl = connect(&env, 1, 32);
    copy_moves_the_data(&mut ctrl);
}

#[test]
fn copy_on_a_file_over_tcp() {
    let file = TempFile::new(64 << 20);
    let env = start_tcp(
        &config(&[&file.0.display().to_string()]),
        TcpOptions::default(),
    );
    let mut ctrl = connect_to(&env.fabric, &env.nqn, 1, 32);
    copy_moves_the_data(&mut ctrl);
}

#[test]
fn copy_refusals_name_the_limit_and_write_nothing() {
    let env = start(&config(&["ram:64M"]));
    let mut ctrl = connect(&env, 1, 32);
    let nblocks = (64 << 20) / BS as u64;
    let mssrl = (MAX_IO / BS) as u32;
    let mut queues = ctrl.take_io_queues();
    {
        let mut io = NsIo::new(&ctrl, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
        let base = pattern(5, 0, 64 * BS);
        io.write(0, &base).unwrap_or_else(|e| panic!("write: {e}"));
        let size_limit = |s: Status| {
            s.is(
                Sct::CommandSpecific,
                cmd_specific::COMMAND_SIZE_LIMIT_EXCEEDED,
            )
        };
        let cases: [RefusalCase; 5] = [
            (
                "a range longer than MSSRL",
                0,
                vec![(1000, mssrl + 1)],
                size_limit,
            ),
            (
                "more blocks in all than MCL",
                0,
                vec![(1000, mssrl / 2 + 1), (5000, mssrl / 2 + 1)],
                size_limit,
            ),
            (
                "a source past the end",
                0,
                vec![(8, 4), (nblocks - 2, 4)],
                |s| s.is(Sct::Generic, generic::LBA_OUT_OF_RANGE),
            ),
            (
                "a destination past the end",
                nblocks - 4,
                vec![(8, 4), (16, 4)],
                |s| s.is(Sct::Generic, generic::LBA_OUT_OF_RANGE),
            ),
            (
                "a destination LBA that wraps",
                u64::MAX - 1,
                vec![(8, 4)],
                |s| s.is(Sct::Generic, generic::LBA_OUT_OF_RANGE),
            ),
        ];
        for (what, dest, ranges, want) in cases {
            let st = status_of(io.copy(dest, &ranges), what);
            assert!(want(st), "{what}: {st:?}");
            assert!(st.dnr, "{what}: DNR");
        }
        assert_eq!(read(&mut io, 0, 64), base, "no refused Copy wrote anything");
    }
    // Descriptor format 1h (16-bit guard PI formats) is not supported.
    let mut sqe = command::copy(Nsid(1), 0, 1, false).unwrap_or_else(|e| panic!("{e}"));
    let mut s = nvmf_common::wire::sqe::Sqe::new_unchecked(&mut sqe[..]);
    nvm::set_copy(&mut s, 0, 1, 1);
    let buf = ctrl.alloc(32).unwrap_or_else(|e| panic!("alloc: {e}"));
    assert!(buf.write_at(0, &command::copy_range_data(&[(8, 1)])));
    let cpl = exec(&mut queues[0], sqe, Some(&buf), DataDir::ToCtrl);
    assert!(
        cpl.status.is(Sct::Generic, generic::INVALID_FIELD) && cpl.status.dnr,
        "{:?}",
        cpl.status
    );
}

#[test]
fn verify_reads_the_range_back_and_reports_what_fails() {
    let env = start(&config(&["ram:64M"]));
    let mut ctrl = connect(&env, 1, 32);
    let nblocks = (64 << 20) / BS as u64;
    let mut queues = ctrl.take_io_queues();
    let mut io = NsIo::new(&ctrl, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    // The whole namespace: two commands of 65536 blocks, each read in MDTS chunks.
    io.verify(0, nblocks)
        .unwrap_or_else(|e| panic!("verify: {e}"));
    drop(io);
    // Past the end (sent raw: our host's own range check would stop it first).
    let sqe = command::verify(Nsid(1), nblocks - 1, 2).unwrap_or_else(|e| panic!("{e}"));
    let st = exec(&mut queues[0], sqe, None, DataDir::None).status;
    assert!(
        st.is(Sct::Generic, generic::LBA_OUT_OF_RANGE) && st.dnr,
        "{st:?}"
    );
    // A backend that cannot read: Verify fails with its read error, as a read would.
    let ctl = wrap_ns1(&env.target.target, ram_backend(64 << 20));
    ctl.fail_reads(true);
    let mut io = NsIo::new(&ctrl, &mut queues[0], Nsid(1)).unwrap_or_else(|e| panic!("{e}"));
    let st = status_of(io.verify(0, 8), "verify on a failing backend");
    assert!(
        st.is(Sct::MediaError, media::UNRECOVERED_READ_ERROR),
        "{st:?}"
    );
    // And a Copy whose source cannot be read writes nothing.
    ctl.fail_reads(false);
    let base = pattern(3, 0, 16 * BS);
    io.write(0, &base).unwrap_or_else(|e| panic!("write: {e}"));
    ctl.fail_reads(true);
    let st = status_of(io.copy(0, &[(8, 8)]), "copy from an unreadable source");
    assert!(
        st.is(Sct::MediaError, media::UNRECOVERED_READ_ERROR),
        "{st:?}"
    );
    ctl.fail_reads(false);
    assert_eq!(read(&mut io, 0, 16), base);
}
