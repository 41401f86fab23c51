//! `perf --job-file` (issue 16, deliverable 4): the `nvmf-initiator` binary runs an fio
//! job file's sections one after another against one in-process (loopback) target (a
//! read section verifies what a write section wrote), the command line overriding the
//! file, and refuses an unsupported option by name and line.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

/// A job file removed on drop.
struct JobFile(PathBuf);

impl JobFile {
    fn new(tag: &str, text: &str) -> JobFile {
        let p = std::env::temp_dir().join(format!(
            "nvmf-perf-jobfile-{}-{tag}.fio",
            std::process::id()
        ));
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("{e}"));
        JobFile(p)
    }
}

impl Drop for JobFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn perf(job: &JobFile, extra: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_nvmf-initiator"))
        .args(["perf", "-t", "loopback", "--namespace", "ram:64M"])
        .args([
            "-q",
            "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000e1",
        ])
        .args(["-I", "00000000-0000-4000-8000-0000000000e1", "--job-file"])
        .arg(&job.0)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn two_sections_run_in_order_with_the_command_line_overriding() {
    let job = JobFile::new(
        "two",
        "[global]\nbs=4k\niodepth=4\nsize=8M\n\n\
         [fill]\nrw=write\nverify=crc32c\n\n\
         [check]\nstonewall\nrw=randread\nruntime=300ms\nverify=crc32c\n",
    );
    let out = perf(&job, &["--iodepth", "2", "--output-format", "json"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{err}", out.status);
    let j: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)));
    let groups = j["groups"].as_array().unwrap_or_else(|| panic!("{j}"));
    assert_eq!(groups.len(), 2, "{j}");
    let (fill, check) = (&groups[0], &groups[1]);
    assert_eq!(
        (fill["groupid"].as_u64(), fill["name"].as_str()),
        (Some(0), Some("fill"))
    );
    assert_eq!(fill["options"]["rw"], "write", "{fill}");
    assert_eq!(fill["options"]["verify"], true, "{fill}");
    assert_eq!(
        fill["options"]["iodepth"], 2,
        "the command line wins: {fill}"
    );
    assert_eq!(
        fill["options"]["runtime"],
        serde_json::Value::Null,
        "size alone: one pass"
    );
    assert_eq!(fill["options"]["size"], 8 << 20, "{fill}");
    assert_eq!(check["name"], "check");
    assert_eq!(check["options"]["rw"], "randread", "{check}");
    // The second section reads back, and checks, what the first wrote: the sections
    // share one (in-process) target.
    assert_eq!(check["options"]["verify"], true, "{check}");
    assert!(
        check["verify"]["blocks_checked"].as_u64().unwrap_or(0) > 0,
        "{check}"
    );
    assert_eq!(check["options"]["iodepth"], 2, "{check}");
    assert_eq!(check["options"]["runtime"], 300, "{check}");
    for g in groups {
        assert_eq!(g["verify"]["failures"], 0, "{g}");
        let ios: u64 = g["jobs"]
            .as_array()
            .map(|js| {
                js.iter()
                    .map(|x| {
                        x["read"]["total_ios"].as_u64().unwrap_or(0)
                            + x["write"]["total_ios"].as_u64().unwrap_or(0)
                    })
                    .sum()
            })
            .unwrap_or(0);
        assert!(ios > 0, "no I/O in {g}");
    }
    // One pass of 8 MiB in 4 KiB writes.
    let written: u64 = groups[0]["jobs"]
        .as_array()
        .map(|js| {
            js.iter()
                .map(|x| x["write"]["total_ios"].as_u64().unwrap_or(0))
                .sum()
        })
        .unwrap_or(0);
    assert_eq!(written, 2048, "{}", groups[0]);
}

#[test]
fn unsupported_option_is_refused_before_connecting() {
    let job = JobFile::new("bad", "[global]\nbs=4k\n[j]\nrw=read\nioengine=libaio\n");
    let out = perf(&job, &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error: {err}");
    assert!(
        err.contains(":5: option \"ioengine\" is not supported by perf"),
        "{err}"
    );
}
