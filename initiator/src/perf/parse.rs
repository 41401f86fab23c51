//! Parsing of fio-style values: sizes ("4k", "1G"), block size ranges ("4k-64k"),
//! durations ("5", "5s", "500ms") and the I/O pattern ("randread").

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::Error;

/// The binary multiplier between size units (fio's default `kb_base=1024`).
const KIB: u64 = 1024;

/// Parses a size: an integer with an optional binary suffix `k`, `m`, `g`, `t`, `p`
/// (any case, optionally followed by `i`, `b` or `ib`), like fio's `bs=4k`.
pub fn parse_size(s: &str) -> Result<u64, Error> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || Error::InvalidArgument(format!("invalid size {s:?} (e.g. 4096, 4k, 1G)"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    let unit = unit.trim().to_ascii_lowercase();
    let unit = unit
        .strip_suffix("ib")
        .or_else(|| unit.strip_suffix('b'))
        .or_else(|| unit.strip_suffix('i'))
        .unwrap_or(&unit);
    let shift = match unit {
        "" => 0,
        "k" => 1,
        "m" => 2,
        "g" => 3,
        "t" => 4,
        "p" => 5,
        _ => return Err(bad()),
    };
    n.checked_mul(KIB.pow(shift)).ok_or_else(bad)
}

/// Parses a duration: an integer with an optional unit `us`, `ms`, `s`, `m`, `h`;
/// a bare number is seconds (fio's `runtime=5`).
pub fn parse_duration(s: &str) -> Result<Duration, Error> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let bad = || Error::InvalidArgument(format!("invalid duration {s:?} (e.g. 5, 5s, 500ms, 2m)"));
    let n: u64 = num.parse().map_err(|_| bad())?;
    const SECS_PER_MIN: u64 = 60;
    const SECS_PER_HOUR: u64 = 3600;
    match unit.trim().to_ascii_lowercase().as_str() {
        "" | "s" | "sec" => Ok(Duration::from_secs(n)),
        "ms" | "msec" => Ok(Duration::from_millis(n)),
        "us" | "usec" => Ok(Duration::from_micros(n)),
        "m" | "min" => n
            .checked_mul(SECS_PER_MIN)
            .map(Duration::from_secs)
            .ok_or_else(bad),
        "h" => n
            .checked_mul(SECS_PER_HOUR)
            .map(Duration::from_secs)
            .ok_or_else(bad),
        _ => Err(bad()),
    }
}

/// A block size or a range of them ("4k" or "4k-64k"): each I/O picks a random
/// multiple of the namespace block size within the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BsSpec {
    pub min: u64,
    pub max: u64,
}

impl BsSpec {
    pub const fn fixed(bs: u64) -> BsSpec {
        BsSpec { min: bs, max: bs }
    }

    pub fn is_range(&self) -> bool {
        self.min != self.max
    }

    /// The range in blocks of `block_size` bytes; both ends must be non-zero
    /// multiples of it.
    pub fn blocks(&self, block_size: u32) -> Result<(u32, u32), Error> {
        let bs = u64::from(block_size.max(1));
        let conv = |v: u64| -> Result<u32, Error> {
            if v == 0 || !v.is_multiple_of(bs) {
                return Err(Error::InvalidArgument(format!(
                    "block size {v} is not a multiple of the namespace's {bs}-byte blocks"
                )));
            }
            u32::try_from(v / bs)
                .map_err(|_| Error::InvalidArgument(format!("block size {v} is too large")))
        };
        Ok((conv(self.min)?, conv(self.max)?))
    }
}

impl FromStr for BsSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        let (a, b) = match s.split_once('-') {
            Some((a, b)) => (parse_size(a)?, parse_size(b)?),
            None => {
                let v = parse_size(s)?;
                (v, v)
            }
        };
        if a == 0 || a > b {
            return Err(Error::InvalidArgument(format!(
                "block size range {s:?}: need 0 < min <= max"
            )));
        }
        Ok(BsSpec { min: a, max: b })
    }
}

