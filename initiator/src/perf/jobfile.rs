//! fio job files for `perf --job-file`: the INI text parsed into job sections with the
//! options perf supports, each option checked where it stands.
//!
//! Owned by the host library; pure (text in, sections out), so the CLI decides how the
//! command line overrides a file. The format is fio's: `[section]` headers, `key=value`
//! or bare `key` lines, whole-line comments starting with `;` or `#`. A `[global]`
//! section applies to the job sections after it (several `[global]`s accumulate, as in
//! fio). Options perf does not implement are refused by name with their line number
//! rather than ignored: a job file that asks for something perf would not do must not
//! produce figures that look as if it had.
//!
//! Several job sections run one after another, each on its own connection and with
//! its own report, as fio runs them when every section has `stonewall`. fio would run
//! sections without `stonewall` in parallel; perf does not, because a run owns the
//! controller's I/O queues and reports one set of options, so mixing differently
//! configured jobs in one measurement would need a second report shape for little
//! gain. [`JobSection::stonewall`] records whether the file asked for that order, so
//! the CLI can say when it differs from fio's.

use std::time::Duration;

use crate::error::Error;

use super::parse::{parse_duration, parse_size, BsSpec, Rw};
use super::verify::VerifyAlg;

/// The section fio applies to the job sections after it.
const GLOBAL: &str = "global";

/// Options given in a job file (or on the command line); `None`: not given there.
/// perf's `runtime` is always time-based; fio's `time_based` only matters where `size`
/// alone would mean one pass (see the CLI).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobSettings {
    pub rw: Option<Rw>,
    pub rwmixread: Option<u8>,
    pub bs: Option<BsSpec>,
    pub iodepth: Option<u32>,
    pub numjobs: Option<u32>,
    pub runtime: Option<Duration>,
    /// fio's `time_based`: run for `runtime` even when `size` is given.
    pub time_based: Option<bool>,
    pub size: Option<u64>,
    pub ramp_time: Option<Duration>,
    /// `Some(None)`: `verify=0` (off, fio's "none").
    pub verify: Option<Option<VerifyAlg>>,
    pub randseed: Option<u64>,
    /// Ours: the namespace.
    pub nsid: Option<u32>,
    /// fio's `cpus_allowed` (a cpu list), taken as perf's `--cpus`: one polling thread
    /// pinned to each listed CPU, rather than fio's every job allowed on all of them.
    pub cpus: Option<super::cpus::CpuList>,
}

impl JobSettings {
    /// Each option from `self` when given there, else from `lower`.
    pub fn or(self, lower: &JobSettings) -> JobSettings {
        JobSettings {
            rw: self.rw.or(lower.rw),
            rwmixread: self.rwmixread.or(lower.rwmixread),
            bs: self.bs.or(lower.bs),
            iodepth: self.iodepth.or(lower.iodepth),
            numjobs: self.numjobs.or(lower.numjobs),
            runtime: self.runtime.or(lower.runtime),
            time_based: self.time_based.or(lower.time_based),
            size: self.size.or(lower.size),
            ramp_time: self.ramp_time.or(lower.ramp_time),
            verify: self.verify.or(lower.verify),
            randseed: self.randseed.or(lower.randseed),
            nsid: self.nsid.or(lower.nsid),
            cpus: self.cpus.or_else(|| lower.cpus.clone()),
        }
    }

    /// Sets option `key` from `value` (`None`: a bare `key` line). `Ok(false)` when perf
    /// has no such option.
    fn set(&mut self, key: &str, value: Option<&str>) -> Result<bool, String> {
        let v = || value.ok_or_else(|| format!("{key} needs a value ({key}=...)"));
        let num = |s: &str| -> Result<u64, String> {
            s.trim()
                .parse()
                .map_err(|_| format!("{key}={s}: not a whole number"))
        };
        let err = |e: Error| match e {
            Error::InvalidArgument(m) => m,
            other => other.to_string(),
        };
        match key {
            "rw" | "readwrite" => self.rw = Some(v()?.parse().map_err(err)?),
            "rwmixread" => {
                let p = num(v()?)?;
                if p > 100 {
                    return Err(format!("rwmixread={p}: a percentage, 0..=100"));
                }
                self.rwmixread = u8::try_from(p).ok();
            }
            "bs" | "blocksize" => self.bs = Some(v()?.parse().map_err(err)?),
            "iodepth" => self.iodepth = Some(small(key, num(v()?)?)?),
            "numjobs" => self.numjobs = Some(small(key, num(v()?)?)?),
            "runtime" => self.runtime = Some(parse_duration(v()?).map_err(err)?),
            "time_based" => self.time_based = Some(flag(key, value)?),
            "size" => self.size = Some(parse_size(v()?).map_err(err)?),
            "ramp_time" => self.ramp_time = Some(parse_duration(v()?).map_err(err)?),
            "verify" => {
                let s = v()?.trim();
                self.verify = Some(match s {
                    "0" | "none" => None,
                    _ => Some(
                        VerifyAlg::from_fio(s)
                            .ok_or_else(|| format!("verify={s}: one of 0, {}", VerifyAlg::NAMES))?,
                    ),
                });
            }
            "randseed" => self.randseed = Some(num(v()?)?),
            "nsid" => self.nsid = Some(small(key, num(v()?)?)?),
            "cpus_allowed" => self.cpus = Some(super::cpus::parse(v()?).map_err(err)?),
            _ => return Ok(false),
        }
        Ok(true)
    }
}

