//! nvme-cli's `copy` and `verify`, and `compare-write`: a fused Compare and Write,
//! which nvme-cli cannot send (each of its commands is one submission). nvme-cli's
//! `-n`/`-s`/`-d` are connection flags here, so namespace, first block and
//! destination are long options only.

use std::path::PathBuf;

use clap::Args;

use nvmf_initiator::error::Error;

use super::session::with_ns;
use super::{CliError, CliResult, ConnArgs};

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    # blocks 0-7 and 100-103 to block 500 (block counts 0-based, as nvme-cli's)\n  \
    nvmf-initiator copy -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --sdlba 500 --slbs 0,100 --blocks 7,3")]
pub struct CopyArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First destination block.
    #[arg(long)]
    pub sdlba: u64,
    /// First block of each source range, comma-separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub slbs: Vec<u64>,
    /// Blocks of each source range, comma-separated, 0-based as in nvme-cli.
    #[arg(long, value_delimiter = ',', required = true)]
    pub blocks: Vec<u16>,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    nvmf-initiator verify -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --start-block 0 -c 255")]
pub struct VerifyArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long = "start-block", default_value_t = 0)]
    pub start_block: u64,
    /// Blocks, 0-based as in nvme-cli (0 = one block).
    #[arg(short = 'c', long = "block-count")]
    pub block_count: u16,
}

#[derive(Debug, Args)]
#[command(after_help = "Examples:\n  \
    # blocks 16.. become new.bin only if they hold old.bin (atomically)\n  \
    nvmf-initiator compare-write -t tcp -a 192.168.1.10 -n nqn.2024-01.io.example:disk1 \\\n      \
    --start-block 16 --expected old.bin --data new.bin\n\n\
    Both files are the same whole number of blocks. A miscompare writes nothing and\n\
    fails with Compare Failure (exit code 1); both halves' statuses are printed.")]
pub struct CompareWriteArgs {
    #[command(flatten)]
    pub conn: ConnArgs,
    #[arg(long, default_value_t = 1)]
    pub nsid: u32,
    /// First logical block.
    #[arg(long = "start-block", default_value_t = 0)]
    pub start_block: u64,
    /// What the blocks must hold.
    #[arg(long)]
    pub expected: PathBuf,
    /// What replaces it.
    #[arg(long)]
    pub data: PathBuf,
}

pub(super) fn copy(a: &CopyArgs) -> CliResult {
    if a.slbs.len() != a.blocks.len() {
        return Err(CliError::Usage(
            "--slbs and --blocks need the same number of values".into(),
        ));
    }
    let ranges: Vec<(u64, u32)> = a
        .slbs
        .iter()
        .zip(&a.blocks)
        .map(|(&s, &n)| (s, u32::from(n) + 1))
        .collect();
    with_ns(&a.conn, a.nsid, |io| io.copy(a.sdlba, &ranges))?;
    println!("NVMe Copy: success");
    Ok(())
}

pub(super) fn verify(a: &VerifyArgs) -> CliResult {
    let n = u64::from(a.block_count) + 1;
    with_ns(&a.conn, a.nsid, |io| io.verify(a.start_block, n))?;
    println!("NVME Verify Success");
    Ok(())
}

pub(super) fn compare_write(a: &CompareWriteArgs) -> CliResult {
    let expected = std::fs::read(&a.expected)
        .map_err(|e| CliError::Usage(format!("{}: {e}", a.expected.display())))?;
    let data = std::fs::read(&a.data)
        .map_err(|e| CliError::Usage(format!("{}: {e}", a.data.display())))?;
    let (cmp, wr) = with_ns(&a.conn, a.nsid, |io| {
        io.compare_and_write(a.start_block, &expected, &data)
    })?;
    println!("compare: {}", cmp.name());
    println!("write: {}", wr.name());
    if !cmp.is_success() {
        return Err(Error::nvme("Compare (fused)", cmp).into());
    }
    if !wr.is_success() {
        return Err(Error::nvme("Write (fused)", wr).into());
    }
    Ok(())
}
