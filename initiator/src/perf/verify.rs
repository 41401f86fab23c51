//! Data verification for `perf --verify`: every written logical block starts with a
//! header naming it (magic, LBA, run seed, write generation) and the rest of the block
//! is a pattern derived from that header, so a read can tell a correct block from a
//! stale, misplaced, torn or never-written one.
//!
//! ```text
//! 0..8   magic "NVMFVRFY"      8..16  LBA       16..24 seed
//! 24..28 generation (u32)      28     checksum kind (VerifyAlg)   29..32 zero
//! 32..32+D  checksum of the rest of the block (D = 0 for `pattern`)
//! ..     splitmix64(lba, seed, gen) stream
//! ```
//!
//! fio's `--verify=ALG` names choose the checksum ([`VerifyAlg`]): crc32c, crc32, md5,
//! sha256, sha512; `meta` and `pattern` (and a bare `--verify`) rely on the header and
//! the pattern alone. The checksum covers the header and the pattern, so a read checks
//! both the checksum and, as always, that the pattern is the one this block must hold.

use md5::Md5;
use sha2::{Digest, Sha256, Sha512};

use super::rng::splitmix64;

/// The checksum a block carries (fio's `--verify` names).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(u8)]
pub enum VerifyAlg {
    /// Header and pattern only (fio: `meta`, `pattern`; a bare `--verify`).
    #[default]
    Pattern = 0,
    Crc32c = 1,
    Crc32 = 2,
    Md5 = 3,
    Sha256 = 4,
    Sha512 = 5,
}

impl VerifyAlg {
    /// Parses fio's names.
    pub fn from_fio(s: &str) -> Option<VerifyAlg> {
        Some(match s {
            "" | "1" | "meta" | "pattern" => VerifyAlg::Pattern,
            "crc32c" | "crc32c-intel" => VerifyAlg::Crc32c,
            "crc32" => VerifyAlg::Crc32,
            "md5" => VerifyAlg::Md5,
            "sha256" => VerifyAlg::Sha256,
            "sha512" => VerifyAlg::Sha512,
            _ => return None,
        })
    }

    /// The names accepted, for error messages.
    pub const NAMES: &'static str =
        "crc32c, crc32c-intel, crc32, md5, sha256, sha512, meta, pattern";

    fn digest_len(self) -> usize {
        match self {
            VerifyAlg::Pattern => 0,
            VerifyAlg::Crc32c | VerifyAlg::Crc32 => 4,
            VerifyAlg::Md5 => 16,
            VerifyAlg::Sha256 => 32,
            VerifyAlg::Sha512 => 64,
        }
    }

    fn from_u8(v: u8) -> Option<VerifyAlg> {
        [
            VerifyAlg::Pattern,
            VerifyAlg::Crc32c,
            VerifyAlg::Crc32,
            VerifyAlg::Md5,
            VerifyAlg::Sha256,
            VerifyAlg::Sha512,
        ]
        .into_iter()
        .find(|a| *a as u8 == v)
    }

    /// The checksum of `head` and `rest` (the block without the checksum field).
    fn digest(self, head: &[u8], rest: &[u8]) -> Vec<u8> {
        match self {
            VerifyAlg::Pattern => Vec::new(),
            VerifyAlg::Crc32c => {
                let mut h = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
                h.update(head);
                h.update(rest);
                // A 32-bit CRC: the u64 holds it in its low half.
                (h.finalize() as u32).to_le_bytes().to_vec()
            }
            VerifyAlg::Crc32 => {
                let mut h = crc32fast::Hasher::new();
                h.update(head);
                h.update(rest);
                h.finalize().to_le_bytes().to_vec()
            }
            VerifyAlg::Md5 => Md5::new()
                .chain_update(head)
                .chain_update(rest)
                .finalize()
                .to_vec(),
            VerifyAlg::Sha256 => Sha256::new()
                .chain_update(head)
                .chain_update(rest)
                .finalize()
                .to_vec(),
            VerifyAlg::Sha512 => Sha512::new()
                .chain_update(head)
                .chain_update(rest)
                .finalize()
                .to_vec(),
        }
    }
}