fn small(key: &str, n: u64) -> Result<u32, String> {
    u32::try_from(n).map_err(|_| format!("{key}={n}: too large"))
}

/// fio's boolean options: a bare key or `=1` is on, `=0` off.
fn flag(key: &str, value: Option<&str>) -> Result<bool, String> {
    match value.map(str::trim) {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(v) => Err(format!("{key}={v}: 0 or 1")),
    }
}

/// One job section with `[global]` applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSection {
    pub name: String,
    /// The line of its `[name]` header.
    pub line: usize,
    pub settings: JobSettings,
    /// The section (or a `[global]` before it) has `stonewall`: it waits for the ones
    /// before it, which is how perf runs every section anyway.
    pub stonewall: bool,
}

/// Where options go while parsing.
enum Current {
    Nothing,
    Global,
    Job(JobSection),
}

/// Parses fio job file `text` (`file` names it in errors, as `FILE:LINE: ...`).
pub fn parse_job_file(text: &str, file: &str) -> Result<Vec<JobSection>, Error> {
    let at = |line: usize, m: String| Error::InvalidArgument(format!("{file}:{line}: {m}"));
    let mut global = JobSettings::default();
    let mut global_stonewall = false;
    let mut jobs = Vec::new();
    let mut cur = Current::Nothing;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with(';') || l.starts_with('#') {
            continue;
        }
        if let Some(h) = l.strip_prefix('[') {
            let name = h
                .strip_suffix(']')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| at(line, format!("bad section header {l:?}")))?;
            if let Current::Job(j) = std::mem::replace(&mut cur, Current::Nothing) {
                jobs.push(j);
            }
            cur = if name == GLOBAL {
                Current::Global
            } else {
                Current::Job(JobSection {
                    name: name.to_owned(),
                    line,
                    // The [global] options so far; the section's own lines override.
                    settings: global.clone(),
                    stonewall: global_stonewall,
                })
            };
            continue;
        }
        let (key, value) = match l.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v.trim())),
            None => (l, None),
        };
        let (settings, stonewall) = match &mut cur {
            Current::Nothing => {
                return Err(at(line, format!("option {key:?} before any [section]")))
            }
            Current::Global => (&mut global, &mut global_stonewall),
            Current::Job(j) => (&mut j.settings, &mut j.stonewall),
        };
        match key {
            // fio's ordering options: perf runs the sections in order in any case.
            "stonewall" | "wait_for_previous" => {
                *stonewall = flag(key, value).map_err(|m| at(line, m))?
            }
            // A job's name and description label it; perf names it by its section.
            "name" | "description" => {}
            _ => {
                if !settings.set(key, value).map_err(|m| at(line, m))? {
                    return Err(at(line, format!("option {key:?} is not supported by perf")));
                }
            }
        }
    }
    if let Current::Job(j) = cur {
        jobs.push(j);
    }
    if jobs.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{file}: no job section (only [global] or nothing)"
        )));
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\
; a comment
# another
[global]
rw=randread
bs=4k-16k
iodepth=16
runtime=2s
randseed=7

[seq-write]
rw=write
blocksize=8k
size=16M
numjobs=2
verify=crc32c

