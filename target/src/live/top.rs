//! `nvmf-target ctl top`: rates from two metrics snapshots, per poll group,
//! subsystem, namespace and host (what `spdk_top` and `iostat -x` show).
//!
//! Ownership: a client-side view. It asks the admin socket for a
//! [`Snapshot`](crate::metrics::Snapshot) every interval ([`super::ctl::Request::Metrics`])
//! and renders the difference with the previous one ([`render`], a pure function).
//! On a terminal it draws full-screen with plain ANSI sequences in raw mode and quits
//! on `q` or Ctrl-C, restoring the terminal ([`TermGuard`]); otherwise it prints
//! snapshots one after another.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{self, LocalFlags, SetArg, Termios};

use super::ctl::Request;
use super::endpoint::Endpoint;
use crate::metrics::cell::{ClassSnapshot, CLASS_OTHER, CLASS_READ, CLASS_WRITE};
use crate::metrics::Snapshot;

/// Seconds between refreshes unless `--interval` says otherwise.
const DEFAULT_INTERVAL: f64 = 1.0;
/// Shortest interval accepted (the admin socket serves one request at a time).
const MIN_INTERVAL: f64 = 0.1;
const NS_PER_SEC: f64 = 1e9;
const NS_PER_US: f64 = 1e3;
const BYTES_PER_MB: f64 = 1e6;
/// Keys that end the full-screen view: q, Q, Ctrl-C (raw mode delivers it as a byte).
const QUIT_KEYS: [u8; 3] = [b'q', b'Q', 0x03];
/// Width of the name column; longer names (NQNs) keep their tail, which differs.
const NAME_WIDTH: usize = 44;
/// ANSI: alternate screen and hidden cursor on; the reverse; home and clear.
const ENTER_SCREEN: &str = "\x1b[?1049h\x1b[?25l";
const LEAVE_SCREEN: &str = "\x1b[?25h\x1b[?1049l";
const HOME_CLEAR: &str = "\x1b[H\x1b[2J";

/// `ctl top` options.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct TopArgs {
    /// Seconds between refreshes.
    #[arg(long, default_value_t = DEFAULT_INTERVAL)]
    pub interval: f64,
    /// Stop after this many refreshes (default: until q, Ctrl-C or a signal).
    #[arg(long)]
    pub iterations: Option<u64>,
}

/// Rates of one row over one interval.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Rates {
    pub read_iops: f64,
    pub write_iops: f64,
    pub other_iops: f64,
    pub read_mbps: f64,
    pub write_mbps: f64,
    /// Mean latency in µs (0 without commands).
    pub read_await_us: f64,
    pub write_await_us: f64,
    /// Average commands outstanding (iostat's aqu-sz: latency time over wall time).
    pub queue_depth: f64,
}

fn rates(prev: &[ClassSnapshot], cur: &[ClassSnapshot], secs: f64) -> Rates {
    let d = |class: usize| -> (f64, f64, f64) {
        let (a, b) = (prev.get(class), cur.get(class));
        let f = |g: fn(&ClassSnapshot) -> u64| {
            let now = b.map_or(0, g);
            now.saturating_sub(a.map_or(0, g)) as f64
        };
        (f(|c| c.commands), f(|c| c.bytes), f(|c| c.latency_ns))
    };
    let (rc, rb, rl) = d(CLASS_READ);
    let (wc, wb, wl) = d(CLASS_WRITE);
    let (oc, _, ol) = d(CLASS_OTHER);
    let per = |v: f64| if secs > 0.0 { v / secs } else { 0.0 };
    let mean = |lat: f64, n: f64| if n > 0.0 { lat / n / NS_PER_US } else { 0.0 };
    Rates {
        read_iops: per(rc),
        write_iops: per(wc),
        other_iops: per(oc),
        read_mbps: per(rb) / BYTES_PER_MB,
        write_mbps: per(wb) / BYTES_PER_MB,
        read_await_us: mean(rl, rc),
        write_await_us: mean(wl, wc),
        queue_depth: per((rl + wl + ol) / NS_PER_SEC),
    }
}

/// Sums the cells of `s` by `key` (a row of one table).
fn by<K: Ord>(
    s: &Snapshot,
    key: impl Fn(&crate::metrics::CellKey) -> Option<K>,
) -> BTreeMap<K, Vec<ClassSnapshot>> {
    let mut m: BTreeMap<K, Vec<ClassSnapshot>> = BTreeMap::new();
    for c in &s.cells {
        let Some(k) = key(&c.key) else { continue };
        let v = m.entry(k).or_default();
        if v.len() < c.classes.len() {
            v.resize(c.classes.len(), ClassSnapshot::default());
        }
        for (a, b) in v.iter_mut().zip(&c.classes) {
            a.add(b);
        }
    }
    m
}