/// Marks a block written by perf.
pub const MAGIC: u64 = u64::from_le_bytes(*b"NVMFVRFY");
/// Header bytes at the start of each block.
pub const HEADER_LEN: usize = 32;
/// Bytes produced per pattern step.
const WORD: usize = 8;

mod off {
    use core::ops::Range;
    pub const MAGIC: Range<usize> = 0..8;
    pub const LBA: Range<usize> = 8..16;
    pub const SEED: Range<usize> = 16..24;
    pub const GEN: Range<usize> = 24..28;
    pub const ALG: usize = 28;
}

/// Why a block failed verification.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VerifyFailure {
    pub lba: u64,
    pub reason: String,
}

impl std::fmt::Display for VerifyFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LBA {}: {}", self.lba, self.reason)
    }
}

fn pattern_seed(lba: u64, seed: u64, gen: u32) -> u64 {
    let mut s = lba ^ seed.rotate_left(17) ^ (u64::from(gen) << 40);
    splitmix64(&mut s)
}

fn read_u64(b: &[u8], r: core::ops::Range<usize>) -> u64 {
    b.get(r)
        .and_then(|s| <[u8; 8]>::try_from(s).ok())
        .map_or(0, u64::from_le_bytes)
}

fn read_u32(b: &[u8], r: core::ops::Range<usize>) -> u32 {
    b.get(r)
        .and_then(|s| <[u8; 4]>::try_from(s).ok())
        .map_or(0, u32::from_le_bytes)
}

/// Stamps every `block_size` block of `buf` (whose first block is `first_lba`), with
/// the checksum `alg`.
pub fn stamp(
    buf: &mut [u8],
    first_lba: u64,
    block_size: usize,
    seed: u64,
    gen: u32,
    alg: VerifyAlg,
) {
    let dlen = alg.digest_len();
    if block_size < HEADER_LEN + dlen {
        return;
    }
    for (i, block) in buf.chunks_exact_mut(block_size).enumerate() {
        let lba = first_lba + i as u64;
        let (head, body) = block.split_at_mut(HEADER_LEN);
        head.fill(0);
        head[off::MAGIC].copy_from_slice(&MAGIC.to_le_bytes());
        head[off::LBA].copy_from_slice(&lba.to_le_bytes());
        head[off::SEED].copy_from_slice(&seed.to_le_bytes());
        head[off::GEN].copy_from_slice(&gen.to_le_bytes());
        head[off::ALG] = alg as u8;
        let (sum, rest) = body.split_at_mut(dlen);
        let mut s = pattern_seed(lba, seed, gen);
        for w in rest.chunks_mut(WORD) {
            let v = splitmix64(&mut s).to_le_bytes();
            let n = w.len();
            w.copy_from_slice(&v[..n]);
        }
        sum.copy_from_slice(&alg.digest(head, rest));
    }
}