impl fmt::Display for BsSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_range() {
            write!(f, "{}-{}", self.min, self.max)
        } else {
            write!(f, "{}", self.min)
        }
    }
}

/// The I/O pattern (fio `rw=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Rw {
    Read,
    Write,
    RandRead,
    RandWrite,
    /// Random reads and writes mixed by `rwmixread`.
    RandRw,
}

impl Rw {
    pub fn is_random(self) -> bool {
        matches!(self, Rw::RandRead | Rw::RandWrite | Rw::RandRw)
    }
    pub fn writes(self) -> bool {
        matches!(self, Rw::Write | Rw::RandWrite | Rw::RandRw)
    }
    pub fn reads(self) -> bool {
        matches!(self, Rw::Read | Rw::RandRead | Rw::RandRw)
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Rw::Read => "read",
            Rw::Write => "write",
            Rw::RandRead => "randread",
            Rw::RandWrite => "randwrite",
            Rw::RandRw => "randrw",
        }
    }
}

impl FromStr for Rw {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.trim().to_ascii_lowercase().as_str() {
            "read" => Ok(Rw::Read),
            "write" => Ok(Rw::Write),
            "randread" => Ok(Rw::RandRead),
            "randwrite" => Ok(Rw::RandWrite),
            "randrw" => Ok(Rw::RandRw),
            other => Err(Error::InvalidArgument(format!(
                "rw {other:?}: one of read, write, randread, randwrite, randrw"
            ))),
        }
    }
}

impl fmt::Display for Rw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Formats a byte count with a binary unit ("4KiB", "1.5GiB").
pub fn format_bytes(v: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = v as f64;
    let mut i = 0;
    while x >= KIB as f64 && i + 1 < UNITS.len() {
        x /= KIB as f64;
        i += 1;
    }
    let unit = UNITS.get(i).copied().unwrap_or("B");
    if x.fract() == 0.0 {
        format!("{x:.0}{unit}")
    } else {
        format!("{x:.1}{unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("64kb").unwrap(), 65536);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size(" 2m ").unwrap(), 2 << 20);
        assert_eq!(parse_size("1t").unwrap(), 1 << 40);
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("-4k").is_err());
        assert!(parse_size("99999999999p").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("1.5s").is_err());
    }

    #[test]
    fn bs_ranges() {
        assert_eq!("4k".parse::<BsSpec>().unwrap(), BsSpec::fixed(4096));
        let r: BsSpec = "4k-64k".parse().unwrap();
        assert_eq!((r.min, r.max), (4096, 65536));
        assert!(r.is_range());
        assert_eq!(r.to_string(), "4096-65536");
        assert_eq!(r.blocks(512).unwrap(), (8, 128));
        assert_eq!(r.blocks(4096).unwrap(), (1, 16));
        assert!("64k-4k".parse::<BsSpec>().is_err());
        assert!("0".parse::<BsSpec>().is_err());
        assert!(BsSpec::fixed(1000).blocks(512).is_err());
        assert!(BsSpec::fixed(512).blocks(4096).is_err());
    }

    #[test]
    fn rw_names() {
        for rw in [Rw::Read, Rw::Write, Rw::RandRead, Rw::RandWrite, Rw::RandRw] {
            assert_eq!(rw.as_str().parse::<Rw>().unwrap(), rw);
        }
        assert!("rw".parse::<Rw>().is_err());
        assert!(Rw::RandRw.reads() && Rw::RandRw.writes() && Rw::RandRw.is_random());
        assert!(!Rw::Read.writes() && !Rw::Write.is_random());
    }

    #[test]
    fn byte_formatting() {
        assert_eq!(format_bytes(4096), "4KiB");
        assert_eq!(format_bytes(1536), "1.5KiB");
        assert_eq!(format_bytes(100), "100B");
        assert_eq!(format_bytes(1 << 30), "1GiB");
    }
}