fn short(name: &str) -> String {
    let n = name.chars().count();
    if n <= NAME_WIDTH {
        return name.to_string();
    }
    let tail: String = name.chars().skip(n - (NAME_WIDTH - 1)).collect();
    format!("…{tail}")
}

const IO_HEADER: &str = "     r/s      w/s  other/s  rMB/s  wMB/s r_await w_await aqu-sz";

fn io_cols(r: &Rates) -> String {
    format!(
        "{:>8.0} {:>8.0} {:>8.0} {:>6.1} {:>6.1} {:>7.1} {:>7.1} {:>6.2}",
        r.read_iops,
        r.write_iops,
        r.other_iops,
        r.read_mbps,
        r.write_mbps,
        r.read_await_us,
        r.write_await_us,
        r.queue_depth
    )
}

fn table<K: Ord + Clone>(
    out: &mut String,
    title: &str,
    extra_header: &str,
    prev: &BTreeMap<K, Vec<ClassSnapshot>>,
    cur: &BTreeMap<K, Vec<ClassSnapshot>>,
    secs: f64,
    label: impl Fn(&K) -> (String, String),
) {
    let _ = writeln!(out, "{:<NAME_WIDTH$} {extra_header}{IO_HEADER}", title);
    let empty = Vec::new();
    for (k, c) in cur {
        let r = rates(prev.get(k).unwrap_or(&empty), c, secs);
        let (name, extra) = label(k);
        let _ = writeln!(out, "{:<NAME_WIDTH$} {extra}{}", short(&name), io_cols(&r));
    }
    let _ = writeln!(out);
}

/// The screen for the interval from `prev` to `cur` (at most `width` columns wide
/// would be nicer; lines are left whole so a plain-text capture keeps everything).
pub fn render(prev: &Snapshot, cur: &Snapshot) -> String {
    let secs = cur.uptime_ns.saturating_sub(prev.uptime_ns) as f64 / NS_PER_SEC;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "nvmf-target top: interval {secs:.2} s, uptime {:.0} s, {} controller(s)",
        cur.uptime_ns as f64 / NS_PER_SEC,
        cur.controllers.len()
    );
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "{:<NAME_WIDTH$}  busy%  idle%  queues    cmds/s  bufs",
        "POLL GROUP"
    );
    for g in &cur.groups {
        let p = prev.groups.iter().find(|p| p.name == g.name);
        let d = |f: fn(&crate::runtime::GroupCounters) -> u64| {
            f(&g.counters).saturating_sub(p.map_or(0, |p| f(&p.counters))) as f64
        };
        let (busy, idle) = (d(|c| c.busy_ns), d(|c| c.idle_ns));
        let total = busy + idle;
        let busy_pct = if total > 0.0 {
            100.0 * busy / total
        } else {
            0.0
        };
        let cmds = if secs > 0.0 {
            d(|c| c.commands) / secs
        } else {
            0.0
        };
        let _ = writeln!(
            out,
            "{:<NAME_WIDTH$} {:>6.1} {:>6.1} {:>7} {:>9.0} {:>5}",
            g.name,
            busy_pct,
            if total > 0.0 { 100.0 - busy_pct } else { 0.0 },
            g.counters.queues,
            cmds,
            g.counters.buffers_in_use
        );
    }
    let _ = writeln!(out);
    // Connections and I/O queues per subsystem and per host.
    let mut conns: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut host_conns: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for c in &cur.controllers {
        for (m, k) in [(&mut conns, &c.subsystem), (&mut host_conns, &c.host)] {
            let e = m.entry(k.as_str()).or_default();
            e.0 += 1;
            e.1 += c.io_queues;
        }
    }
    let subs = |s: &Snapshot| by(s, |k| Some(k.subsystem.clone()));
    let mut cur_subs = subs(cur);
    for (nqn, _) in &cur.namespaces {
        cur_subs.entry(nqn.clone()).or_default();
    }
    table(
        &mut out,
        "SUBSYSTEM",
        "ctrls ioqs",
        &subs(prev),
        &cur_subs,
        secs,
        |k: &String| {
            let (c, q) = conns.get(k.as_str()).copied().unwrap_or_default();
            (k.clone(), format!("{c:>5} {q:>4}"))
        },
    );
    let nss = |s: &Snapshot| by(s, |k| (k.nsid != 0).then(|| (k.subsystem.clone(), k.nsid)));
    let mut cur_ns = nss(cur);
    for (nqn, nsid) in &cur.namespaces {
        cur_ns.entry((nqn.clone(), *nsid)).or_default();
    }
    table(
        &mut out,
        "NAMESPACE",
        " nsid ",
        &nss(prev),
        &cur_ns,
        secs,
        |k: &(String, u32)| (k.0.clone(), format!("{:>5} ", k.1)),
    );
    qos_table(&mut out, prev, cur, secs);
    let hosts = |s: &Snapshot| by(s, |k| Some(k.host.clone()));
    table(
        &mut out,
        "HOST",
        "ctrls ioqs",
        &hosts(prev),
        &hosts(cur),
        secs,
        |k: &String| {
            let (c, q) = host_conns.get(k.as_str()).copied().unwrap_or_default();
            (k.clone(), format!("{c:>5} {q:>4}"))
        },
    );
    out
}