/// Checks every block of `buf`: header magic, LBA, seed, generation (when `expect_gen`
/// is given; otherwise any generation whose pattern matches), and the pattern.
/// Returns the first failure.
pub fn check(
    buf: &[u8],
    first_lba: u64,
    block_size: usize,
    seed: u64,
    expect_gen: Option<u32>,
) -> Result<(), VerifyFailure> {
    if block_size < HEADER_LEN {
        return Ok(());
    }
    for (i, block) in buf.chunks_exact(block_size).enumerate() {
        let lba = first_lba + i as u64;
        let fail = |reason: String| Err(VerifyFailure { lba, reason });
        let magic = read_u64(block, off::MAGIC);
        if magic != MAGIC {
            return fail(if block.iter().all(|&b| b == 0) {
                "block is all zeroes (never written?)".into()
            } else {
                format!("bad magic {magic:#018x}")
            });
        }
        let got_lba = read_u64(block, off::LBA);
        if got_lba != lba {
            return fail(format!("block carries LBA {got_lba} (misplaced write)"));
        }
        let got_seed = read_u64(block, off::SEED);
        if got_seed != seed {
            return fail(format!("written by another run (seed {got_seed:#x})"));
        }
        let gen = read_u32(block, off::GEN);
        if let Some(want) = expect_gen {
            if gen != want {
                return fail(format!("generation {gen}, expected {want} (stale data)"));
            }
        }
        let Some(alg) = block.get(off::ALG).copied().and_then(VerifyAlg::from_u8) else {
            return fail("unknown checksum kind in the header".into());
        };
        let start = HEADER_LEN + alg.digest_len();
        let (head, rest) = (
            block.get(..HEADER_LEN).unwrap_or(&[]),
            block.get(start..).unwrap_or(&[]),
        );
        if alg != VerifyAlg::Pattern
            && block.get(HEADER_LEN..start) != Some(&alg.digest(head, rest)[..])
        {
            return fail(format!("{alg:?} checksum mismatch"));
        }
        let mut s = pattern_seed(lba, seed, gen);
        for (j, w) in rest.chunks(WORD).enumerate() {
            let v = splitmix64(&mut s).to_le_bytes();
            if v.get(..w.len()) != Some(w) {
                return fail(format!(
                    "pattern mismatch at byte {} of the block",
                    start + j * WORD
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_then_check() {
        let bs = 512;
        let mut buf = vec![0u8; 4 * bs];
        stamp(&mut buf, 100, bs, 0xABCD, 7, VerifyAlg::Pattern);
        assert_eq!(&buf[0..8], b"NVMFVRFY");
        assert_eq!(&buf[bs + 8..bs + 16], &101u64.to_le_bytes());
        assert_eq!(check(&buf, 100, bs, 0xABCD, Some(7)), Ok(()));
        assert_eq!(check(&buf, 100, bs, 0xABCD, None), Ok(()));
        // 4 KiB blocks too.
        let mut big = vec![0u8; 2 * 4096];
        stamp(&mut big, 0, 4096, 1, 1, VerifyAlg::Pattern);
        assert!(check(&big, 0, 4096, 1, Some(1)).is_ok());
    }

    #[test]
    fn every_checksum_kind_stamps_and_catches_a_flipped_byte() {
        for name in ["crc32c", "crc32", "md5", "sha256", "sha512", "meta"] {
            let alg = VerifyAlg::from_fio(name).unwrap();
            let mut buf = vec![0u8; 2 * 512];
            stamp(&mut buf, 7, 512, 9, 2, alg);
            assert_eq!(check(&buf, 7, 512, 9, Some(2)), Ok(()), "{name}");
            buf[512 + 100] ^= 1;
            let e = check(&buf, 7, 512, 9, Some(2)).unwrap_err();
            assert_eq!(e.lba, 8, "{name}");
            let want = if alg == VerifyAlg::Pattern {
                "pattern"
            } else {
                "checksum"
            };
            assert!(e.reason.contains(want), "{name}: {e}");
        }
        assert_eq!(VerifyAlg::from_fio("xxhash"), None);
    }

    #[test]
    fn detects_each_kind_of_corruption() {
        let bs = 512;
        let mut buf = vec![0u8; 2 * bs];
        stamp(&mut buf, 10, bs, 5, 3, VerifyAlg::Pattern);
        let e = check(&buf, 10, bs, 5, Some(4)).unwrap_err();
        assert_eq!(e.lba, 10);
        assert!(e.reason.contains("stale"));
        let e = check(&buf, 11, bs, 5, None).unwrap_err();
        assert!(e.reason.contains("misplaced"));
        let e = check(&buf, 10, bs, 6, None).unwrap_err();
        assert!(e.reason.contains("another run"));
        let mut torn = buf.clone();
        torn[bs + 300] ^= 0xFF;
        let e = check(&torn, 10, bs, 5, Some(3)).unwrap_err();
        assert_eq!(e.lba, 11);
        assert!(e.reason.contains("pattern mismatch at byte 296"), "{e}");
        let zeros = vec![0u8; bs];
        assert!(check(&zeros, 0, bs, 5, None)
            .unwrap_err()
            .reason
            .contains("zeroes"));
        let mut junk = vec![0u8; bs];
        junk[0] = 1;
        assert!(check(&junk, 0, bs, 5, None)
            .unwrap_err()
            .reason
            .contains("magic"));
    }
}