[mixed]
stonewall
readwrite=randrw
rwmixread=70
time_based
ramp_time=500ms
nsid=2
verify=0
";

    #[test]
    fn good_file_with_global_and_two_sections() {
        let jobs = parse_job_file(GOOD, "good.fio").unwrap();
        assert_eq!(jobs.len(), 2);
        let (a, b) = (&jobs[0], &jobs[1]);
        assert_eq!(
            (a.name.as_str(), a.line, a.stonewall),
            ("seq-write", 10, false)
        );
        assert_eq!((b.name.as_str(), b.line, b.stonewall), ("mixed", 17, true));
        assert_eq!(
            a.settings,
            JobSettings {
                rw: Some(Rw::Write),
                bs: Some(BsSpec::fixed(8192)),
                iodepth: Some(16),
                numjobs: Some(2),
                runtime: Some(Duration::from_secs(2)),
                size: Some(16 << 20),
                verify: Some(Some(VerifyAlg::Crc32c)),
                randseed: Some(7),
                ..JobSettings::default()
            }
        );
        assert_eq!(b.settings.rw, Some(Rw::RandRw));
        assert_eq!(
            b.settings.bs,
            Some(BsSpec {
                min: 4096,
                max: 16384
            })
        );
        assert_eq!(b.settings.rwmixread, Some(70));
        assert_eq!(b.settings.time_based, Some(true));
        assert_eq!(b.settings.ramp_time, Some(Duration::from_millis(500)));
        assert_eq!(b.settings.nsid, Some(2));
        assert_eq!(b.settings.verify, Some(None), "verify=0 turns it off");
    }

    #[test]
    fn global_reaches_only_the_sections_after_it() {
        let jobs = parse_job_file("[a]\n[global]\niodepth=4\nstonewall\n[b]\n", "f").unwrap();
        assert_eq!(jobs[0].settings.iodepth, None);
        assert_eq!(jobs[1].settings.iodepth, Some(4));
        assert!(!jobs[0].stonewall && jobs[1].stonewall);
    }

    fn err(text: &str) -> String {
        parse_job_file(text, "job.fio").unwrap_err().to_string()
    }

    #[test]
    fn unsupported_option_is_refused_with_its_name_and_line() {
        let e = err("[global]\nbs=4k\n\n[j]\nioengine=libaio\n");
        assert!(e.contains("job.fio:5:"), "{e}");
        assert!(e.contains("\"ioengine\" is not supported"), "{e}");
        let e = err("[j]\nrw=read\ndirect\n");
        assert!(e.contains("job.fio:3:") && e.contains("\"direct\""), "{e}");
    }

    #[test]
    fn bad_values_are_refused_with_their_line() {
        let e = err("[j]\nrw=sideways\n");
        assert!(e.contains("job.fio:2:") && e.contains("sideways"), "{e}");
        let e = err("[j]\n\nbs=4q\n");
        assert!(e.contains("job.fio:3:") && e.contains("4q"), "{e}");
        let e = err("[j]\nrwmixread=101\n");
        assert!(e.contains("job.fio:2:") && e.contains("0..=100"), "{e}");
        let e = err("[j]\niodepth\n");
        assert!(
            e.contains("job.fio:2:") && e.contains("needs a value"),
            "{e}"
        );
        let e = err("[j]\nverify=xxhash\n");
        assert!(e.contains("job.fio:2:") && e.contains("crc32c"), "{e}");
        let e = err("[j]\ntime_based=yes\n");
        assert!(e.contains("job.fio:2:") && e.contains("0 or 1"), "{e}");
        let e = err("[j]\nnumjobs=99999999999\n");
        assert!(e.contains("too large"), "{e}");
    }

    #[test]
    fn structure_errors() {
        let e = err("rw=read\n[j]\n");
        assert!(
            e.contains("job.fio:1:") && e.contains("before any [section]"),
            "{e}"
        );
        let e = err("[global]\nrw=read\n");
        assert!(e.contains("no job section"), "{e}");
        let e = err("[j\n");
        assert!(
            e.contains("job.fio:1:") && e.contains("bad section header"),
            "{e}"
        );
        assert!(err("").contains("no job section"));
    }

    #[test]
    fn or_prefers_the_upper_layer() {
        let upper = JobSettings {
            iodepth: Some(1),
            ..JobSettings::default()
        };
        let lower = JobSettings {
            iodepth: Some(8),
            numjobs: Some(3),
            ..JobSettings::default()
        };
        let m = upper.or(&lower);
        assert_eq!((m.iodepth, m.numjobs, m.rw), (Some(1), Some(3), None));
    }
}