/// Namespaces with QoS limits: the limits, commands held per second, the mean
/// number held over the interval (throttled time / interval) and held now.
fn qos_table(out: &mut String, prev: &Snapshot, cur: &Snapshot, secs: f64) {
    if cur.qos.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "{:<NAME_WIDTH$}  nsid  held/s  avg-held  queued  limits",
        "QOS"
    );
    for q in &cur.qos {
        let p = prev
            .qos
            .iter()
            .find(|p| p.subsystem == q.subsystem && p.nsid == q.nsid);
        let d = |f: fn(&crate::qos::QosStats) -> u64| {
            f(&q.stats).saturating_sub(p.map_or(0, |p| f(&p.stats))) as f64
        };
        let (held, waited) = if secs > 0.0 {
            (
                d(|s| s.throttled_commands) / secs,
                d(|s| s.throttled_ns) / NS_PER_SEC / secs,
            )
        } else {
            (0.0, 0.0)
        };
        let limits: Vec<String> = crate::config::QOS_KEYS
            .iter()
            .zip(q.stats.limits.as_array())
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{}={v}", k.trim_end_matches("_per_sec")))
            .collect();
        let _ = writeln!(
            out,
            "{:<NAME_WIDTH$} {:>5} {:>7.0} {:>9.1} {:>7}  {}",
            short(&q.subsystem),
            q.nsid,
            held,
            waited,
            q.stats.queued,
            if limits.is_empty() {
                "unlimited".to_string()
            } else {
                limits.join(" ")
            }
        );
    }
    let _ = writeln!(out);
}

fn fetch(target: &mut Endpoint) -> Result<Snapshot, String> {
    let resp = target.request(&Request::Metrics)?;
    match (resp.ok, resp.metrics) {
        (true, Some(m)) => Ok(m),
        (_, _) => Err(resp
            .error
            .unwrap_or_else(|| "the target sent no metrics (an older target?)".into())),
    }
}

/// Puts the terminal into raw mode and the alternate screen; [`Drop`] restores both,
/// whatever way the view ends.
struct TermGuard {
    saved: Option<Termios>,
}

impl TermGuard {
    fn enter() -> Result<TermGuard, String> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(stdin.as_fd()).ok();
        if let Some(s) = &saved {
            let mut raw = s.clone();
            // No line buffering, no echo, and Ctrl-C as a byte (so it quits cleanly
            // through the same path as q instead of killing us mid-redraw).
            raw.local_flags
                .remove(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG);
            termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)
                .map_err(|e| format!("terminal: {e}"))?;
        }
        let mut o = std::io::stdout();
        let _ = o.write_all(ENTER_SCREEN.as_bytes());
        let _ = o.flush();
        Ok(TermGuard { saved })
    }
}

impl Drop for TermGuard {
    fn drop(&mut self) {
        let mut o = std::io::stdout();
        let _ = o.write_all(LEAVE_SCREEN.as_bytes());
        let _ = o.flush();
        if let Some(s) = &self.saved {
            let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, s);
        }
    }
}

nix::ioctl_read_bad!(tiocgwinsz, libc::TIOCGWINSZ, libc::winsize);

/// The terminal's (columns, rows), when stdout is one that says.
fn term_size() -> Option<(usize, usize)> {
    let mut ws = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let fd = std::os::fd::AsRawFd::as_raw_fd(&std::io::stdout());
    // SAFETY: TIOCGWINSZ only writes one `winsize` into `ws`, which outlives the call;
    // `fd` is this process's stdout, open for the whole call.
    let r = unsafe { tiocgwinsz(fd, &mut ws) };
    match r {
        Ok(_) if ws.ws_col > 0 && ws.ws_row > 0 => {
            Some((usize::from(ws.ws_col), usize::from(ws.ws_row)))
        }
        _ => None,
    }
}

/// `screen` cut to the terminal, so nothing wraps or scrolls the view away; lines in
/// raw mode end with a carriage return too.
fn fit(screen: &str, size: Option<(usize, usize)>) -> String {
    let (cols, rows) = size.unwrap_or((usize::MAX, usize::MAX));
    // The last row holds the "(q quits)" hint.
    let body_rows = rows.saturating_sub(1);
    let mut out = String::new();
    for line in screen.lines().take(body_rows) {
        out.extend(line.chars().take(cols));
        out.push_str("\r\n");
    }
    out
}

