//! Runs the verbs conformance suite (`nvmf_verbs::conformance`) on a provider
//! and prints one line per property: `PASS name`, `FAIL name: reason`, or `N/A name:
//! reason` for a property the provider declares it cannot offer. Exits 1 when any
//! property failed, 2 on bad usage or when the device cannot be opened.
//!
//!     verbs-conformance [--timeout SECS] [--grace MS] [--first-port PORT] rdma IPV4 [PROPERTY...]
//!     verbs-conformance soft [PROPERTY...]
//!
//! `rdma IPV4` runs on the rdma-sys provider over rdma_cm, on the RDMA device that owns
//! IPV4 (e.g. soft-RoCE's rxe0 address), both ends of every connection on that address,
//! listening on ports from `--first-port` (default 4700) upwards. `soft` runs on the
//! software provider (a check of the runner itself). The interop case
//! `rdma-verbs-conformance` runs it in the guest on rxe0.

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvmf_verbs::conformance::{self, Fabric, Verdict, PROPERTIES};
use nvmf_verbs::soft::SoftDevice;

const USAGE: &str = "usage: verbs-conformance [--timeout SECS] [--grace MS] [--first-port PORT] \
                     (rdma IPV4 | soft) [PROPERTY...]";

struct Args {
    timeout: Duration,
    grace: Duration,
    first_port: u16,
    provider: String,
    ip: Option<String>,
    only: Vec<String>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        timeout: Duration::from_secs(20),
        grace: Duration::from_millis(200),
        first_port: 4700,
        provider: String::new(),
        ip: None,
        only: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    let mut rest = Vec::new();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--timeout" => {
                let v = value("--timeout")?;
                a.timeout = Duration::from_secs(v.parse().map_err(|_| format!("--timeout {v}"))?);
            }
            "--grace" => {
                let v = value("--grace")?;
                a.grace = Duration::from_millis(v.parse().map_err(|_| format!("--grace {v}"))?);
            }
            "--first-port" => {
                let v = value("--first-port")?;
                a.first_port = v.parse().map_err(|_| format!("--first-port {v}"))?;
            }
            "-h" | "--help" => return Err(String::new()),
            _ => rest.push(arg),
        }
    }
    let mut rest = rest.into_iter();
    a.provider = rest.next().ok_or("no provider given")?;
    if a.provider == "rdma" {
        a.ip = Some(rest.next().ok_or("rdma needs the device's IPv4 address")?);
    } else if a.provider != "soft" {
        return Err(format!("unknown provider {:?}", a.provider));
    }
    a.only = rest.collect();
    for name in &a.only {
        if conformance::property(name).is_none() {
            return Err(format!("no property {name:?}"));
        }
    }
    Ok(a)
}

#[cfg(feature = "rdma")]
fn rdma_fabric(ip: &str, first_port: u16) -> Result<Fabric, String> {
    use nvmf_verbs::rdma::RdmaDevice;
    use nvmf_verbs::Device;
    let dev = RdmaDevice::for_local_addr(&format!("{ip}:0"))
        .map_err(|e| format!("no RDMA device for {ip}: {e}"))?;
    println!("device {} for {ip} (limits {:?})", dev.name(), dev.limits());
    Ok(Fabric::new(dev, Fabric::ip_ports(ip, first_port)).lacking(
        conformance::Need::RemoteInvalidate,
        "ibv_reg_mr regions cannot be invalidated remotely (only fast-registration MRs \
         and type-2 memory windows can, which the verbs interface does not offer)",
    ))
}

#[cfg(not(feature = "rdma"))]
fn rdma_fabric(_ip: &str, _first_port: u16) -> Result<Fabric, String> {
    Err("built without the `rdma` feature".into())
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("verbs-conformance: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fabric = match args.ip.as_deref() {
        Some(ip) => match rdma_fabric(ip, args.first_port) {
            Ok(f) => f,
            Err(e) => {
                eprintln!("verbs-conformance: {e}");
                return ExitCode::from(2);
            }
        },
        None => {
            let dev = SoftDevice::new();
            dev.set_rnr_timeout(args.timeout);
            let n = AtomicU32::new(0);
            Fabric::new(dev, move || {
                format!("conformance-{}", n.fetch_add(1, Ordering::Relaxed))
            })
        }
    };
    let fabric = Arc::new(fabric.with_timeout(args.timeout).with_grace(args.grace));
    let (mut passed, mut failed, mut na) = (0, 0, 0);
    for p in PROPERTIES {
        if !args.only.is_empty() && !args.only.iter().any(|n| n == p.name) {
            continue;
        }
        let start = Instant::now();
        let f = Arc::clone(&fabric);
        // A provider bug that panics fails its property, not the run.
        let verdict =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| conformance::run(&f, p)))
                .unwrap_or_else(|e| {
                    let msg = e
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    Verdict::Fail(format!("panicked: {msg}"))
                });
        let ms = start.elapsed().as_millis();
        match verdict {
            Verdict::Pass => {
                passed += 1;
                println!("PASS {} ({ms} ms)", p.name);
            }
            Verdict::Fail(why) => {
                failed += 1;
                println!("FAIL {}: {why}", p.name);
            }
            Verdict::NotApplicable(why) => {
                na += 1;
                println!("N/A {}: {why}", p.name);
            }
        }
    }
    println!("verbs conformance: {passed} passed, {failed} failed, {na} not applicable");
    if failed == 0 && passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
