//! nvme-cli's `compare` (NVM Compare of blocks against a file or stdin) and `ns-descs`
//! (the Namespace Identification Descriptor list) for a userspace host. nvme-cli's
//! `-n`/`-s` are connection flags here, so the namespace and first block are
//! `--nsid`/`--start-block` (long only).

use std::io::{Read, Write as _};
use std::path::PathBuf;

use clap::Args;

use nvmf_common::types::Nsid;
use nvmf_common::wire::identify::IDENTIFY_LEN;
use nvmf_initiator::command;
use nvmf_initiator::error::Error;

use super::admin_cmd::with_admin_dev;
use super::log_cmd::LogOutput;
use super::log_print::{format_ns_descs, ns_descs_json};
use super::session::with_ns;
use super::{print_json, CliResult, ConnArgs, OutputFormat};

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    # compare blocks 0-7 of namespace 1 with a file (block count is 0-based)\n  \
    nvmf-initiator compare -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --start-block 0 -c 7 -d expected.bin\n  \
    # 4 KiB from stdin at block 16, the block count worked out from --data-size\n  \
    nvmf-initiator compare -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --start-block 16 -z 4096 < expected.bin\n\n\
    A miscompare fails with the NVMe status Compare Failure (exit code 1).")]
pub struct CompareArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long = "start-block", default_value_t = 0)]
    pub start_block: u64,
    /// Blocks, 0-based as in nvme-cli (0 = one block).
    #[arg(short = 'c', long = "block-count")]
    pub block_count: Option<u16>,
    /// Bytes of data to compare (rounded up to whole blocks).
    #[arg(short = 'z', long = "data-size")]
    pub data_size: Option<u64>,
    /// The expected data (default: stdin); a shorter file is padded with zeros.
    #[arg(short = 'd', long = "data")]
    pub data: Option<PathBuf>,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator ns-descs -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 --nsid 1\n  \
    nvmf-initiator -v ns-descs -t loopback --namespace ram:64M\n  \
    nvmf-initiator ns-descs -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 -o json")]
pub struct NsDescsArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    #[command(flatten)]
    pub out: LogOutput,
}

/// nvme-cli's sizing of an I/O command: the bytes to transfer and the 0-based block
/// count, from `--block-count`, `--data-size` and the block size (`submit_io`). A data
/// size smaller than the blocks asked for is rounded up (with nvme-cli's note).
pub fn compare_extent(
    block_count: Option<u16>,
    data_size: Option<u64>,
    block_size: u64,
) -> Result<(u64, u16), Error> {
    let data_size = match (data_size, block_count) {
        (Some(z), _) if z > 0 => z,
        (_, Some(c)) => (u64::from(c) + 1) * block_size,
        _ => {
            return Err(Error::InvalidArgument(
                "data size not provided: give --block-count or --data-size".into(),
            ))
        }
    };
    let asked = (u64::from(block_count.unwrap_or(0)) + 1) * block_size;
    if data_size < asked {
        eprintln!("Rounding data size to fit block count ({asked} bytes)");
    }
    let nblocks = match block_count {
        Some(c) => c,
        None => {
            let blocks = data_size.max(asked).div_ceil(block_size);
            u16::try_from(blocks - 1).map_err(|_| {
                Error::InvalidArgument(format!(
                    "--data-size {data_size}: more than 65536 blocks of {block_size} bytes"
                ))
            })?
        }
    };
    Ok(((u64::from(nblocks) + 1) * block_size, nblocks))
}

/// Up to `len` bytes of `src`, zero-padded to `len`.
fn read_expected(src: impl Read, len: u64) -> Result<Vec<u8>, Error> {
    let cap = usize::try_from(len)
        .map_err(|_| Error::InvalidArgument(format!("{len} bytes do not fit in memory")))?;
    let mut buf = Vec::with_capacity(cap);
    src.take(len).read_to_end(&mut buf)?;
    buf.resize(cap, 0);
    Ok(buf)
}

pub(super) fn compare(a: &CompareArgs) -> CliResult {
    let file = a.data.as_ref().map(std::fs::File::open).transpose()?;
    with_ns(&a.conn, a.nsid, |io| {
        let bs = u64::from(io.info().block_size);
        let (len, _) = compare_extent(a.block_count, a.data_size, bs)?;
        let expected = match file {
            Some(f) => read_expected(f, len)?,
            None => read_expected(std::io::stdin().lock(), len)?,
        };
        io.compare(a.start_block, &expected)
    })?;
    eprintln!("compare: Success");
    Ok(())
}

pub(super) fn ns_descs(a: &NsDescsArgs, verbose: bool) -> CliResult {
    let page = with_admin_dev(&a.conn, |c, _| {
        c.admin_read(command::identify_ns_descriptors(Nsid(a.nsid)), IDENTIFY_LEN)
    })?;
    if a.out.raw_binary {
        std::io::stdout().write_all(&page)?;
        return Ok(());
    }
    match a.out.output_format {
        OutputFormat::Normal => print!("{}", format_ns_descs(&page, a.nsid, verbose)),
        OutputFormat::Json => print_json(&ns_descs_json(&page))?,
    }
    Ok(())
}