/// Waits up to `d` for a key; true when it is one of [`QUIT_KEYS`] (or stdin ended).
fn quit_requested(d: Duration) -> bool {
    let stdin = std::io::stdin();
    let deadline = Instant::now() + d;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(stdin.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => return false,
            Ok(_) => {
                let mut b = [0u8; 16];
                match nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&stdin), &mut b) {
                    Ok(0) => return true,
                    Ok(n) => {
                        if b.get(..n)
                            .is_some_and(|k| k.iter().any(|c| QUIT_KEYS.contains(c)))
                        {
                            return true;
                        }
                    }
                    Err(nix::errno::Errno::EINTR) => {}
                    Err(_) => return true,
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                std::thread::sleep(left);
                return false;
            }
        }
    }
}

/// Runs the view against `target`.
pub fn run(target: &mut Endpoint, args: &TopArgs) -> Result<(), String> {
    if !args.interval.is_finite() || args.interval < MIN_INTERVAL {
        return Err(format!("--interval must be at least {MIN_INTERVAL} s"));
    }
    let interval = Duration::from_secs_f64(args.interval);
    let tty = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
    let mut prev = fetch(target)?;
    let mut done = 0u64;
    let guard = if tty { Some(TermGuard::enter()?) } else { None };
    if guard.is_some() {
        print!(
            "{HOME_CLEAR}nvmf-target top: first sample in {:.1} s (q quits)\r\n",
            args.interval
        );
        let _ = std::io::stdout().flush();
    }
    loop {
        if args.iterations.is_some_and(|n| done >= n) {
            return Ok(());
        }
        if guard.is_some() {
            if quit_requested(interval) {
                return Ok(());
            }
        } else {
            std::thread::sleep(interval);
        }
        let cur = fetch(target)?;
        let screen = render(&prev, &cur);
        let mut o = std::io::stdout();
        let written = if guard.is_some() {
            let body = fit(&screen, term_size());
            write!(o, "{HOME_CLEAR}{body}(q quits)").and_then(|()| o.flush())
        } else {
            writeln!(o, "{screen}").and_then(|()| o.flush())
        };
        if written.is_err() {
            // The reader went away (a closed pipe): nothing more to show.
            return Ok(());
        }
        prev = cur;
        done += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{CellKey, CellSnapshot};

    fn snap(uptime_s: u64, reads: u64, bytes: u64, lat_ns: u64) -> Snapshot {
        let class = |commands, bytes, latency_ns| ClassSnapshot {
            commands,
            bytes,
            latency_ns,
            buckets: Vec::new(),
        };
        Snapshot {
            uptime_ns: uptime_s * 1_000_000_000,
            cells: vec![CellSnapshot {
                key: CellKey {
                    subsystem: "nqn.s".into(),
                    nsid: 1,
                    host: "nqn.h".into(),
                    portid: 1,
                    group: "g".into(),
                },
                classes: vec![class(reads, bytes, lat_ns), class(0, 0, 0), class(0, 0, 0)],
                errors: Vec::new(),
            }],
            namespaces: vec![("nqn.s".into(), 1)],
            ..Snapshot::default()
        }
    }

    #[test]
    fn rates_are_deltas_over_the_interval() {
        // 1000 reads of 4 KiB in 2 s, 100 µs each: 500/s, 2.048 MB/s, QD 0.05.
        let (a, b) = (snap(10, 0, 0, 0), snap(12, 1000, 4_096_000, 100_000_000));
        let r = rates(&a.cells[0].classes, &b.cells[0].classes, 2.0);
        assert_eq!(r.read_iops, 500.0);
        assert!((r.read_mbps - 2.048).abs() < 1e-9);
        assert!((r.read_await_us - 100.0).abs() < 1e-9);
        assert!((r.queue_depth - 0.05).abs() < 1e-9);
        let screen = render(&a, &b);
        let row = screen
            .lines()
            .skip_while(|l| !l.starts_with("NAMESPACE"))
            .nth(1)
            .unwrap_or_default();
        assert!(
            row.starts_with("nqn.s") && row.contains(" 500 "),
            "{screen}"
        );
    }

    #[test]
    fn fit_cuts_to_the_terminal() {
        let s = "abcdef\nghijkl\nmnopqr\n";
        assert_eq!(fit(s, Some((3, 3))), "abc\r\nghi\r\n");
        assert_eq!(fit(s, None), "abcdef\r\nghijkl\r\nmnopqr\r\n");
    }
}
