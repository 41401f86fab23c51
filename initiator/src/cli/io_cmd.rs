//! `read` and `write`: blocks to a hexdump or a file, and from a file or a byte
//! pattern, over one I/O queue.

use std::io::Write as _;
use std::path::Path;

use nvmf_initiator::error::Error;

use super::session::with_ns;
use super::{CliError, CliResult, ReadArgs, WriteArgs};

/// Bytes per hexdump line.
const HEXDUMP_WIDTH: usize = 16;

/// `hexdump -C` style: offset, 16 hex bytes, ASCII; repeated lines become `*`.
pub fn hexdump(data: &[u8], base: u64) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let mut prev: Option<&[u8]> = None;
    let mut starred = false;
    for (i, line) in data.chunks(HEXDUMP_WIDTH).enumerate() {
        let off = base + (i * HEXDUMP_WIDTH) as u64;
        if prev == Some(line) && line.len() == HEXDUMP_WIDTH {
            if !starred {
                s.push_str("*\n");
                starred = true;
            }
            continue;
        }
        starred = false;
        prev = Some(line);
        let _ = write!(s, "{off:08x} ");
        for j in 0..HEXDUMP_WIDTH {
            if j == HEXDUMP_WIDTH / 2 {
                s.push(' ');
            }
            match line.get(j) {
                Some(b) => {
                    let _ = write!(s, " {b:02x}");
                }
                None => s.push_str("   "),
            }
        }
        s.push_str("  |");
        for &b in line {
            s.push(if b.is_ascii_graphic() || b == b' ' {
                b as char
            } else {
                '.'
            });
        }
        s.push_str("|\n");
    }
    let _ = writeln!(s, "{:08x}", base + data.len() as u64);
    s
}

pub(super) fn read(a: &ReadArgs) -> CliResult {
    if a.count == 0 {
        return Err(CliError::Usage("--count must be at least 1".into()));
    }
    let (data, bs) = with_ns(&a.conn, a.nsid, |io| {
        let bs = u64::from(io.info().block_size);
        let len = a
            .count
            .checked_mul(bs)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or_else(|| Error::InvalidArgument("--count is too large".into()))?;
        let mut buf = vec![0u8; len];
        io.read(a.lba, &mut buf)?;
        Ok((buf, bs))
    })?;
    match &a.output {
        Some(p) => std::fs::write(p, &data)?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(hexdump(&data, a.lba * bs).as_bytes())?;
        }
    }
    Ok(())
}

/// The bytes `write` sends: the input (or pattern) zero-padded to `count` blocks.
pub(super) fn write_payload(
    input: Option<&Path>,
    pattern: Option<u8>,
    count: Option<u64>,
    bs: u64,
) -> Result<Vec<u8>, Error> {
    let src = match (input, pattern) {
        (Some(p), _) => std::fs::read(p)?,
        (None, Some(_)) | (None, None) => Vec::new(),
    };
    let blocks = match count {
        Some(c) => c,
        None if input.is_some() => (src.len() as u64).div_ceil(bs).max(1),
        None => 1,
    };
    if blocks == 0 {
        return Err(Error::InvalidArgument("--count must be at least 1".into()));
    }
    let len = blocks
        .checked_mul(bs)
        .and_then(|l| usize::try_from(l).ok())
        .ok_or_else(|| Error::InvalidArgument("--count is too large".into()))?;
    if src.len() > len {
        return Err(Error::InvalidArgument(format!(
            "the input has {} bytes, more than {blocks} blocks of {bs}",
            src.len()
        )));
    }
    let mut data = match (input, pattern) {
        (None, Some(b)) => vec![b; len],
        _ => vec![0u8; len],
    };
    if let Some(dst) = data.get_mut(..src.len()) {
        dst.copy_from_slice(&src);
    }
    Ok(data)
}

pub(super) fn write(a: &WriteArgs) -> CliResult {
    if a.input.is_none() && a.pattern.is_none() {
        return Err(CliError::Usage(
            "write needs --input FILE or --pattern BYTE".into(),
        ));
    }
    with_ns(&a.conn, a.nsid, |io| {
        let bs = u64::from(io.info().block_size);
        let data = write_payload(a.input.as_deref(), a.pattern, a.count, bs)?;
        io.write(a.lba, &data)?;
        io.flush()
    })?;
    Ok(())
}
